// Defaults and limits of the read models (jobStatus, jobHistory, jobTimeline, unscheduledLeases).
// test/package/defaults.test.ts checks the JSDoc `@default` of ReadOptions against this table.
import type { DurationSetting } from '../validate/settings.js';

export const READ_DEFAULTS = {
  timeout: { default: '10s', minMs: 50, maxMs: 10 * 60_000 } satisfies DurationSetting,
  /** jobHistory() entries when no limit is given. */
  historyLimit: 50,
  /** jobTimeline() rows of each kind when no limit is given. */
  timelineLimit: 5000,
} as const;
