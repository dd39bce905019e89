// Job definitions: validated once, up front, with messages that say what to change.
import type pg from 'pg';
import { InvalidArgumentError } from '../errors.js';
import type { Lease } from '../lease/lease.js';
import type { JobLogger } from '../observe/child-logger.js';
import { jitterOffsetMs } from '../schedule/jitter.js';
import { parseSchedule, type Schedule } from '../schedule/schedule.js';
import { formatDuration, parseBoundedDuration, parseDuration, type Duration } from '../validate/duration.js';
import { durationSetting, integerSetting } from '../validate/settings.js';
import { JOB_DEFAULTS } from './defaults.js';
import { checkLeaseName } from '../validate/names.js';
import { checkOptionKeys, hasUnknownKey, optionKeys } from '../validate/options.js';

/**
 * What happens when a slot comes due while the previous run still holds the lease:
 * - `skip`: the new slot does not run; the skip is recorded once, naming the holder.
 * - `buffer-one`: the first skipped slot waits and starts as soon as the holder releases
 *   (on any worker); further skipped slots are skipped.
 * - `buffer-all`: skipped slots queue (up to `bufferLimit`) and run in order, one at a time.
 * - `replace`: the new slot takes the lease over; the old run's signal fires and its fenced
 *   writes are refused.
 * - `allow`: no lease; runs may overlap (each slot still runs once across the fleet).
 */
export type OverlapPolicy = 'skip' | 'buffer-one' | 'buffer-all' | 'replace' | 'allow';

// Every policy, in the order above. The type is spelled out rather than derived from the list so
// that the published one reads plainly; a Record holds the list to it.
const EVERY_POLICY: Record<OverlapPolicy, true> = { skip: true, 'buffer-one': true, 'buffer-all': true, replace: true, allow: true };
export const OVERLAP_POLICIES = Object.keys(EVERY_POLICY) as readonly OverlapPolicy[];

/**
 * Which missed slots run after all workers were down:
 * - `latest` (default): the most recent missed slot, if it is within `startingDeadline`;
 * - `{ all: n }`: the most recent n missed slots, oldest first, one at a time;
 * - `none`: none; they are recorded as missed.
 * Slots that do not run are recorded in leasehold.missed.
 */
export type CatchUpPolicy = 'latest' | 'none' | { all: number };

/**
 * What started a run: its schedule, an operator's run now (`control.runNow`) or a backfill of a
 * past range (`control.backfill`).
 */
export type RunTrigger = 'schedule' | 'manual' | 'backfill';

export interface JobContext {
  job: string;
  /** The occurrence this run is for (database time): the scheduled or backfilled slot, or when a run now was asked for. */
  slot: Date;
  fence: number;
  /**
   * The same for every attempt at this occurrence, on any worker, and distinct between triggers:
   * `job@slot` (schedule), `job@manual:<request id>` (run now), `job@backfill:<slot>` (backfill).
   */
  idempotencyKey: string;
  /** What started this run. */
  trigger: RunTrigger;
  /**
   * Fires when the lease is lost or replaced, the run's `timeout` passes (RunTimeoutError), or
   * the worker shuts down; `signal.reason` says which.
   */
  signal: AbortSignal;
  /** 1 for the first attempt, 2 for the first retry, ... */
  attempt: number;
  /** A logger with job, slot and fence bound: `log.info('message')` or `log.info({ fields }, 'message')`. */
  log: JobLogger;
  /** The run's lease (null under `overlap: 'allow'`). */
  lease: Lease | null;
  /** A fenced transaction (a plain one under `overlap: 'allow'`, which has no lease). */
  transaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T>;
}

