// The testing toolkit (src/testing/) that the fixtures, the demo, the fault suite and the
// benchmark share: the JSON-lines child process on both sides, the event vocabulary, the
// database clock probe and the libfaketime helpers.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { LeaseLostError } from '../../src/errors.js';
import { probeDatabaseClock } from '../../src/testing/database-clock.js';
import { EVENT_JSON } from '../../src/testing/events.js';
import { fakeClockEnv, SteppedClock } from '../../src/testing/faketime.js';
import { JsonLinesProcess } from '../../src/testing/json-lines.js';
import { freshDatabase, rawPool } from '../support/db.js';

const ECHO = fileURLToPath(new URL('../fixtures/json-echo.ts', import.meta.url));
const started: JsonLinesProcess[] = [];

async function echo(): Promise<JsonLinesProcess> {
  const proc = await JsonLinesProcess.startScript(ECHO);
  started.push(proc);
  return proc;
}

afterEach(async () => {
  await Promise.allSettled(started.splice(0).map((p) => p.kill()));
});

describe('JSON-lines child processes', () => {
  it('answers commands by id, keeps events but not answers, and reports a failed command', async () => {
    const proc = await echo();
    expect(proc.holderName).toBe('echo');
    expect(await proc.send({ cmd: 'echo', value: { a: [1, 'x'] } })).toEqual({ id: 1, value: { a: [1, 'x'] } });
    expect(await proc.send({ cmd: 'event', n: 5 })).toEqual({ id: 2 });
    // the event came before the answer: already kept, found at once
    expect(await proc.waitFor((l) => l.event === 'tick', 1)).toEqual({ event: 'tick', n: 5 });
    expect(await proc.send({ cmd: 'fail' })).toEqual({ id: 3, error: 'Error: asked to fail' });
    expect(proc.lines.some((l) => 'id' in l)).toBe(false);
  });

  it('keeps a line that is not JSON with stderr, and rejects a wait when the process exits', async () => {
    const proc = await echo();
    proc.write({ cmd: 'noise' });
    const never = proc.waitFor((l) => l.event === 'never', 60_000);
    proc.write({ cmd: 'exit', code: 3 });
    await expect(never).rejects.toThrow(/json-echo\.ts: exited \(3\) before a matching line/);
    expect((await proc.exited).code).toBe(3);
    expect(proc.stderr).toContain('(stdout) not json');
    expect(proc.alive).toBe(false);
  });

  it('kills a stopped process', async () => {
    const proc = await echo();
    proc.signal('SIGSTOP');
    await proc.kill();
    expect(await proc.exited).toEqual({ code: null, signal: 'SIGKILL' });
  });
});

describe('the event vocabulary', () => {
  it('gives dates as ISO strings and errors by reason and message', () => {
    const slot = new Date('2026-01-02T03:04:05.000Z');
    expect(EVENT_JSON['slot:skipped']({ job: 'j', slot, holder: 'h', holderFence: 4, holderSlot: null, heldMs: 12, buffered: true })).toEqual({
      job: 'j',
      slot: '2026-01-02T03:04:05.000Z',
      holder: 'h',
      holderFence: 4,
      holderSlot: null,
      heldMs: 12,
      buffered: true,
    });
    expect(EVENT_JSON['run:finished']({ job: 'j', slot, fence: 2, outcome: 'succeeded', error: null, durationMs: 12.6 })).toMatchObject({ durationMs: 13 });
    const lost = EVENT_JSON['lease:lost']({ name: 'n', fence: 3, holder: 'h', slot: null }, new LeaseLostError('n', 3, 'expired', 'x'.repeat(500)));
    expect(lost).toMatchObject({ name: 'n', fence: 3, reason: 'expired' });
    expect(String(lost.message).length).toBeLessThanOrEqual(300);
  });
});

describe('the database clock probe', () => {
  let url: string;
  beforeAll(async () => {
    url = await freshDatabase();
  });

  it('measures the offset against the local clock it is given', async () => {
    const pool = rawPool(url, 1);
    const probe = await probeDatabaseClock(pool, { samples: 2 });
    expect(Number.isFinite(probe.offsetMs) && probe.roundTripMs >= 0 && Number.isFinite(probe.databaseMs)).toBe(true);
    // a local clock an hour ahead: the database is an hour behind it (generous bounds: any load)
    const ahead = await probeDatabaseClock(pool, { samples: 1, now: () => Date.now() + 3_600_000 });
    expect(ahead.offsetMs - probe.offsetMs).toBeGreaterThan(-3_660_000);
    expect(ahead.offsetMs - probe.offsetMs).toBeLessThan(-3_540_000);
  });
});

describe('libfaketime helpers', () => {
  it('shift a wall clock and leave the monotonic one alone; a stepped clock writes its offset file', () => {
    expect(fakeClockEnv('/lib/x.so', '+5m')).toEqual({ LD_PRELOAD: '/lib/x.so', FAKETIME: '+5m', DONT_FAKE_MONOTONIC: '1' });
    const clock = SteppedClock.create('/lib/x.so');
    try {
      expect(clock.env).toMatchObject({ LD_PRELOAD: '/lib/x.so', FAKETIME_TIMESTAMP_FILE: clock.file, DONT_FAKE_MONOTONIC: '1' });
      expect(readFileSync(clock.file, 'utf8')).toBe('+0s\n');
      clock.set('+3600s');
      expect(readFileSync(clock.file, 'utf8')).toBe('+3600s\n');
    } finally {
      clock.close();
    }
  });
});
