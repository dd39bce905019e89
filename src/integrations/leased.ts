// leased(): turns a callback into one that runs once per scheduled occurrence across a fleet,
// for any scheduler that calls it (node-cron, croner, toad-scheduler, bree, setInterval, Nest).
//
// Each call is mapped to its occurrence (occurrence.ts) and claimed with the scheduler's own
// leasehold.claim(): the same slot guard, skip record, fence and run history as startWorker(), and
// the worker's executeRun() for the run itself (heartbeat, signal, fenced transaction, retries).
import { performance } from 'node:perf_hooks';
import { setTimeout as delay } from 'node:timers/promises';
import { InvalidArgumentError, ShutdownError } from '../errors.js';
import type { Leasehold } from '../client/leasehold.js';
import type { Logger } from '../observe/logger.js';
import { slotsBetween } from '../schedule/schedule.js';
import { formatDuration, parseBoundedDuration, parseDuration, type Duration } from '../validate/duration.js';
import { checkOptionKeys, optionKeys } from '../validate/options.js';
import { SchedulerStore, type ClaimRow } from '../worker/claims.js';
import { executeRunToReport, type RunEnvironment, type RunOutcome } from '../worker/execute-run.js';
import { FinishQueue } from '../worker/finish-queue.js';
import { defineJob, JOB_SCHEDULE_KEYS, type JobContext, type JobDefinition, type JobOptions } from '../job/job.js';
import { defaultToleranceMs, occurrenceFor } from './occurrence.js';
import { trackerOf, type LeaseTracker } from '../lease/tracker.js';

/**
 * The job options a leased callback takes (the same meaning and defaults as startWorker's; the
 * schedule is the one your scheduler fires on, so that each call maps to its occurrence), and two
 * of its own. No `jitter`: the calling scheduler decides when calls come, and a late call still
 * maps to the occurrence it is late for (the nominal slot), so a spread belongs to that scheduler.
 */
export interface LeasedOptions extends Pick<JobOptions, 'name' | 'cron' | 'timezone' | 'every' | 'ttl' | 'overlap' | 'bufferLimit' | 'retry' | 'timeout'> {
  /**
   * How early (on the database clock) a call may come and still count for the coming occurrence;
   * it then waits until the occurrence is due. @default half the interval, at most 30 s
   */
  tolerance?: Duration | undefined;
  /** How long stop() waits for running handlers after aborting them. @default '30s' */
  shutdownGrace?: Duration | undefined;
}

/** Why a call did not run its handler. */
export type LeasedSkipReason =
  /** Another run holds the lease (overlap 'skip'); the skip is recorded once per slot. */
  | 'held'
  /** Another replica claimed this occurrence already (or a later one). */
  | 'slot-taken'
  /** The occurrence was already recorded as skipped. */
  | 'slot-skipped'
  /** The lease row stayed locked by a fenced transaction through the retries. */
  | 'holder-committing'
  /** The database clock still put the occurrence in the future after the retries (it is behind this process's estimate). */
  | 'slot-not-due'
  /** An operator paused the job (leasehold pause): the database refuses its occurrences until resumed. */
  | 'paused'
  /** stop() was called. */
  | 'stopped'
  /** The schedule has no occurrence at or before now. */
  | 'no-occurrence'
  /** The database could not be reached; see `error`. */
  | 'error';

export type LeasedResult =
  | { ran: true; slot: Date; fence: number; outcome: RunOutcome; error: string | null; durationMs: number }
  | { ran: false; slot: Date | null; reason: LeasedSkipReason; holder: string | null; skipRecorded: boolean; error?: string };

export interface LeasedFunction {
  /** Call it from your scheduler; arguments are ignored. Never rejects: the result says what happened. */
  (...ignored: unknown[]): Promise<LeasedResult>;
  readonly job: JobDefinition;
  /** Runs of this function in progress in this process. */
  readonly activeRuns: number;
  /** Refuses further calls, aborts running handlers (ShutdownError), waits up to shutdownGrace, records outcomes. */
  stop(): Promise<void>;
}

