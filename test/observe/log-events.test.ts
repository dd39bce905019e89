// Logging is a subscriber of the client's and worker's events: the lines it writes for them,
// and no listener (so no payload is built) for a level the logger has turned off.
import { describe, expect, it } from 'vitest';
import { LeaseLostError } from '../../src/errors.js';
import { LeaseholdEmitter } from '../../src/observe/events.js';
import { logEvents } from '../../src/observe/log-events.js';
import { silentLogger, stderrLogger, type Logger } from '../../src/observe/logger.js';

type Line = { level: string; fields: Record<string, unknown>; message: string | undefined };

function collecting(enabled?: (level: string) => boolean): { logger: Logger; lines: Line[] } {
  const lines: Line[] = [];
  const at = (level: string) => (fields: object, message?: string) => lines.push({ level, fields: fields as Record<string, unknown>, message });
  const logger: Logger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
  if (enabled) logger.isLevelEnabled = enabled;
  return { logger, lines };
}

const lease = { name: 'nightly', fence: 7, holder: 'host:1:abc', slot: null };
const slot = new Date('2026-01-01T00:00:00Z');

describe('logEvents', () => {
  it('writes one line per event, at its level, with the fields operators and the fault checker read', () => {
    const { logger, lines } = collecting();
    const events = new LeaseholdEmitter(logger);
    logEvents(events, logger);
    events.emit('lease:lost', lease, new LeaseLostError('nightly', 7, 'taken-over'));
    events.emit('lease:acquired', { ...lease, expiresAt: slot, tookOver: true });
    events.emit('slot:skipped', { job: 'nightly', slot, holder: 'other', holderFence: 6, holderSlot: null, heldMs: 1500, buffered: false });
    events.emit('run:finished', { job: 'nightly', slot, fence: 7, outcome: 'failed', error: 'Error: boom', durationMs: 12 });
    events.emit('run:finished', { job: 'nightly', slot, fence: 7, outcome: 'succeeded', error: null, durationMs: 12 });
    expect(lines.map((l) => [l.level, l.fields.event])).toEqual([
      ['warn', 'lease:lost'],
      ['info', 'lease:takeover'],
      ['debug', 'lease:acquired'],
      ['warn', 'slot:skipped'],
      ['error', 'run:finished'],
      ['info', 'run:finished'],
    ]);
    expect(lines[0]).toMatchObject({ fields: { lease: 'nightly', fence: 7, reason: 'taken-over' }, message: 'lease "nightly" lost (taken-over)' });
    expect(lines[3]!.fields).toMatchObject({ job: 'nightly', slot: slot.toISOString(), holder: 'other' });
    expect(lines[4]!.fields).toMatchObject({ job: 'nightly', fence: 7, outcome: 'failed', err: 'Error: boom' });
  });

  it('does not listen for levels the logger has turned off, so nobody builds those payloads', () => {
    const quiet = new LeaseholdEmitter(silentLogger());
    logEvents(quiet, silentLogger());
    for (const event of ['lease:lost', 'lease:acquired', 'lease:released', 'run:started', 'run:finished', 'slot:skipped'] as const) {
      expect(quiet.wants(event), event).toBe(false);
    }
    const warnOnly = new LeaseholdEmitter(silentLogger());
    logEvents(warnOnly, stderrLogger('warn'));
    expect([warnOnly.wants('lease:lost'), warnOnly.wants('run:finished'), warnOnly.wants('slot:skipped')]).toEqual([true, true, true]);
    expect([warnOnly.wants('run:started'), warnOnly.wants('lease:released'), warnOnly.wants('lease:acquired'), warnOnly.wants('lease:renewed')]).toEqual([
      false,
      false,
      false,
      false,
    ]);
    const { logger, lines } = collecting((level) => level === 'warn' || level === 'error');
    const events = new LeaseholdEmitter(logger);
    logEvents(events, logger);
    events.emit('run:finished', { job: 'nightly', slot, fence: 7, outcome: 'succeeded', error: null, durationMs: 12 });
    expect(lines).toEqual([]);
  });
});
