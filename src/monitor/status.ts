// Read models for operators: the job table (leasehold.job_status) and a job's history
// (leasehold.run_history). Shared by the CLI, the dashboard and metrics.
import type pg from 'pg';
import { scheduleSettings, type ScheduleColumns } from '../control/job-row.js';
import type { ScheduleInfo } from '../control/schedules.js';
import type { RunTrigger } from '../job/job.js';
import type { RunState } from '../job/run-outcomes.js';
import { queryable, type Queryable } from '../db/handle.js';
import type { Duration } from '../validate/duration.js';
import { durationSetting } from '../validate/settings.js';
import { READ_DEFAULTS } from './defaults.js';
import { toJobTimeline, type MissedRow, type RunRow, type SkipRow } from './timeline-rows.js';

/** A job whose p95 duration passes this fraction of its interval is creeping toward overlap. */
export const CREEP_WARNING_RATIO = 0.8;

export interface ReadOptions {
  /**
   * Longest a statement may take: milliseconds or a string such as '10s' (50 ms to 10 min). A
   * slower one fails with a DatabaseUnavailableError (QueryTimeoutError); on a pool its connection
   * is closed rather than reused, on a connection you hold you should discard it.
   * @default '10s'
   */
  timeout?: Duration | undefined;
}

/** The read models' statements, each with its timeout. */
export function reader(db: pg.Pool | pg.ClientBase, options: ReadOptions): Queryable {
  return queryable(db, durationSetting(options.timeout, READ_DEFAULTS.timeout, 'timeout'));
}

/** A job of the job table (leasehold.job_status): its settings as ScheduleInfo gives them, its lease and its last 24 hours. */
export interface JobStatus extends Pick<ScheduleInfo, 'schedule' | 'timezone' | 'intervalMs' | 'ttlMs' | 'overlap' | 'catchUp'> {
  job: string;
  /** 'paused': an operator paused it and no run of it holds the lease. */
  state: 'idle' | 'running' | 'expired' | 'paused';
  holder: string | null;
  leaseAgeSeconds: number | null;
  fence: number;
  lastSlot: Date | null;
  lastRun: { slot: Date; outcome: string; startedAt: Date; finishedAt: Date | null; error: string | null } | null;
  runs24h: number;
  failed24h: number;
  lost24h: number;
  /** Runs that outlived their job's timeout in the last 24 h (a failure, like failed and lost). */
  timedOut24h: number;
  p50Seconds: number | null;
  p95Seconds: number | null;
  /** p95 duration / interval over the last 24 h; above CREEP_WARNING_RATIO the job is creeping toward overlap. */
  p95IntervalRatio: number | null;
  skips24h: number;
  missed24h: number;
  /** p95 over the last 24 h of how long after its slot each scheduled run's handler started (runs.started_at - slot). */
  lateP95Seconds: number | null;
  /** Set when p95IntervalRatio passes CREEP_WARNING_RATIO. */
  warning: string | null;
  /** 'code' (a worker's jobs) or 'data' (leasehold.control.define). */
  source: 'code' | 'data';
  /** The handler name of a data job, or null. */
  handler: string | null;
  /** Who paused the job, when and why; null when it is not paused. */
  paused: { at: Date; by: string | null; reason: string | null } | null;
}

/** A row of leasehold.job_status (the dashboard's paged query returns the same columns). */
export interface JobStatusRow extends ScheduleColumns {
  job: string;
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
  source?: 'code' | 'data';
  handler?: string | null;
  paused_at?: Date | null;
  paused_by?: string | null;
  pause_reason?: string | null;
  timed_out_24h?: number;
  late_p95_seconds?: number | null;
}

export async function jobStatus(db: pg.Pool | pg.ClientBase, job?: string, options: ReadOptions = {}): Promise<JobStatus[]> {
  const { rows } = await reader(db, options).query<JobStatusRow>(
    `select * from leasehold.job_status where $1::text is null or job = $1 order by job`,
    [job ?? null],
  );
  return rows.map(toJobStatus);
}

