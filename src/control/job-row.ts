// A row of leasehold.jobs as schedule_changes() and the definition reads return it (bigints as
// text, as pg gives them). One shape for the client that lists definitions and the worker feed.
/**
 * A stored schedule as the job options give it: a cron pattern (it has spaces) with its
 * timezone, or an interval. The one reading of the `schedule`, `timezone` and `interval_ms`
 * columns, for the worker feed and the watch of schedules no worker can run.
 */
export function storedScheduleSpec(row: { schedule: string; timezone: string | null; interval_ms: string | number | null }):
  | { cron: string; timezone?: string }
  | { every: number } {
  return /\s/.test(row.schedule) ? { cron: row.schedule, ...(row.timezone ? { timezone: row.timezone } : {}) } : { every: Number(row.interval_ms) };
}

export interface StoredJobRow {
  name: string;
  source: 'code' | 'data';
  handler: string | null;
  schedule: string;
  timezone: string | null;
  interval_ms: string | null;
  ttl_ms: string;
  overlap: string;
  catch_up: string;
  buffer_limit: number | null;
  starting_deadline_ms: string | null;
  timeout_ms: string | null;
  jitter_ms: string | null;
  payload: unknown;
  revision: string;
  paused_at: Date | null;
  paused_by: string | null;
  pause_reason: string | null;
}