const LEASED_OPTION_KEYS = optionKeys<LeasedOptions>({ ...JOB_SCHEDULE_KEYS, retry: true, timeout: true, tolerance: true, shutdownGrace: true });

const RETRY_DELAYS_MS = [25, 100, 400];
// Claim a hair after the occurrence, so that the database (whose now() decides) agrees it is due.
const FIRE_MARGIN_MS = 3;

/**
 * Wraps `handler` for a scheduler that runs on every replica: each occurrence of the schedule
 * runs once across the fleet, a call while the previous run holds the lease is recorded as a
 * skip (naming the holder), and the handler gets the worker's context (signal, slot, fence,
 * idempotency key, fenced transaction, log).
 */
export function leased(leasehold: Leasehold, options: LeasedOptions, handler: (context: JobContext) => Promise<unknown>): LeasedFunction {
  if (!isClient(leasehold)) {
    throw new InvalidArgumentError('leasehold', 'leased() needs a client from createLeasehold() as its first argument.');
  }
  if (!options || typeof options !== 'object') throw new InvalidArgumentError('options', 'leased() needs options such as { name, cron, ttl }.');
  checkOptionKeys(options, LEASED_OPTION_KEYS, typeof options.name === 'string' ? `leased "${options.name}"` : 'leased()');
  if (options.cron === undefined && options.every === undefined) {
    throw new InvalidArgumentError(
      'schedule',
      `leased "${String(options.name)}": give the schedule your scheduler fires on, as cron (with timezone) or every (setInterval's interval), so that each call maps to its occurrence.`,
    );
  }
  const { tolerance, shutdownGrace, ...jobOptions } = options;
  const job = defineJob({ ...jobOptions, handler });
  const toleranceMs = tolerance === undefined ? defaultToleranceMs(job.schedule) : parseTolerance(tolerance, job);
  const graceMs = parseBoundedDuration(shutdownGrace ?? '30s', `leased "${job.name}": shutdownGrace`, 1, 24 * 3_600_000);
  const guard = new SlotGuard(leasehold, job, toleranceMs, graceMs);
  const fn = ((..._ignored: unknown[]) => guard.fire()) as LeasedFunction;
  Object.defineProperties(fn, {
    job: { value: job, enumerable: true },
    activeRuns: { get: () => guard.activeRuns, enumerable: true },
    stop: { value: () => guard.stop(), enumerable: true },
  });
  return fn;
}

/** One job's claims and runs for calls from an outside scheduler. */
class SlotGuard {
  private readonly tracker: LeaseTracker;
  private readonly store: SchedulerStore;
  private readonly finisher: FinishQueue;
  private readonly logger: Logger;
  private readonly shutdown = new AbortController();
  private readonly runs = new Set<Promise<unknown>>();
  private readonly pending = new Map<number, { fence: number; token: string | null }>();
  private registered: Promise<void> | null = null;
  private stopping: Promise<void> | null = null;

  constructor(
    private readonly leasehold: Leasehold,
    private readonly job: JobDefinition,
    private readonly toleranceMs: number,
    private readonly graceMs: number,
  ) {
    this.tracker = trackerOf(leasehold);
    this.store = new SchedulerStore(this.tracker.runtime);
    this.finisher = new FinishQueue(this.store);
    this.logger = this.tracker.runtime.logger;
  }

  get activeRuns(): number {
    return this.runs.size;
  }

  async fire(): Promise<LeasedResult> {
    if (this.shutdown.signal.aborted) return notRun(null, 'stopped');
    let slot: Date | null = null;
    try {
      await this.ready();
      const clock = this.tracker.runtime.clock;
      slot = occurrenceFor(this.job.schedule, clock.now(), this.toleranceMs);
      if (!slot) return notRun(null, 'no-occurrence');
      // Called early (this replica's clock runs ahead): wait until the slot is due on the database clock.
      const early = slot.getTime() - clock.now().getTime();
      if (early > 0 && !(await sleep(early + FIRE_MARGIN_MS, this.shutdown.signal))) return notRun(slot, 'stopped');
      return await this.claim(slot, 0);
    } catch (error) {
      this.logger.error({ event: 'claim:failed', job: this.job.name, err: String(error) }, `claiming "${this.job.name}" failed`);
      return { ...notRun(slot, 'error'), error: String(error) };
    }
  }

