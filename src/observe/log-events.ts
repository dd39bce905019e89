// Logging as one subscriber of the client's and worker's events (as metrics are): the lease and
// scheduler code emits events and never logs them itself. A level the logger has turned off
// (pino's isLevelEnabled, or the default logger's level) gets no listener, so an event nobody
// else listens to builds no payload at all.
import { skippedSlotFields, type LeaseholdEmitter, type LeaseholdEvents } from './events.js';
import type { Logger } from './logger.js';
import { endedByServer } from '../db/server-restart.js';

type Level = 'debug' | 'info' | 'warn' | 'error';

/** Subscribes `logger` to `events`; returns the function that unsubscribes it. */
export function logEvents(events: LeaseholdEmitter, logger: Logger): () => void {
  const enabled = (level: Level) => logger.isLevelEnabled?.(level) ?? true;
  const stops: Array<() => void> = [];
  const on = <E extends keyof LeaseholdEvents>(levels: Level[], event: E, listener: (...args: LeaseholdEvents[E]) => void) => {
    if (levels.some(enabled)) stops.push(events.on(event, listener));
  };
  const iso = (date: Date | null | undefined) => date?.toISOString();

  on(['debug', 'info'], 'lease:acquired', (lease) => {
    if (lease.tookOver && enabled('info')) {
      logger.info({ event: 'lease:takeover', lease: lease.name, fence: lease.fence }, `lease "${lease.name}" taken over from a holder that never released it`);
    }
    if (enabled('debug')) logger.debug({ event: 'lease:acquired', lease: lease.name, fence: lease.fence }, `lease "${lease.name}" acquired`);
  });
  on(['debug'], 'lease:released', (lease, released) => logger.debug({ event: 'lease:released', lease: lease.name, fence: lease.fence, released }, 'lease released'));
  on(['warn'], 'lease:lost', (lease, error) =>
    logger.warn(
      { event: 'lease:lost', lease: lease.name, fence: lease.fence, holder: lease.holder, reason: error.reason, err: error.message },
      `lease "${lease.name}" lost (${error.reason})`,
    ),
  );
  on(['warn'], 'liveness:lost', (error) =>
    logger.warn(
      { event: 'liveness:lost', err: error.message },
      endedByServer(error)
        ? 'leasehold liveness session ended by the server; its leases are kept if the server restarted (taken back by the next session), lost otherwise'
        : 'leasehold liveness session dropped; its leases are lost',
    ),
  );
  on(['warn'], 'replication:warning', (report) =>
    logger.warn({ event: 'replication:warning', ...report }, [report.warning, report.epochWarning].filter(Boolean).join('; ') || 'replication warning'),
  );
  on(['warn'], 'clock:step', (step) => {
    const seconds = `${step.deltaMs > 0 ? '+' : ''}${(step.deltaMs / 1000).toFixed(1)} s`;
    logger.warn(
      { event: 'clock:step', deltaMs: step.deltaMs, databaseTime: step.databaseTime.toISOString(), expected: step.expected.toISOString() },
      `the database clock stepped ${seconds} (now ${step.databaseTime.toISOString()}); ` +
        (step.deltaMs > 0 ? 'leases whose expiry it passed are lost' : 'leases keep their local deadlines; scheduling follows the database time'),
    );
  });
  on(['info'], 'run:started', (run) =>
    logger.info({ job: run.job, slot: iso(run.slot), fence: run.fence, event: 'run:started' }, `run of "${run.job}" started (fence ${run.fence})`),
  );
  on(['info', 'warn', 'error'], 'run:finished', (run) => {
    const fields = { job: run.job, slot: iso(run.slot), fence: run.fence, event: 'run:finished', outcome: run.outcome, durationMs: run.durationMs };
    const line = `run of "${run.job}" ${run.outcome} after ${Math.round(run.durationMs)} ms (fence ${run.fence})`;
    if (run.outcome === 'succeeded') {
      if (enabled('info')) logger.info(fields, line);
    } else if (run.outcome === 'failed') logger.error({ ...fields, err: run.error }, line);
    else logger.warn({ ...fields, err: run.error }, line);
  });
  on(['warn'], 'slot:skipped', (skip) =>
    logger.warn(
      { event: 'slot:skipped', ...skippedSlotFields(skip) },
      `skipped "${skip.job}" slot ${skip.slot.toISOString()}: still held by ${skip.holder} (fence ${skip.holderFence}, slot ${iso(skip.holderSlot)}) ` +
        `for ${skip.heldMs === null ? '?' : (skip.heldMs / 1000).toFixed(1)}s${skip.buffered ? '; buffered to run next' : ''}`,
    ),
  );
  on(['warn'], 'slot:missed', (missed) => {
    const last = missed.slots[missed.slots.length - 1];
    logger.warn(
      { event: 'slot:missed', job: missed.job, count: missed.slots.length },
      `"${missed.job}" missed ${missed.slots.length} slot(s)${last ? ` up to ${last.toISOString()}` : ''}`,
    );
  });
  on(['error'], 'worker:failing', ({ error, failures, since }) =>
    logger.error(
      { event: 'worker:failing', code: error.code, failures, since: since.toISOString(), err: error.message },
      `this worker's claims failed ${failures} times in a row, and will until this is fixed; it runs nothing meanwhile and its health probes fail: ${error.message}`,
    ),
  );
  on(['info'], 'worker:recovered', () => logger.info({ event: 'worker:recovered' }, "this worker's claims succeed again"));
  return () => stops.forEach((stop) => stop());
}
