// Defaults and limits of job definitions (defineJob, the objects in startWorker({ jobs }), and
// jobs defined as data). One table: the code applies these values, the JSDoc `@default`s on
// JobOptions state them (test/package/defaults.test.ts checks that they agree), and `leasehold worker
// --help` shows them.
import { MAX_TTL_MS, MIN_TTL_MS } from '../lease/limits.js';
import type { DurationSetting, IntegerSetting } from '../validate/settings.js';

const DAY = 86_400_000;

/** Job options (defineJob, or the objects in startWorker({ jobs })). */
export const JOB_DEFAULTS = {
  ttl: { default: '30s', minMs: MIN_TTL_MS, maxMs: MAX_TTL_MS } satisfies DurationSetting,
  /** A scheduled job heartbeats every ttl/3, so its TTL is at least this (the lease's own minimum is lower). */
  scheduledTtlMinMs: 300,
  overlap: { default: 'skip' },
  bufferLimit: { default: 10, min: 1, max: 1000 } satisfies IntegerSetting,
  catchUp: { default: 'latest' },
  /** `catchUp: { all: n }`: the bounds of n. */
  catchUpAll: { min: 1, max: 1000 },
  /** Default: the schedule's interval, at most `capMs`. */
  startingDeadline: { capMs: 3_600_000, minMs: 1, maxMs: 366 * DAY },
  /** 0: none; also below the schedule's interval and the job's startingDeadline (job.ts). */
  jitter: { default: '0ms', minMs: 0, maxMs: DAY },
  retryAttempts: { default: 1, min: 1, max: 100 } satisfies IntegerSetting,
  retryDelay: { default: '1s', minMs: 1, maxMs: MAX_TTL_MS } satisfies DurationSetting,
  /** None by default; the bounds are leasehold.register_jobs()'s (sql/baseline/2_scheduler.sql). */
  timeout: { minMs: 1, maxMs: 366 * DAY },
} as const;
