// Defaults and limits of the `leasehold` commands. The commands' options take their defaults
// and bounds from here (commander shows the defaults in --help), and reuse the library's tables
// where a flag sets a library option (src/lease/defaults.ts, src/worker/defaults.ts,
// src/dashboard/defaults.ts), so a default is written once.
import { DASHBOARD_ACTION_DEFAULTS, DASHBOARD_DEFAULTS } from '../dashboard/defaults.js';
import { ACQUIRE_DEFAULTS } from '../lease/defaults.js';
import { formatDuration } from '../validate/duration.js';
import type { DurationSetting, IntegerSetting } from '../validate/settings.js';
import { WORKER_DEFAULTS } from '../worker/defaults.js';
import { EXIT } from './exit-codes.js';

const DAY = 86_400_000;
/** The bounds of an interval schedule (`every`): src/schedule/schedule.ts. */
const INTERVAL = { minMs: 1_000, maxMs: 366 * DAY } as const;
const COUNT = { min: 1, max: 10_000 } as const;

/** The database connection of every command. */
export const CLI_CONNECTION = {
  connectTimeout: { default: '5s', minMs: 50, maxMs: 10 * 60_000 } satisfies DurationSetting,
  /** Longest any one statement of a command may take (a blocked statement fails, it does not hang the command). */
  queryTimeout: { default: '30s', minMs: 50, maxMs: 10 * 60_000 } satisfies DurationSetting,
  poolSize: 2,
} as const;

export const EXEC_DEFAULTS = {
  ttl: { default: '30s', ...ACQUIRE_DEFAULTS.ttl } satisfies DurationSetting,
  grace: { default: '10s', minMs: 0.001, maxMs: 3_600_000 } satisfies DurationSetting,
  interval: INTERVAL,
  skippedExitCode: { default: EXIT.skipped, min: 0, max: 255 } satisfies IntegerSetting,
} as const;

export const WORKER_CLI_DEFAULTS = {
  grace: WORKER_DEFAULTS.shutdownGrace,
  metricsHost: { default: '127.0.0.1' },
  metricsPort: { min: 0, max: 65_535 },
  healthHost: { default: '127.0.0.1' },
  healthPort: { min: 0, max: 65_535 },
} as const;

export const DASHBOARD_CLI_DEFAULTS = {
  port: DASHBOARD_DEFAULTS.port,
  host: DASHBOARD_DEFAULTS.host,
  refresh: DASHBOARD_DEFAULTS.refresh,
  queryTimeout: DASHBOARD_DEFAULTS.queryTimeout,
  sessionTtl: DASHBOARD_ACTION_DEFAULTS.sessionTtl,
  userHeader: DASHBOARD_ACTION_DEFAULTS.userHeader,
} as const;

export const RUNS_DEFAULTS = {
  limit: { default: 20, ...COUNT } satisfies IntegerSetting,
} as const;

export const STATUS_DEFAULTS = {
  limit: { default: 50, ...COUNT } satisfies IntegerSetting,
  /** --all: no limit in practice. */
  all: 2_147_483_647,
} as const;

export const SCHEDULE_DEFAULTS = {
  tz: { default: 'UTC' },
  count: { default: 10, ...COUNT } satisfies IntegerSetting,
  every: INTERVAL,
} as const;

/** "(100ms to 7d)", for option descriptions. */
export function range(setting: { minMs: number; maxMs: number }): string {
  return `(${formatDuration(setting.minMs)} to ${formatDuration(setting.maxMs)})`;
}

/** A default for commander, which prints it in --help as (default: "…"). */
export function shown(setting: { default: string | number }): string {
  return String(setting.default);
}
