// Job definitions: validated once, up front, with messages that say what to change.
import type pg from 'pg';
import { InvalidArgumentError } from '../errors.js';
import type { Lease } from '../lease/lease.js';
import type { JobLogger } from '../observe/child-logger.js';
import { parseSchedule, type Schedule } from '../schedule/schedule.js';
import { formatDuration, parseBoundedDuration, type Duration } from '../validate/duration.js';
import { durationSetting, integerSetting } from '../validate/settings.js';
import { JOB_DEFAULTS } from './defaults.js';
import { checkLeaseName } from '../validate/names.js';
import { checkOptionKeys, optionKeys } from '../validate/options.js';

export const OVERLAP_POLICIES = ['skip', 'buffer-one', 'buffer-all', 'replace', 'allow'] as const;
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
export type OverlapPolicy = (typeof OVERLAP_POLICIES)[number];

/**
 * Which missed slots run after all workers were down:
 * - `latest` (default): the most recent missed slot, if it is within `startingDeadline`;
 * - `{ all: n }`: the most recent n missed slots, oldest first, one at a time;
 * - `none`: none; they are recorded as missed.
 * Slots that do not run are recorded in leasehold.missed.
 */
export type CatchUpPolicy = 'latest' | 'none' | { all: number };

export interface JobContext {
  job: string;
  /** The scheduled occurrence this run is for (database time). */
  slot: Date;
  fence: number;
  /** `job@slot`: the same for every attempt at this occurrence, on any worker. */
  idempotencyKey: string;
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
  cron?: string;
  /** IANA timezone for `cron`. @default UTC */
  timezone?: string;
  /** Fixed interval, aligned to the epoch: '90s', '5m', or milliseconds (at least 1 s). */
  every?: Duration;
  /** Lease TTL, renewed every ttl/3 while the handler runs. @default '30s' */
  ttl?: Duration;
  /** @default 'skip' */
  overlap?: OverlapPolicy;
  /** Most slots `buffer-all` keeps waiting. @default 10 */
  bufferLimit?: number;
  /** @default 'latest' */
  catchUp?: CatchUpPolicy;
  /** How late a slot may start and still run (catch-up, slow timers). @default the schedule's interval, at most 1h */
  startingDeadline?: Duration;
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
  timeout?: Duration;
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
  readonly retry: { attempts: number; delayMs: number };
  /** The run timeout in milliseconds; null: none. */
  readonly timeoutMs: number | null;
  readonly handler: (context: JobContext) => Promise<unknown>;
}

const JOB_OPTION_KEYS = optionKeys<JobOptions>({
  name: true,
  cron: true,
  timezone: true,
  every: true,
  ttl: true,
  overlap: true,
  bufferLimit: true,
  catchUp: true,
  startingDeadline: true,
  retry: true,
  timeout: true,
  handler: true,
});

/** Validates a job; throws InvalidArgumentError naming the job and the problem. */
export function defineJob(options: JobOptions): JobDefinition {
  if (!options || typeof options !== 'object') throw new InvalidArgumentError('job', 'defineJob() needs an options object.');
  checkOptionKeys(options, JOB_OPTION_KEYS, typeof options.name === 'string' ? `job "${options.name}"` : 'job');
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
      ? { cron: options.cron, ...(options.timezone !== undefined ? { timezone: options.timezone } : {}) }
      : ({ every: options.every } as { every: Duration }),
    name,
  );
  if (options.cron !== undefined && options.every !== undefined) {
    throw new InvalidArgumentError('schedule', `${where}: give exactly one of cron and every.`);
  }
  if (options.every !== undefined && options.timezone !== undefined) {
    throw new InvalidArgumentError('timezone', `${where}: timezone applies to cron schedules only.`);
  }
  const ttlMs = durationSetting(options.ttl, JOB_DEFAULTS.ttl, `${where}: ttl`);
  const overlap = options.overlap ?? JOB_DEFAULTS.overlap.default;
  if (!OVERLAP_POLICIES.includes(overlap)) {
    throw new InvalidArgumentError('overlap', `${where}: overlap must be one of ${OVERLAP_POLICIES.join(', ')} (got '${String(overlap)}').`);
  }
  const bufferLimit = integerSetting(options.bufferLimit, JOB_DEFAULTS.bufferLimit, 'bufferLimit', `${where}: bufferLimit`);
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
  const attempts = integerSetting(options.retry?.attempts, JOB_DEFAULTS.retryAttempts, 'retry', `${where}: retry.attempts`);
  const delayMs = durationSetting(options.retry?.delay, JOB_DEFAULTS.retryDelay, `${where}: retry.delay`);
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
    retry: { attempts, delayMs },
    timeoutMs,
    handler: options.handler,
  });
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