export interface JobOptions {
  /** Unique job name: also its lease name. 1–200 characters. */
  name: string;
  /** Cron pattern (5 fields, or 6 with seconds first). Exactly one of cron and every. */
  cron?: string | undefined;
  /** IANA timezone for `cron`. @default UTC */
  timezone?: string | undefined;
  /** Fixed interval, aligned to the epoch: '90s', '5m', or milliseconds (at least 1 s). */
  every?: Duration | undefined;
  /** Lease TTL, renewed every ttl/3 while the handler runs. @default '30s' */
  ttl?: Duration | undefined;
  /** What a slot does while the previous run holds the lease: 'skip', 'buffer-one', 'buffer-all', 'replace' or 'allow' (docs/scheduler.md, "Overlap policies"). @default 'skip' */
  overlap?: OverlapPolicy | undefined;
  /** Most slots `buffer-all` keeps waiting. @default 10 */
  bufferLimit?: number | undefined;
  /** Which missed slots run after every worker was down: 'latest', 'none' or { all: n } (docs/scheduler.md, "Catch-up after downtime"). @default 'latest' */
  catchUp?: CatchUpPolicy | undefined;
  /** How late a slot may start and still run (catch-up, slow timers). @default the schedule's interval, at most 1h */
  startingDeadline?: Duration | undefined;
  /**
   * Spread: the job claims each slot a fixed offset after it, in [0, jitter), derived from the
   * job's name (the same on every worker). The slot (ctx.slot, the idempotency key, history)
   * stays the nominal time. Below the schedule's interval and `startingDeadline`. @default '0ms'
   */
  jitter?: Duration | undefined;
  /** Retries of a failing handler within the same lease and slot. @default { attempts: 1 } (no retry) */
  retry?: {
    /** Attempts in all, the first included (1 to 100). @default 1 */
    attempts: number;
    /** Wait between attempts. @default '1s' */
    delay?: Duration;
  };
  /**
   * The most a run may last, from its claim, retries included (1 ms to 366 days). At the
   * deadline the run's signal fires with a RunTimeoutError, the database refuses its fenced
   * writes (LH003) and the run is recorded `timed-out`; the lease is released when the handler
   * settles (or, if it does not within one `ttl` more, is left to expire). See docs/scheduler.md,
   * "Timeouts". @default none
   */
  timeout?: Duration | undefined;
  /** The job's work: `async (ctx) => …`, with the run's signal, slot, fence, idempotency key and fenced transaction. */
  handler: (context: JobContext) => Promise<unknown>;
}

export interface JobDefinition {
  readonly name: string;
  readonly schedule: Schedule;
  readonly ttlMs: number;
  readonly overlap: OverlapPolicy;
  readonly bufferLimit: number;
  readonly catchUp: CatchUpPolicy;
  readonly startingDeadlineMs: number;
  /** The `jitter` option in ms (0: none). */
  readonly jitterMs: number;
  /** This job's fixed delay after each slot, in [0, jitterMs): src/schedule/jitter.ts. */
  readonly jitterOffsetMs: number;
  readonly retry: { attempts: number; delayMs: number };
  /** The run timeout in milliseconds; null: none. */
  readonly timeoutMs: number | null;
  readonly handler: (context: JobContext) => Promise<unknown>;
}

/** The leading job options, which leased() takes too: one list for both checks, in the order their messages name them. */
export const JOB_SCHEDULE_KEYS = {
  name: true,
  cron: true,
  timezone: true,
  every: true,
  ttl: true,
  overlap: true,
  bufferLimit: true,
} as const satisfies Partial<Record<keyof JobOptions, true>>;

const JOB_OPTION_KEYS = optionKeys<JobOptions>({ ...JOB_SCHEDULE_KEYS, catchUp: true, startingDeadline: true, jitter: true, retry: true, timeout: true, handler: true });

// The defaults most jobs leave to the table, parsed once (the table is constant).
const DEFAULT_TTL_MS = durationSetting(undefined, JOB_DEFAULTS.ttl, 'ttl');
const DEFAULT_RETRY_DELAY_MS = durationSetting(undefined, JOB_DEFAULTS.retryDelay, 'retry.delay');

