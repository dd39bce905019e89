// The operator's first look at a fleet of any size (`leasehold status`): counts for the whole
// fleet, then at most `limit` jobs, those that need attention first. Every part is bounded by
// the flagged jobs or index-driven, not by the history (docs/scheduler.md "Reads and history"
// has its cost at 100,000 jobs and 10 million runs, with every job flagged):
// expired leases from lease_status (what a reader may see), failures (failed, lost, timed-out) through the partial index runs_failing, skips
// and missed slots through their BRIN time indexes, and the listed jobs' figures through
// job_status, one index range per listed job.
import type pg from 'pg';
import { reader, toJobStatus, toUnscheduledLease, type JobStatus, type JobStatusRow, type ReadOptions, type UnscheduledLease, type UnscheduledLeaseRow } from './status.js';

/** Why a job is listed first: the most urgent reason it has. */
export type AttentionReason = 'expired' | 'failing' | 'skipping' | 'missing';

export interface FleetCounts {
  jobs: number;
  running: number;
  /** Jobs whose lease expired while held: the holder stopped renewing. */
  expired: number;
  /** Jobs with a failed, lost or timed-out run in the last 24 h. */
  failing: number;
  /** Jobs with a skipped slot in the last 24 h. */
  skipping: number;
  /** Jobs with a missed slot in the last 24 h. */
  missing: number;
  /** Leases without a job definition, and how many of them are not free (held, or expired while held). */
  leases: number;
  leasesHeld: number;
}

export interface FleetStatus {
  counts: FleetCounts;
  /** At most `limit` jobs: those needing attention (most urgent, most recent first), then the rest by name. */
  jobs: Array<JobStatus & { attention: AttentionReason | null }>;
  /** At most `limit` leases without a job definition, held ones first. */
  leases: UnscheduledLease[];
  /** Jobs and leases left out by the limit. */
  moreJobs: number;
  moreLeases: number;
}

const FLAGGED = `
flagged as (
  select l.name as job, 0 as rank, l.expires_at as at
    from leasehold.lease_status l join leasehold.jobs j on j.name = l.name
   where l.state = 'expired'
  union all
  select r.job, 1, max(r.started_at) from leasehold.runs r
   where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at > now() - interval '24 hours' group by r.job
  union all
  select s.job, 2, max(s.recorded_at) from leasehold.skips s where s.recorded_at > now() - interval '24 hours' group by s.job
  union all
  select m.job, 3, max(m.recorded_at) from leasehold.missed m where m.recorded_at > now() - interval '24 hours' group by m.job
),
-- each job once, with its most urgent reason and that reason's latest time
ranked as (select distinct on (job) job, rank, at from flagged order by job, rank, at desc)`;

// One statement: the flagged jobs are found once, then counted and ranked. The anti-join that
// fills the page with unflagged jobs runs only when fewer than `limit` jobs are flagged.
const STATUS_SQL = `
with ${FLAGGED.trim()},
counts as (
  select count(*) filter (where rank = 0) as expired, count(*) filter (where rank = 1) as failing,
         count(*) filter (where rank = 2) as skipping, count(*) filter (where rank = 3) as missing
    from flagged
),
chosen as (
  (select job, rank, at from ranked order by rank, at desc, job limit $1)
  union all
  (select j.name, 9, null from leasehold.jobs j
    where (select count(*) from ranked) < $1 and not exists (select 1 from ranked r where r.job = j.name)
    order by j.name limit $1)
),
page as (select * from chosen order by rank, at desc nulls last, job limit $1)
select p.rank, s.*, c.*,
       (select count(*) from leasehold.jobs)::integer as total_jobs,
       (select count(*) from leasehold.lease_status l join leasehold.jobs j on j.name = l.name
         where l.state = 'held')::integer as total_running,
       (select count(*) from leasehold.lease_status l where not exists (select 1 from leasehold.jobs j where j.name = l.name))::integer as total_leases,
       (select count(*) from leasehold.lease_status l where l.state <> 'free'
           and not exists (select 1 from leasehold.jobs j where j.name = l.name))::integer as total_leases_held
  from counts c
  left join page p on true
  left join lateral (select * from leasehold.job_status s where s.job = p.job) s on true
 order by p.rank, p.at desc nulls last, p.job`;

const LEASES_SQL = `
select s.name, s.state, s.holder, s.fence, s.acquired_at, s.expires_at, s.released_at
  from leasehold.lease_status s
 where not exists (select 1 from leasehold.jobs j where j.name = s.name)
 order by s.state = 'free', s.name
 limit $1`;

const REASONS: Record<number, AttentionReason> = { 0: 'expired', 1: 'failing', 2: 'skipping', 3: 'missing' };

/** Fleet counts and the first `limit` jobs and leases, those needing attention first. */
export async function fleetStatus(db: pg.Pool | pg.ClientBase, options: { limit: number } & ReadOptions): Promise<FleetStatus> {
  if (!(Number.isInteger(options.limit) && options.limit >= 1)) throw new RangeError(`limit must be a positive integer (got ${options.limit})`);
  const q = reader(db, options);
  const [status, leases] = await Promise.all([q.query<StatusRow>(STATUS_SQL, [options.limit]), q.query<UnscheduledLeaseRow>(LEASES_SQL, [options.limit])]);
  const c = status.rows[0]!;
  const counts: FleetCounts = {
    jobs: c.total_jobs,
    running: c.total_running,
    expired: Number(c.expired),
    failing: Number(c.failing),
    skipping: Number(c.skipping),
    missing: Number(c.missing),
    leases: c.total_leases,
    leasesHeld: c.total_leases_held,
  };
  const rows = status.rows.filter((row) => row.job !== null);
  return {
    counts,
    jobs: rows.map((row) => ({ ...toJobStatus(row), attention: REASONS[row.rank] ?? null })),
    leases: leases.rows.map(toUnscheduledLease),
    moreJobs: Math.max(0, counts.jobs - rows.length),
    moreLeases: Math.max(0, counts.leases - leases.rows.length),
  };
}

interface StatusRow extends JobStatusRow {
  rank: number;
  expired: string;
  failing: string;
  skipping: string;
  missing: string;
  total_jobs: number;
  total_running: number;
  total_leases: number;
  total_leases_held: number;
}

