// Defaults and limits of the dashboard (startDashboard, `leasehold dashboard`). One table: the
// server applies these values, the JSDoc `@default`s on DashboardOptions state them
// (test/package/defaults.test.ts checks that they agree), and `leasehold dashboard --help` shows them.
import type { DurationSetting, IntegerSetting } from '../validate/settings.js';

export const DASHBOARD_DEFAULTS = {
  port: { default: 8080, min: 0, max: 65_535 } satisfies IntegerSetting,
  host: { default: '127.0.0.1' },
  refresh: { default: '5s', minMs: 250, maxMs: 3_600_000 } satisfies DurationSetting,
  queryTimeout: { default: '10s', minMs: 50, maxMs: 10 * 60_000 } satisfies DurationSetting,
  maxConcurrentQueries: { default: 4, min: 1, max: 1000 } satisfies IntegerSetting,
} as const;

/** Defaults and limits of the dashboard's actions (`actions` of startDashboard; docs/dashboard.md "Actions"). */
export const DASHBOARD_ACTION_DEFAULTS = {
  /** The request header a trusted proxy names the person in (oauth2-proxy's convention). */
  userHeader: { default: 'x-forwarded-user' },
  /** How long a sign-in lasts (password mode). */
  sessionTtl: { default: '8h', minMs: 60_000, maxMs: 7 * 86_400_000 } satisfies DurationSetting,
  /** Mark the session cookie Secure (serve the dashboard over HTTPS). */
  secureCookie: { default: false },
} as const;

/** What the actions hold in memory and accept, at most. */
export const DASHBOARD_ACTION_LIMITS = {
  /** Sessions kept at once; the oldest is dropped beyond. */
  sessions: 10_000,
  /** A request body (JSON of an action, the sign-in form), in bytes. */
  bodyBytes: 16_384,
  /** Failed sign-ins per name, and per client address, within failureWindowMs before a 429. */
  failures: 10,
  failureWindowMs: 15 * 60_000,
  /** Password checks (scrypt, ~32 MiB and tens of ms each) running at once; more are answered 503. */
  passwordChecks: 4,
  /** Users in a users file or option. */
  users: 1_000,
} as const;

/** What one request may ask for. */
export const DASHBOARD_LIMITS = {
  /** Longest history window for one job (the default history retention is 30 days). */
  historyHours: 24 * 31,
  /** Longest window for every job at once, and for a page of timelines. */
  fleetHistoryHours: 24,
  /** Rows per page of the job table, at most. */
  pageSize: 200,
  /** How long the page waits for the full first table page before sending a lighter one. */
  ssrBudgetMs: 200,
  /** How long one fleet summary serves every open page. */
  summaryTtlMs: 5_000,
} as const;