/** Validates a job; throws InvalidArgumentError naming the job and the problem. */
export function defineJob(options: JobOptions): JobDefinition {
  if (!options || typeof options !== 'object') throw new InvalidArgumentError('job', 'defineJob() needs an options object.');
  // The "job "name": option" texts of the messages are built only when an option is given or
  // wrong: a worker defines 10,000 jobs at start, and a dozen such strings per job were enough
  // garbage to double the young generation (which an idle worker keeps in its RSS).
  if (hasUnknownKey(options, JOB_OPTION_KEYS)) checkOptionKeys(options, JOB_OPTION_KEYS, typeof options.name === 'string' ? `job "${options.name}"` : 'job');
  const name = checkLeaseName(options.name);
  const where = `job "${name}"`;
  if (options.retry !== undefined) {
    if (options.retry === null || typeof options.retry !== 'object') {
      throw new InvalidArgumentError('retry', `${where}: retry must be an object such as { attempts: 3, delay: '5s' } (got ${JSON.stringify(options.retry)}).`);
    }
    checkOptionKeys(options.retry, ['attempts', 'delay'], `${where}: retry`);
  }
  if (typeof options.catchUp === 'object' && options.catchUp !== null) checkOptionKeys(options.catchUp, ['all'], `${where}: catchUp`);
  if (typeof options.handler !== 'function') throw new InvalidArgumentError('handler', `${where}: handler must be an async function (context) => …`);
  const schedule = parseSchedule(
    options.cron !== undefined
      ? options.timezone !== undefined
        ? { cron: options.cron, timezone: options.timezone }
        : { cron: options.cron }
      : ({ every: options.every } as { every: Duration }),
    name,
  );
  if (options.cron !== undefined && options.every !== undefined) {
    throw new InvalidArgumentError('schedule', `${where}: give exactly one of cron and every.`);
  }
  if (options.every !== undefined && options.timezone !== undefined) {
    throw new InvalidArgumentError('timezone', `${where}: timezone applies to cron schedules only.`);
  }
  const ttlMs = options.ttl === undefined ? DEFAULT_TTL_MS : durationSetting(options.ttl, JOB_DEFAULTS.ttl, `${where}: ttl`);
  const overlap = options.overlap ?? JOB_DEFAULTS.overlap.default;
  if (!OVERLAP_POLICIES.includes(overlap)) {
    throw new InvalidArgumentError('overlap', `${where}: overlap must be one of ${OVERLAP_POLICIES.join(', ')} (got '${String(overlap)}').`);
  }
  const bufferLimit =
    options.bufferLimit === undefined ? JOB_DEFAULTS.bufferLimit.default : integerSetting(options.bufferLimit, JOB_DEFAULTS.bufferLimit, 'bufferLimit', `${where}: bufferLimit`);
  const catchUp = options.catchUp ?? JOB_DEFAULTS.catchUp.default;
  const { min: allMin, max: allMax } = JOB_DEFAULTS.catchUpAll;
  if (
    !(catchUp === 'latest' || catchUp === 'none') &&
    !(typeof catchUp === 'object' && Number.isInteger(catchUp.all) && catchUp.all >= allMin && catchUp.all <= allMax)
  ) {
    throw new InvalidArgumentError('catchUp', `${where}: catchUp must be 'latest', 'none' or { all: n } with n from ${allMin} to ${allMax}.`);
  }
  const deadline = JOB_DEFAULTS.startingDeadline;
  const startingDeadlineMs =
    options.startingDeadline === undefined
      ? Math.min(schedule.nominalIntervalMs, deadline.capMs)
      : parseBoundedDuration(options.startingDeadline, `${where}: startingDeadline`, deadline.minMs, deadline.maxMs);
  const jitterMs = checkJitter(options.jitter, schedule, startingDeadlineMs, options.startingDeadline !== undefined, where);
  const attempts =
    options.retry?.attempts === undefined
      ? JOB_DEFAULTS.retryAttempts.default
      : integerSetting(options.retry.attempts, JOB_DEFAULTS.retryAttempts, 'retry', `${where}: retry.attempts`);
  const delayMs = options.retry?.delay === undefined ? DEFAULT_RETRY_DELAY_MS : durationSetting(options.retry.delay, JOB_DEFAULTS.retryDelay, `${where}: retry.delay`);
  const timeoutMs =
    options.timeout === undefined ? null : parseBoundedDuration(options.timeout, `${where}: timeout`, JOB_DEFAULTS.timeout.minMs, JOB_DEFAULTS.timeout.maxMs);
  if (ttlMs < JOB_DEFAULTS.scheduledTtlMinMs) {
    throw new InvalidArgumentError(
      'ttl',
      `${where}: ttl must be at least ${formatDuration(JOB_DEFAULTS.scheduledTtlMinMs)} for a scheduled job (got ${formatDuration(ttlMs)}): heartbeats run every ttl/3.`,
    );
  }
  return Object.freeze({
    name,
    schedule,
    ttlMs,
    overlap,
    bufferLimit,
    catchUp,
    startingDeadlineMs,
    jitterMs,
    jitterOffsetMs: jitterOffsetMs(name, jitterMs),
    retry: { attempts, delayMs },
    timeoutMs,
    handler: options.handler,
  });
}

