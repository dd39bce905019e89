// Read models for operators: the job table (leasehold.job_status) and a job's history
// (leasehold.run_history). Shared by the CLI, the dashboard and metrics.
import type pg from 'pg';

/** A job whose p95 duration passes this fraction of its interval is creeping toward overlap. */
export const CREEP_WARNING_RATIO = 0.8;

export interface JobStatus {
  job: string;
  schedule: string;
  timezone: string | null;
  intervalMs: number | null;
  ttlMs: number;
  overlap: string;
  catchUp: string;
  state: 'idle' | 'running' | 'expired';
  holder: string | null;
  leaseAgeSeconds: number | null;
  fence: number;
  lastSlot: Date | null;
  lastRun: { slot: Date; outcome: string; startedAt: Date; finishedAt: Date | null; error: string | null } | null;
  runs24h: number;
  failed24h: number;
  lost24h: number;
  p50Seconds: number | null;
  p95Seconds: number | null;
  /** p95 duration / interval over the last 24 h; above CREEP_WARNING_RATIO the job is creeping toward overlap. */
  p95IntervalRatio: number | null;
  skips24h: number;
  missed24h: number;
  /** Set when p95IntervalRatio passes CREEP_WARNING_RATIO. */
  warning: string | null;
}

interface StatusRow {
  job: string;
  schedule: string;
  timezone: string | null;
  interval_ms: string | null;
  ttl_ms: string;
  overlap: string;
  catch_up: string;
  state: JobStatus['state'];
  holder: string | null;
  lease_age_seconds: number | null;
  fence: string | null;
  last_slot: Date | null;
  last_run_slot: Date | null;
  last_outcome: string | null;
  last_started_at: Date | null;
  last_finished_at: Date | null;
  last_error: string | null;
  runs_24h: number;
  failed_24h: number;
  lost_24h: number;
  p50_seconds: number | null;
  p95_seconds: number | null;
  p95_interval_ratio: number | null;
  skips_24h: number;
  missed_24h: number;
}

export async function jobStatus(db: pg.Pool | pg.ClientBase, job?: string): Promise<JobStatus[]> {
  const { rows } = await db.query<StatusRow>(
    `select * from leasehold.job_status where $1::text is null or job = $1 order by job`,
    [job ?? null],
  );
  return rows.map((row) => {
    const ratio = row.p95_interval_ratio;
    return {
      job: row.job,
      schedule: row.schedule,
      timezone: row.timezone,
      intervalMs: row.interval_ms === null ? null : Number(row.interval_ms),
      ttlMs: Number(row.ttl_ms),
      overlap: row.overlap,
      catchUp: row.catch_up,
      state: row.state,
      holder: row.holder,
      leaseAgeSeconds: row.lease_age_seconds,
      fence: Number(row.fence ?? 0),
      lastSlot: row.last_slot,
      lastRun: row.last_run_slot
        ? {
            slot: row.last_run_slot,
            outcome: row.last_outcome ?? 'unknown',
            startedAt: row.last_started_at as Date,
            finishedAt: row.last_finished_at,
            error: row.last_error,
          }
        : null,
      runs24h: row.runs_24h,
      failed24h: row.failed_24h,
      lost24h: row.lost_24h,
      p50Seconds: row.p50_seconds,
      p95Seconds: row.p95_seconds,
      p95IntervalRatio: ratio,
      skips24h: row.skips_24h,
      missed24h: row.missed_24h,
      warning:
        ratio !== null && ratio > CREEP_WARNING_RATIO
          ? `p95 duration is ${Math.round(ratio * 100)}% of the interval: "${row.job}" is creeping toward overlap`
          : null,
    };
  });
}

export interface HistoryEntry {
  job: string;
  slot: Date;
  kind: 'run' | 'skip' | 'missed';
  outcome: string;
  fence: number | null;
  holder: string | null;
  at: Date;
  finishedAt: Date | null;
  durationSeconds: number | null;
  detail: string | null;
}

/** A job's runs, skips and missed slots, newest first. */
export async function jobHistory(
  db: pg.Pool | pg.ClientBase,
  options: { job?: string; limit?: number; since?: Date } = {},
): Promise<HistoryEntry[]> {
  const { rows } = await db.query<{
    job: string;
    slot: Date;
    kind: HistoryEntry['kind'];
    outcome: string;
    fence: string | null;
    holder: string | null;
    at: Date;
    finished_at: Date | null;
    duration_seconds: number | null;
    detail: string | null;
  }>(
    `select * from leasehold.run_history
      where ($1::text is null or job = $1) and ($2::timestamptz is null or at >= $2)
      order by at desc, slot desc limit $3`,
    [options.job ?? null, options.since ?? null, options.limit ?? 50],
  );
  return rows.map((row) => ({
    job: row.job,
    slot: row.slot,
    kind: row.kind,
    outcome: row.outcome,
    fence: row.fence === null ? null : Number(row.fence),
    holder: row.holder,
    at: row.at,
    finishedAt: row.finished_at,
    durationSeconds: row.duration_seconds,
    detail: row.detail,
  }));
}
