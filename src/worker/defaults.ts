// Defaults and limits of startWorker() (those of job definitions are in src/job/defaults.ts).
// One table: the code applies these values, the JSDoc `@default`s on WorkerOptions state them
// (test/package/defaults.test.ts checks that they agree), and `leasehold worker --help` shows them.
import type { DurationSetting } from '../validate/settings.js';

const DAY = 86_400_000;

/** startWorker() options (the connection options are createLeasehold()'s: src/lease/defaults.ts). */
export const WORKER_DEFAULTS = {
  shutdownGrace: { default: '30s', minMs: 1, maxMs: DAY } satisfies DurationSetting,
  handleSignals: { default: true },
  /** Whether the worker listens for changes (LISTEN/NOTIFY) instead of polling for them often. */
  notifications: { default: true },
  historyRetention: { default: '30d', minMs: 60_000, maxMs: 3_650 * DAY } satisfies DurationSetting,
  clockSyncInterval: { default: '5m', minMs: 1_000, maxMs: DAY } satisfies DurationSetting,
  /** How often the worker reads schedule changes (jobs defined as data, pause and resume). */
  scheduleRefresh: { default: '1s', minMs: 50, maxMs: 60_000 } satisfies DurationSetting,
  /** How far ahead of a slot a worker may claim it: 'auto' (claim-ahead.ts), or a lead within these bounds ('0ms': never). */
  claimAhead: { default: 'auto', minMs: 0, maxMs: 10_000 },
} as const;