  /** Registers the job once (as the worker does), after the first clock sync. */
  private ready(): Promise<void> {
    this.registered ??= (async () => {
      if (!this.tracker.runtime.clock.synced) await this.tracker.runtime.clock.sync();
      await this.store.register([this.job], this.leasehold.holder);
    })().catch((error: unknown) => {
      this.registered = null;
      throw error;
    });
    return this.registered;
  }

  private async claim(slot: Date, attempt: number): Promise<LeasedResult> {
    if (this.shutdown.signal.aborted) return notRun(slot, 'stopped');
    const holderKey = this.tracker.livenessKey();
    const sentAt = performance.now();
    // every row: the caller is told why a slot was not claimed (slot-taken, held, ...)
    const [row] = await this.store.claim([{ job: this.job, slot }], this.leasehold.holder, holderKey, true);
    if (!row) return notRun(slot, 'error');
    this.tracker.runtime.clock.observe(row.database_time, sentAt, performance.now());
    if (row.claimed) {
      if (this.shutdown.signal.aborted) {
        await this.finisher.finish({ job: this.job.name, fence: Number(row.fence), token: row.token, outcome: 'aborted', error: 'stopping', attempts: 0, startedMs: null });
        return notRun(slot, 'stopped');
      }
      if (row.previous_slot) void this.recordMissed(row.previous_slot, row.slot);
      return this.run(row, holderKey, sentAt);
    }
    const retriable = row.reason === 'holder-committing' || row.reason === 'slot-not-due' || row.reason === 'unknown-job';
    if (retriable && attempt < RETRY_DELAYS_MS.length) {
      if (row.reason === 'unknown-job') await this.store.register([this.job], this.leasehold.holder);
      if (!(await sleep(RETRY_DELAYS_MS[attempt] ?? 400, this.shutdown.signal))) return notRun(slot, 'stopped');
      return this.claim(slot, attempt + 1);
    }
    if (row.reason === 'held' && row.skip_recorded) this.reportSkip(row);
    // (held-ahead: a worker claimed the occurrence ahead of it and has not started it yet)
    const reason: LeasedSkipReason =
      row.reason === 'unknown-job' || row.reason === 'claimed' || row.reason === 'removed' ? 'error' : row.reason === 'held-ahead' ? 'slot-taken' : row.reason;
    if (reason === 'slot-not-due' || reason === 'error') {
      this.logger.warn({ event: 'claim:refused', job: this.job.name, slot: slot.toISOString(), reason: row.reason }, `"${this.job.name}" slot ${slot.toISOString()} was not claimed: ${row.reason}`);
    }
    return { ran: false, slot, reason, holder: row.holder, skipRecorded: row.skip_recorded };
  }

  private async run(row: ClaimRow, holderKey: string | null, sentAt: number): Promise<LeasedResult> {
    const env: RunEnvironment = {
      tracker: this.tracker,
      finisher: this.finisher,
      logger: this.logger,
      events: this.tracker.runtime.events,
      holder: this.leasehold.holder,
      shutdown: this.shutdown.signal,
    };
    const fence = Number(row.fence);
    this.pending.set(fence, { fence, token: row.token });
    const run = executeRunToReport(env, this.job, row, holderKey, sentAt);
    this.runs.add(run);
    try {
      const report = await run;
      // buffer-one / buffer-all: the waiting slot starts as soon as this run released the lease
      if (report.nextBufferedSlot && !this.shutdown.signal.aborted) {
        void this.claim(report.nextBufferedSlot, 0).catch((error: unknown) =>
          this.logger.error({ event: 'claim:failed', job: this.job.name, err: String(error) }, 'claiming the buffered slot failed'),
        );
      }
      return { ran: true, slot: report.slot, fence: report.fence, outcome: report.outcome, error: report.error, durationMs: report.durationMs };
    } finally {
      this.runs.delete(run);
      this.pending.delete(fence);
    }
  }