/**
 * The jitter in whole ms (0 when not given). A slot fired at slot + offset must still be the
 * latest due slot and within its starting deadline, so the jitter stays below both.
 */
function checkJitter(value: Duration | undefined, schedule: Schedule, startingDeadlineMs: number, deadlineGiven: boolean, where: string): number {
  if (value === undefined) return 0;
  const what = `${where}: jitter`;
  const ms = parseDuration(value, what);
  // parseDuration refuses fractions of a millisecond; a jitter may be 0 but not negative
  if (ms < 0) throw new InvalidArgumentError('jitter', `${what} must be a whole number of milliseconds, 0 or more (got ${String(value)}).`);
  if (ms === 0) return 0;
  const { maxMs } = JOB_DEFAULTS.jitter;
  if (ms > maxMs) throw new InvalidArgumentError('jitter', `${what} must be at most ${formatDuration(maxMs)} (got ${formatDuration(ms)}).`);
  if (ms >= schedule.nominalIntervalMs) {
    throw new InvalidArgumentError(
      'jitter',
      `${what} (${formatDuration(ms)}) must be shorter than the schedule's interval (${formatDuration(schedule.nominalIntervalMs)} for ${schedule.description}): lower it, or choose a longer interval.`,
    );
  }
  if (ms >= startingDeadlineMs) {
    throw new InvalidArgumentError(
      'jitter',
      `${what} (${formatDuration(ms)}) must be shorter than startingDeadline (${formatDuration(startingDeadlineMs)}${deadlineGiven ? '' : ', the default'}): lower it, or raise startingDeadline.`,
    );
  }
  return ms;
}

/** The mode and buffer cap leasehold.claim() takes for a policy. */
export function claimMode(job: JobDefinition): { mode: 'exclusive' | 'replace' | 'allow'; bufferCap: number } {
  switch (job.overlap) {
    case 'skip':
      return { mode: 'exclusive', bufferCap: 0 };
    case 'buffer-one':
      return { mode: 'exclusive', bufferCap: 1 };
    case 'buffer-all':
      return { mode: 'exclusive', bufferCap: job.bufferLimit };
    case 'replace':
      return { mode: 'replace', bufferCap: 0 };
    case 'allow':
      return { mode: 'allow', bufferCap: 0 };
  }
}

export function describeCatchUp(policy: CatchUpPolicy): string {
  return typeof policy === 'object' ? `all:${policy.all}` : policy;
}