/** A job_status row as the public JobStatus. */
export function toJobStatus(row: JobStatusRow): JobStatus {
  const ratio = row.p95_interval_ratio;
  return {
    job: row.job,
    ...scheduleSettings(row),
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
    timedOut24h: row.timed_out_24h ?? 0,
    lateP95Seconds: row.late_p95_seconds ?? null,
    p50Seconds: row.p50_seconds,
    p95Seconds: row.p95_seconds,
    p95IntervalRatio: ratio,
    skips24h: row.skips_24h,
    missed24h: row.missed_24h,
    warning: creepWarning(row.job, ratio),
    source: row.source ?? 'code',
    handler: row.handler ?? null,
    paused: row.paused_at ? { at: row.paused_at, by: row.paused_by ?? null, reason: row.pause_reason ?? null } : null,
  };
}

/** The warning for a p95/interval ratio: overlapping at 100 % and more, creeping from CREEP_WARNING_RATIO. */
export function creepWarning(job: string, ratio: number | null): string | null {
  if (ratio === null || ratio <= CREEP_WARNING_RATIO) return null;
  const share = `p95 duration is ${Math.round(ratio * 100)}% of the interval`;
  return ratio >= 1
    ? `${share}: "${job}" runs are overlapping their next slots (they are skipped or buffered)`
    : `${share}: "${job}" is creeping toward overlap`;
}

/** A lease that no job definition describes: taken with acquire()/run() without history, psql, Python, shell. */
export interface UnscheduledLease {
  name: string;
  state: 'free' | 'held' | 'expired';
  /** The current holder, or the last one when free. */
  holder: string | null;
  fence: number;
  /** When the current (or last) holder acquired it. */
  since: Date | null;
  expiresAt: Date | null;
  releasedAt: Date | null;
}

/** Every lease without a row in leasehold.jobs, held ones first. */
export async function unscheduledLeases(db: pg.Pool | pg.ClientBase, name?: string, options: ReadOptions = {}): Promise<UnscheduledLease[]> {
  const { rows } = await reader(db, options).query<UnscheduledLeaseRow>(
    `select s.name, s.state, s.holder, s.fence, s.acquired_at, s.expires_at, s.released_at
       from leasehold.lease_status s
      where ($1::text is null or s.name = $1)
        and not exists (select 1 from leasehold.jobs j where j.name = s.name)
      order by s.state = 'free', s.name`,
    [name ?? null],
  );
  return rows.map(toUnscheduledLease);
}

/** A row of leasehold.lease_status as the read models select it for a lease without a job. */
export interface UnscheduledLeaseRow {
  name: string;
  state: UnscheduledLease['state'];
  holder: string | null;
  fence: string;
  acquired_at: Date | null;
  expires_at: Date | null;
  released_at: Date | null;
}

export function toUnscheduledLease(row: UnscheduledLeaseRow): UnscheduledLease {
  return {
    name: row.name,
    state: row.state,
    holder: row.holder,
    fence: Number(row.fence),
    since: row.acquired_at,
    expiresAt: row.expires_at,
    releasedAt: row.released_at,
  };
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
  /** What started a run: its schedule, a run now ('manual') or a backfill; a skipped run now is a skip with 'manual'. */
  trigger: 'schedule' | 'manual' | 'backfill';
  /** Who asked for a run now or backfill (null for the schedule). */
  requestedBy: string | null;
}

/** A job's runs, skips and missed slots, newest first. */
export async function jobHistory(
  db: pg.Pool | pg.ClientBase,
  options: { job?: string; limit?: number; since?: Date } & ReadOptions = {},
): Promise<HistoryEntry[]> {
  const { rows } = await reader(db, options).query<{
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
    trigger: HistoryEntry['trigger'];
    requested_by: string | null;
  }>(
    `select * from leasehold.run_history
      where ($1::text is null or job = $1) and ($2::timestamptz is null or at >= $2)
      order by at desc, slot desc limit $3`,
    [options.job ?? null, options.since ?? null, options.limit ?? READ_DEFAULTS.historyLimit],
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
    trigger: row.trigger,
    requestedBy: row.requested_by,
  }));
}

