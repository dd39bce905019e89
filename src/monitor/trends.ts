// Trends: a job's (or the fleet's) runs over a window, bucketed by start time into at most
// MAX_BUCKETS buckets on the server, so a chart never receives the runs themselves.
//
// Bounded reads only, at 10,000 jobs and 10 million runs:
// - one job: its runs in the window through runs_job_started (at most JOB_ROW_LIMIT of them, the
//   newest), its skips and missed slots through their (job, slot) primary keys;
// - the fleet (24 h at most): finished runs per minute from run_counts (kept by triggers), failed,
//   lost and timed-out runs through the partial index runs_failing, skips and missed slots
//   through their BRIN indexes on recorded_at; start lateness and each holder's share from the
//   runs of a sample of jobs (every job while their runs in the window fit SAMPLE_ROWS, else a
//   fixed pseudo-random subset that fits), read per job through runs_job_started.
import type { Queryable } from '../db/handle.js';
import { storedSchedule } from '../schedule/schedule-text.js';

/** Buckets of a window at most (a chart's resolution). */
export const MAX_BUCKETS = 96;
/** Bucket widths, in seconds: the smallest that keeps a window within MAX_BUCKETS. */
const STEPS_S = [15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10_800, 21_600, 43_200, 86_400];
/** A job's newest runs read for one chart at most. */
export const JOB_ROW_LIMIT = 100_000;
/** Runs the fleet's lateness and holder shares are computed from, about. */
export const SAMPLE_ROWS = 20_000;
/** A scheduled run is late when it started this long after its slot (plus the job's jitter). */
export const LATE_AFTER_MS = 1_000;
/** Holders named in `holders`; the others are summed as '(others)'. */
const TOP_HOLDERS = 8;

export interface TrendBucket {
  /** Start of the bucket; it spans `stepMs`. */
  at: Date;
  /** Finished runs that started in it. */
  runs: number;
  failed: number;
  lost: number;
  timedOut: number;
  /** Skipped and missed slots recorded in it. */
  skips: number;
  missed: number;
  /** Scheduled runs whose start lateness is counted (run now and backfill are not), and the late ones. */
  scheduled: number;
  late: number;
  /** How long after its slot each scheduled run started, in seconds. */
  lateP50: number | null;
  lateP95: number | null;
  lateMax: number | null;
  /** Run durations in seconds (one job only; null for the fleet). */
  durationP50: number | null;
  durationP95: number | null;
  durationMax: number | null;
}

export interface Trends {
  /** The job, or null for the fleet. */
  job: string | null;
  now: Date;
  since: Date;
  stepMs: number;
  /** The job's interval (from its schedule when none is stored); null for the fleet. */
  intervalMs: number | null;
  buckets: TrendBucket[];
  /** Runs per bucket of each holder (the most active TOP_HOLDERS, then '(others)'). */
  holders: Array<{ holder: string; runs: number[] }>;
  /** Fleet only: lateness and holders come from the runs of `jobs` of `of` jobs (all when equal). */
  sample: { jobs: number; of: number } | null;
  /** The job had more than JOB_ROW_LIMIT runs in the window: the oldest buckets lack some. */
  truncated: boolean;
}

/** The bucket width for a window of `hours`, at least `minStepS` seconds. */
export function trendStep(hours: number, minStepS = STEPS_S[0]!): number {
  const span = hours * 3600;
  return STEPS_S.find((s) => s >= minStepS && span / s <= MAX_BUCKETS) ?? STEPS_S[STEPS_S.length - 1]!;
}

interface Window {
  now: Date;
  since: Date;
  stepS: number;
  first: number;
  count: number;
}

async function window(db: Queryable, hours: number, minStepS: number): Promise<Window> {
  const { rows } = await db.query<{ now: Date }>('select now() as now');
  const now = rows[0]!.now;
  const stepS = trendStep(hours, minStepS);
  const first = Math.floor((now.getTime() / 1000 - hours * 3600) / stepS);
  const last = Math.floor(now.getTime() / 1000 / stepS);
  return { now, since: new Date(first * stepS * 1000), stepS, first, count: last - first + 1 };
}

