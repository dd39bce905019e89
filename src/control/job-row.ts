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

/** A job's schedule and lease columns, named alike in leasehold.jobs and the job_status view. */
export interface ScheduleColumns {
  schedule: string;
  timezone: string | null;
  interval_ms: string | null;
  ttl_ms: string;
  overlap: string;
  catch_up: string;
}

/** Those columns as ScheduleInfo and JobStatus give them: one reading for the two read models. */
export function scheduleSettings(row: ScheduleColumns) {
  return {
    schedule: row.schedule,
    timezone: row.timezone,
    intervalMs: row.interval_ms === null ? null : Number(row.interval_ms),
    ttlMs: Number(row.ttl_ms),
    overlap: row.overlap,
    catchUp: row.catch_up,
  };
}

export interface StoredJobRow extends ScheduleColumns {
  name: string;
  source: 'code' | 'data';
  handler: string | null;
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