export interface TimelineRun {
  job: string;
  slot: Date;
  fence: number;
  holder: string;
  startedAt: Date;
  /** null while running. */
  finishedAt: Date | null;
  outcome: RunState;
  error: string | null;
  attempts: number;
  /** What started it: its schedule, a run now (`manual`) or a backfill of a past slot. */
  trigger: RunTrigger;
}

export interface TimelineSkip {
  job: string;
  slot: Date;
  /** The holder that kept the slot from running, its fence and slot, and how long it had held the lease. */
  holder: string | null;
  holderFence: number | null;
  holderSlot: Date | null;
  heldForSeconds: number | null;
  recordedBy: string;
  recordedAt: Date;
}

export interface TimelineMissed {
  job: string;
  slot: Date;
  reason: string;
  recordedBy: string;
  recordedAt: Date;
}

export interface JobTimeline {
  /** The database's clock when the window was computed: the right edge of the timeline. */
  now: Date;
  /** now − hours: the left edge. */
  since: Date;
  /** Runs overlapping the window (started before its end, unfinished or finished after its start), oldest first. */
  runs: TimelineRun[];
  /** Skipped slots inside the window, oldest first. */
  skips: TimelineSkip[];
  /** Missed slots inside the window, oldest first. */
  missed: TimelineMissed[];
  /** True when a list hit `limit` (the newest rows are kept). */
  truncated: boolean;
}

/**
 * Runs, skips and missed slots of one job (or all jobs) over the last `hours`, by the database's
 * clock: what a timeline draws. At most `limit` rows of each kind (newest first), default 5000.
 */
export async function jobTimeline(
  db: pg.Pool | pg.ClientBase,
  options: { job?: string; hours: number; limit?: number } & ReadOptions,
): Promise<JobTimeline> {
  if (!(Number.isFinite(options.hours) && options.hours > 0)) throw new RangeError(`hours must be a positive number (got ${options.hours})`);
  const limit = options.limit ?? READ_DEFAULTS.timelineLimit;
  const q = reader(db, options);
  const job = options.job ?? null;
  const {
    rows: [window],
  } = await q.query<{ now: Date; since: Date }>(
    `select now() as now, now() - make_interval(secs => $1::double precision) as since`,
    [options.hours * 3600],
  );
  const { now, since } = window!;
  const [runs, skips, missed] = await Promise.all([
    q.query<RunRow>(
      // A run that started more than a day before the window and is still open is 'running'
      // (found through runs_running); everything else is found through runs_job_started.
      `select job, slot, fence, holder, started_at, finished_at, outcome, error, attempts, trigger
         from leasehold.runs
        where ($1::text is null or job = $1)
          and started_at <= $3
          and (started_at >= $2::timestamptz - interval '1 day' or outcome = 'running')
          and (finished_at is null or finished_at >= $2)
        order by started_at desc, fence desc
        limit $4`,
      [job, since, now, limit],
    ),
    q.query<SkipRow>(
      `select job, slot, holder, holder_fence, holder_slot,
              extract(epoch from held_for)::double precision as held_for_seconds, recorded_by, recorded_at
         from leasehold.skips
        where ($1::text is null or job = $1) and slot >= $2 and slot <= $3
        order by slot desc
        limit $4`,
      [job, since, now, limit],
    ),
    q.query<MissedRow>(
      `select job, slot, reason, recorded_by, recorded_at
         from leasehold.missed
        where ($1::text is null or job = $1) and slot >= $2 and slot <= $3
        order by slot desc
        limit $4`,
      [job, since, now, limit],
    ),
  ]);
  return toJobTimeline(now, since, runs.rows, skips.rows, missed.rows, limit);
}