interface LatenessRow {
  b: string;
  scheduled: number;
  late: number;
  l50: number | null;
  l95: number | null;
  lmax: number | null;
  holders: Record<string, number> | null;
}

const BUCKET = (column: string, step = '$4') => `floor(extract(epoch from ${column}) / ${step})::bigint`;
// per run of `r` (a CTE of runs with started_at, finished_at, slot, outcome, trigger, holder and
// the job's jitter_s): its bucket, duration and, for a scheduled run, its start lateness
const PER_RUN = (step: string) => `
  late as (
    select ${BUCKET('r.started_at', step)} as b, r.holder, r.outcome,
           extract(epoch from r.finished_at - r.started_at)::double precision as duration,
           case when r.trigger = 'schedule' then extract(epoch from r.started_at - r.slot)::double precision end as lateness,
           r.trigger = 'schedule' and r.started_at - r.slot > make_interval(secs => r.jitter_s + ${LATE_AFTER_MS / 1000}) as is_late
      from r
  ),
  per_holder as (select b, holder, count(*)::integer as n from late group by b, holder),
  holders as (select b, jsonb_object_agg(holder, n) as holders from per_holder group by b)`;
const PER_BUCKET = `count(l.lateness)::integer as scheduled, count(*) filter (where l.is_late)::integer as late,
       percentile_cont(0.5) within group (order by l.lateness) as l50,
       percentile_cont(0.95) within group (order by l.lateness) as l95,
       max(l.lateness) as lmax`;

/** One job's trends over the last `hours` (up to a month: as far as its history is kept). */
export async function jobTrends(db: Queryable, job: string, hours: number): Promise<Trends> {
  const w = await window(db, hours, STEPS_S[0]!);
  const args = [job, w.since, w.now, w.stepS];
  const [jobRow, runs, skips, missed] = await Promise.all([
    db.query<{ interval_ms: string | null; schedule: string; timezone: string | null }>(
      'select interval_ms, schedule, timezone from leasehold.jobs where name = $1',
      [job],
    ),
    db.query<LatenessRow & { runs: number; failed: number; lost: number; timed_out: number; d50: number | null; d95: number | null; dmax: number | null; capped: boolean }>(
      // the newest JOB_ROW_LIMIT finished runs of the window, through runs_job_started
      `with r as materialized (
         select r.started_at, r.finished_at, r.slot, r.outcome, r.trigger, r.holder,
                coalesce((select j.jitter_ms from leasehold.jobs j where j.name = $1), 0) / 1000.0 as jitter_s
           from leasehold.run_log r
          where r.job = $1 and r.started_at >= $2 and r.started_at <= $3 and r.finished_at is not null
          order by r.started_at desc
          limit $5
       ),${PER_RUN('$4')}
       select l.b::text as b, count(*)::integer as runs,
              count(*) filter (where l.outcome = 'failed')::integer as failed,
              count(*) filter (where l.outcome = 'lost')::integer as lost,
              count(*) filter (where l.outcome = 'timed-out')::integer as timed_out,
              percentile_cont(0.5) within group (order by l.duration) as d50,
              percentile_cont(0.95) within group (order by l.duration) as d95,
              max(l.duration) as dmax,
              (select count(*) from r) >= $5 as capped,
              ${PER_BUCKET}, h.holders
         from late l left join holders h on h.b = l.b
        group by l.b, h.holders`,
      [...args, JOB_ROW_LIMIT],
    ),
    db.query<{ b: string; n: number }>(
      `select ${BUCKET('slot')}::text as b, count(*)::integer as n from leasehold.skips where job = $1 and slot >= $2 and slot <= $3 group by 1`,
      args,
    ),
    db.query<{ b: string; n: number }>(
      `select ${BUCKET('slot')}::text as b, count(*)::integer as n from leasehold.missed where job = $1 and slot >= $2 and slot <= $3 group by 1`,
      args,
    ),
  ]);
  const row = jobRow.rows[0];
  const intervalMs = row ? (row.interval_ms !== null ? Number(row.interval_ms) : (storedSchedule(row.schedule, row.timezone)?.nominalIntervalMs ?? null)) : null;
  const buckets = emptyBuckets(w);
  for (const r of runs.rows) {
    const b = buckets[Number(r.b) - w.first];
    if (!b) continue;
    Object.assign(b, { runs: r.runs, failed: r.failed, lost: r.lost, timedOut: r.timed_out, durationP50: r.d50, durationP95: r.d95, durationMax: r.dmax });
    setLateness(b, r);
  }
  addCounts(buckets, w, skips.rows, 'skips');
  addCounts(buckets, w, missed.rows, 'missed');
  return {
    job,
    now: w.now,
    since: w.since,
    stepMs: w.stepS * 1000,
    intervalMs,
    buckets,
    holders: topHolders(runs.rows, w),
    sample: null,
    truncated: runs.rows.some((r) => r.capped),
  };
}

