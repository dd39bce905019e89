// Defaults and limits of leasehold.control (schedules defined at run time, pause and resume).
// The SQL functions (sql/baseline/4_control.sql, sql/baseline/4_control.sql) check the same bounds
// for callers that bypass the client; the JSDoc `@default`s on ScheduleOptions state these
// values (test/package/defaults.test.ts).
const DAY = 86_400_000;

export const CONTROL_DEFAULTS = {
  /** The payload as JSON text, in bytes (UTF-8). */
  payloadMaxBytes: 65_536,
  /** Levels of arrays and objects in the payload ([[1]] is 2): readers recurse once per level. */
  payloadMaxDepth: 32,
  /** pause(): end the running run's lease too. */
  stopRunning: { default: false },
  /** A pause's reason, in characters. */
  reasonMaxLength: 1_000,
  /** Rows per page when list() reads the definitions. */
  listPage: 1_000,
} as const;

