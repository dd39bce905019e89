// Timelines for the jobs one page of the table shows: runs, skips and missed slots of up to
// MAX_TIMELINE_JOBS named jobs over a window, with a row cap per kind. Same shapes as
// jobTimeline() in monitor/status.ts, which serves one job or all.
import type { Queryable } from '../db/handle.js';
import type { JobTimeline } from '../monitor/status.js';
import { toJobTimeline, type MissedRow, type RunRow, type SkipRow } from '../monitor/timeline-rows.js';

export const MAX_TIMELINE_JOBS = 100;

export async function timelinesFor(db: Queryable, jobs: string[], hours: number, limit = 5000): Promise<JobTimeline> {
  const {
    rows: [window],
  } = await db.query<{ now: Date; since: Date }>(`select now() as now, now() - make_interval(secs => $1::double precision) as since`, [hours * 3600]);
  const { now, since } = window!;
  if (jobs.length === 0) return { now, since, runs: [], skips: [], missed: [], truncated: false };
  const [runs, skips, missed] = await Promise.all([
    db.query<RunRow>(
      // per job through runs_job_started; a run open since before the window is still drawn
      `select r.job, r.slot, r.fence, r.holder, r.started_at, r.finished_at, r.outcome, r.error, r.attempts, r.trigger
         from unnest($1::text[]) as n(job)
         cross join lateral (
           select * from leasehold.runs r
            where r.job = n.job and r.started_at <= $3
              and (r.started_at >= $2::timestamptz - interval '1 day' or r.outcome = 'running')
              and (r.finished_at is null or r.finished_at >= $2)
            order by r.started_at desc limit $4) r
        order by r.started_at desc, r.fence desc
        limit $4`,
      [jobs, since, now, limit],
    ),
    db.query<SkipRow>(
      `select job, slot, holder, holder_fence, holder_slot, extract(epoch from held_for)::double precision as held_for_seconds, recorded_by, recorded_at
         from leasehold.skips where job = any($1::text[]) and slot >= $2 and slot <= $3
        order by slot desc limit $4`,
      [jobs, since, now, limit],
    ),
    db.query<MissedRow>(
      `select job, slot, reason, recorded_by, recorded_at
         from leasehold.missed where job = any($1::text[]) and slot >= $2 and slot <= $3
        order by slot desc limit $4`,
      [jobs, since, now, limit],
    ),
  ]);
  return toJobTimeline(now, since, runs.rows, skips.rows, missed.rows, limit);
}