/** The fleet's trends over the last `hours` (24 at most: run_counts keeps 25 hours). */
export async function fleetTrends(db: Queryable, hours: number): Promise<Trends> {
  if (!(hours > 0 && hours <= 24)) throw new RangeError(`hours must be above 0 and at most 24 for the fleet (got ${hours})`);
  const w = await window(db, hours, 60);
  const args = [w.since, w.now, w.stepS];
  const [counts, failures, skips, missed, sample] = await Promise.all([
    // minutes are whole multiples of a step of whole minutes: a minute falls in one bucket
    db.query<{ b: string; n: string }>(
      `select floor(c.minute * 60 / $3)::bigint::text as b, sum(c.runs)::text as n
         from leasehold.run_counts c
        where c.minute >= floor(extract(epoch from $1::timestamptz) / 60) and c.minute <= floor(extract(epoch from $2::timestamptz) / 60)
        group by 1`,
      args,
    ),
    db.query<{ b: string; outcome: string; n: number }>(
      `select ${BUCKET('r.started_at', '$3')}::text as b, r.outcome, count(*)::integer as n
         from leasehold.run_log r
        where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at >= $1 and r.started_at <= $2
        group by 1, 2`,
      args,
    ),
    db.query<{ b: string; n: number }>(
      `select ${BUCKET('recorded_at', '$3')}::text as b, count(*)::integer as n from leasehold.skips where recorded_at >= $1 and recorded_at <= $2 group by 1`,
      args,
    ),
    db.query<{ b: string; n: number }>(
      `select ${BUCKET('recorded_at', '$3')}::text as b, count(*)::integer as n from leasehold.missed where recorded_at >= $1 and recorded_at <= $2 group by 1`,
      args,
    ),
    db.query<LatenessRow & { sampled: number; total: number }>(
      // jobs in a fixed pseudo-random order (hash of the name) while the runs they are expected
      // to have in the window (from their interval; every minute when unknown) fit SAMPLE_ROWS
      `with ordered as (
         select j.name, coalesce(j.jitter_ms, 0) / 1000.0 as jitter_s,
                sum(ceil(extract(epoch from $2::timestamptz - $1::timestamptz) * 1000 / greatest(coalesce(j.interval_ms, 60000), 1000)))
                  over (order by hashtext(j.name), j.name rows unbounded preceding) as expected,
                count(*) over () as total
           from leasehold.jobs j
          where j.removed_at is null
       ),
       sample as materialized (select o.name, o.jitter_s from ordered o where o.expected <= $4 or o.expected = (select min(expected) from ordered)),
       r as materialized (
         select s.jitter_s, x.*
           from sample s
           cross join lateral (
             select r.holder, r.started_at, r.finished_at, r.slot, r.outcome, r.trigger from leasehold.run_log r
              where r.job = s.name and r.started_at >= $1 and r.started_at <= $2 and r.finished_at is not null
              order by r.started_at desc limit $4) x
       ),${PER_RUN('$3')}
       select l.b::text as b, ${PER_BUCKET}, h.holders,
              (select count(*) from sample)::integer as sampled, (select max(total) from ordered)::integer as total
         from late l left join holders h on h.b = l.b
        group by l.b, h.holders
       union all
       -- the sample's size even when its jobs had no runs
       select null, 0, 0, null, null, null, null, (select count(*) from sample)::integer, coalesce((select max(total) from ordered), 0)::integer`,
      [...args, SAMPLE_ROWS],
    ),
  ]);
  const buckets = emptyBuckets(w);
  for (const c of counts.rows) {
    const b = buckets[Number(c.b) - w.first];
    if (b) b.runs = Number(c.n);
  }
  for (const f of failures.rows) {
    const b = buckets[Number(f.b) - w.first];
    if (b) b[f.outcome === 'failed' ? 'failed' : f.outcome === 'lost' ? 'lost' : 'timedOut'] += f.n;
  }
  addCounts(buckets, w, skips.rows, 'skips');
  addCounts(buckets, w, missed.rows, 'missed');
  const lateness = sample.rows.filter((r) => r.b !== null);
  for (const r of lateness) {
    const b = buckets[Number(r.b) - w.first];
    if (b) setLateness(b, r);
  }
  const size = sample.rows.find((r) => r.b === null)!;
  return {
    job: null,
    now: w.now,
    since: w.since,
    stepMs: w.stepS * 1000,
    intervalMs: null,
    buckets,
    holders: topHolders(lateness, w),
    sample: { jobs: size.sampled, of: size.total },
    truncated: false,
  };
}