  /** Occurrences between the previous claim and this one that neither ran nor were skipped. */
  private async recordMissed(previous: Date, claimed: Date): Promise<void> {
    const between = slotsBetween(this.job.schedule, previous, new Date(claimed.getTime() - 1), 1_000);
    if (between.length === 0) return;
    try {
      const recorded = await this.store.recordMissed(this.job.name, between, 'no replica claimed it in time', this.leasehold.holder);
      if (recorded > 0) {
        // logged by the client's event logger (log-events.ts), as every slot:missed
        this.tracker.runtime.events.emit('slot:missed', { job: this.job.name, slots: between.slice(0, recorded) });
      }
    } catch (error) {
      this.logger.warn({ event: 'slot:missed-record-failed', job: this.job.name, err: String(error) }, 'could not record missed slots');
    }
  }

  /** Logged and emitted by the replica that recorded the skip: once per slot fleet-wide. */
  private reportSkip(row: ClaimRow): void {
    const heldMs = row.holder_since ? row.database_time.getTime() - row.holder_since.getTime() : null;
    // logged by the client's event logger (log-events.ts), as every slot:skipped: once
    this.tracker.runtime.events.emit('slot:skipped', { job: this.job.name, slot: row.slot, holder: row.holder, holderFence: Number(row.holder_fence), holderSlot: row.holder_slot, heldMs, buffered: row.buffered });
  }

  stop(): Promise<void> {
    this.stopping ??= this.stopRuns();
    return this.stopping;
  }

  private async stopRuns(): Promise<void> {
    this.shutdown.abort(new ShutdownError());
    let timer: NodeJS.Timeout | undefined;
    const grace = new Promise<'timeout'>((resolve) => {
      timer = setTimeout(() => resolve('timeout'), this.graceMs);
    });
    const result = await Promise.race([Promise.allSettled([...this.runs]).then(() => 'done' as const), grace]);
    clearTimeout(timer);
    if (result === 'timeout') {
      // As the worker does: the runs are recorded as aborted and their leases released; their fenced writes are refused from now on.
      this.logger.warn({ event: 'worker:grace-expired', job: this.job.name, running: this.runs.size }, `"${this.job.name}": handlers still running after the grace period; recorded as aborted`);
      await Promise.allSettled(
        [...this.pending.values()].map(({ fence, token }) => this.store.finish(this.job.name, fence, token, 'aborted', 'did not stop within the shutdown grace period', 1)),
      );
    }
    await this.finisher.drain();
  }
}

/** 0 (calls count only for occurrences at or before them) up to the schedule's interval. */
function parseTolerance(tolerance: Duration, job: JobDefinition): number {
  const where = `leased "${job.name}": tolerance`;
  const ms = parseDuration(tolerance, where);
  if (!(ms >= 0 && ms <= job.schedule.nominalIntervalMs)) {
    throw new InvalidArgumentError('tolerance', `${where} must be from 0 to the schedule's interval, ${formatDuration(job.schedule.nominalIntervalMs)} (got ${String(tolerance)}).`);
  }
  return ms;
}

function notRun(slot: Date | null, reason: LeasedSkipReason): LeasedResult {
  return { ran: false, slot, reason, holder: null, skipRecorded: false };
}

/** Waits `ms` unless the signal fires first; false when it did. */
function sleep(ms: number, signal: AbortSignal): Promise<boolean> {
  return delay(ms, undefined, { signal }).then(
    () => true,
    () => false,
  );
}

/** A client made by createLeasehold() (the only kind that has a lease tracker). */
function isClient(value: unknown): value is Leasehold {
  if (typeof value !== 'object' || value === null) return false;
  try {
    trackerOf(value);
    return true;
  } catch {
    return false;
  }
}
