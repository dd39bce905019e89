// Defaults and limits of the lease client (createLeasehold, acquire, run, Lease.transaction).
// One table: the code applies these values, the JSDoc `@default`s on the option types state them
// (test/package/defaults.test.ts checks that they agree), and the CLI's help shows them.
import type { DurationSetting, IntegerSetting } from '../validate/settings.js';
import { MAX_TTL_MS, MIN_TTL_MS } from './limits.js';

const TEN_MINUTES = 10 * 60_000;

/** createLeasehold() options. */
export const LEASEHOLD_DEFAULTS = {
  queryTimeout: { default: '5s', minMs: 50, maxMs: TEN_MINUTES } satisfies DurationSetting,
  connectTimeout: { default: '5s', minMs: 50, maxMs: TEN_MINUTES } satisfies DurationSetting,
  poolSize: { default: 10, min: 1, max: 1000 } satisfies IntegerSetting,
  migrate: { default: true },
  liveness: { default: true },
} as const;

/** acquire() and run() options; the TTL bounds are the SQL function's (leasehold.check_ttl). */
export const ACQUIRE_DEFAULTS = {
  ttl: { minMs: MIN_TTL_MS, maxMs: MAX_TTL_MS },
  heartbeat: { default: false },
  /** The default heartbeatInterval is ttl / this. */
  heartbeatDivisor: 3,
  heartbeatInterval: { minMs: 10 },
  history: { default: true },
} as const;

/** Lease.transaction() options: both default to the lease's TTL. */
export const TRANSACTION_DEFAULTS = {
  idleTimeout: { minMs: 100, maxMs: MAX_TTL_MS },
  statementTimeout: { minMs: 50, maxMs: MAX_TTL_MS },
} as const;

/** Leasehold.control.backfill(): slots one backfill may request (a default and a hard maximum). */
export const BACKFILL_DEFAULTS = {
  max: { default: 100, min: 1, max: 1000 } satisfies IntegerSetting,
} as const;

/** Leasehold.control.waitForRequest(). */
export const REQUEST_WAIT_DEFAULTS = {
  timeout: { default: '5m', minMs: 100, maxMs: 24 * 3_600_000 } satisfies DurationSetting,
} as const;