function emptyBuckets(w: Window): TrendBucket[] {
  return Array.from({ length: w.count }, (_, i) => ({
    at: new Date((w.first + i) * w.stepS * 1000),
    runs: 0,
    failed: 0,
    lost: 0,
    timedOut: 0,
    skips: 0,
    missed: 0,
    scheduled: 0,
    late: 0,
    lateP50: null,
    lateP95: null,
    lateMax: null,
    durationP50: null,
    durationP95: null,
    durationMax: null,
  }));
}

function setLateness(b: TrendBucket, r: LatenessRow): void {
  Object.assign(b, { scheduled: r.scheduled, late: r.late, lateP50: r.l50, lateP95: r.l95, lateMax: r.lmax });
}

function addCounts(buckets: TrendBucket[], w: Window, rows: Array<{ b: string; n: number }>, key: 'skips' | 'missed'): void {
  for (const r of rows) {
    const b = buckets[Number(r.b) - w.first];
    if (b) b[key] += r.n;
  }
}

/** Runs per bucket of the TOP_HOLDERS busiest holders, and of the rest as '(others)'. */
function topHolders(rows: Array<{ b: string; holders: Record<string, number> | null }>, w: Window): Trends['holders'] {
  const totals = new Map<string, number>();
  for (const r of rows) for (const [holder, n] of Object.entries(r.holders ?? {})) totals.set(holder, (totals.get(holder) ?? 0) + n);
  const ranked = [...totals.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).map(([holder]) => holder);
  const named = ranked.slice(0, TOP_HOLDERS);
  const series = new Map(named.map((holder) => [holder, new Array<number>(w.count).fill(0)]));
  const others = new Array<number>(w.count).fill(0);
  for (const r of rows) {
    const i = Number(r.b) - w.first;
    if (i < 0 || i >= w.count) continue;
    for (const [holder, n] of Object.entries(r.holders ?? {})) (series.get(holder) ?? others)[i]! += n;
  }
  const out = named.map((holder) => ({ holder, runs: series.get(holder)! }));
  if (ranked.length > TOP_HOLDERS) out.push({ holder: '(others)', runs: others });
  return out;
}
