// The operator's first look at a fleet of any size (`leasehold status`): counts for the whole
// fleet, then at most `limit` jobs, those that need attention first. Every part is bounded by
// the flagged jobs of the last 24 h or index-driven, not by the history (docs/scheduler.md
// "Reads and history" has its cost at 100,000 jobs and 10 million runs, with every job
// flagged): leasehold.fleet_status() counts each reason once (expired leases from lease_status,
// failures through the partial index runs_failing, skips and missed slots of 24 h) and fills
// the page reason by reason, each a top-`limit` of its own jobs; the listed jobs' figures come
// from job_status, one index range per listed job.
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

// leasehold.fleet_status() (sql/baseline/5_reads.sql) counts the fleet and picks the listed
// jobs, reason by reason (expired, failing, skipping, missing), each reason's most recent first,
// then the rest by name; their figures are job_status rows, one index range per listed job.
// (The function runs with jit = off; declared to return 50 rows, it keeps this statement's
// estimate, 50 job_status lookups, below jit_above_cost.)
const STATUS_SQL = `
select f.place, f.attention, f.jobs as total_jobs, f.running as total_running, f.expired, f.failing, f.skipping, f.missing,
       f.leases as total_leases, f.leases_held as total_leases_held, s.*
  from leasehold.fleet_status($1) f
  left join lateral (select * from leasehold.job_status s where s.job = f.job) s on true
 order by f.place`;

// fleet_status() takes an integer: no fleet has more jobs than that.
const INT4_MAX = 2_147_483_647;

const LEASES_SQL = `
select s.name, s.state, s.holder, s.fence, s.acquired_at, s.expires_at, s.released_at
  from leasehold.lease_status s
 where not exists (select 1 from leasehold.jobs j where j.name = s.name)
 order by s.state = 'free', s.name
 limit $1`;

/** Fleet counts and the first `limit` jobs and leases, those needing attention first. */
export async function fleetStatus(db: pg.Pool | pg.ClientBase, options: { limit: number } & ReadOptions): Promise<FleetStatus> {
  if (!(Number.isInteger(options.limit) && options.limit >= 1)) throw new RangeError(`limit must be a positive integer (got ${options.limit})`);
  const q = reader(db, options);
  const [status, leases] = await Promise.all([q.query<StatusRow>(STATUS_SQL, [Math.min(options.limit, INT4_MAX)]), q.query<UnscheduledLeaseRow>(LEASES_SQL, [options.limit])]);
  const c = status.rows[0]!;
  const counts: FleetCounts = {
    jobs: c.total_jobs,
    running: c.total_running,
    expired: c.expired,
    failing: c.failing,
    skipping: c.skipping,
    missing: c.missing,
    leases: c.total_leases,
    leasesHeld: c.total_leases_held,
  };
  const rows = status.rows.filter((row) => row.job !== null);
  return {
    counts,
    jobs: rows.map((row) => ({ ...toJobStatus(row), attention: row.attention })),
    leases: leases.rows.map(toUnscheduledLease),
    moreJobs: Math.max(0, counts.jobs - rows.length),
    moreLeases: Math.max(0, counts.leases - leases.rows.length),
  };
}

interface StatusRow extends JobStatusRow {
  place: number | null;
  attention: AttentionReason | null;
  expired: number;
  failing: number;
  skipping: number;
  missing: number;
  total_jobs: number;
  total_running: number;
  total_leases: number;
  total_leases_held: number;
}

