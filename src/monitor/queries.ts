// The dashboard's own read queries, shaped for a fleet of thousands of jobs: fleet-wide
// summaries are single aggregates, the job table is read a page at a time (per-job figures
// through index lookups for that page only), timelines only for the jobs a page shows.
import type { Queryable } from '../db/handle.js';
import { CREEP_WARNING_RATIO, toJobStatus, type JobStatus, type JobStatusRow } from './status.js';

export type JobFilter = 'all' | 'running' | 'expired' | 'failing' | 'creeping' | 'paused';
export const JOB_FILTERS: readonly JobFilter[] = ['all', 'running', 'expired', 'failing', 'creeping', 'paused'];

export interface FleetSummary {
  jobs: number;
  running: number;
  expired: number;
  /** Jobs with at least one failed, lost or timed-out run in the last 24 h. */
  failing: number;
  /** Jobs whose p95 duration over 24 h is at least CREEP_WARNING_RATIO of the interval, below 1. */
  creeping: number;
  /** Jobs whose p95 duration over 24 h is at least their interval. */
  over: number;
  runs24h: number;
  failed24h: number;
  lost24h: number;
  skips24h: number;
  missed24h: number;
  /** Runs that outlived their job's timeout in the last 24 h. */
  timedOut24h: number;
}

// leasehold.fleet_summary() (sql/baseline/5_reads.sql): bounded reads of per-minute run counts and
// of the few jobs that had a slow run, not a pass over a day of runs.
const SUMMARY_SQL = 'select * from leasehold.fleet_summary($1)';

export async function fleetSummary(db: Queryable): Promise<FleetSummary> {
  const { rows } = await db.query<Record<string, number | string>>(SUMMARY_SQL, [CREEP_WARNING_RATIO]);
  // the 24 h counts are bigint (text from pg): whole numbers far below 2^53
  const n = (column: string) => Number(rows[0]![column]);
  return {
    jobs: n('jobs'),
    running: n('running'),
    expired: n('expired'),
    failing: n('failing'),
    creeping: n('creeping'),
    over: n('over_interval'),
    runs24h: n('runs_24h'),
    failed24h: n('failed_24h'),
    lost24h: n('lost_24h'),
    skips24h: n('skips_24h'),
    missed24h: n('missed_24h'),
    timedOut24h: n('timed_out_24h'),
  };
}

// Which jobs a filter keeps; every condition is answerable per job through an index.
const FILTER_SQL: Record<JobFilter, string> = {
  all: 'true',
  paused: 'j.paused_at is not null',
  running: `exists (select 1 from leasehold.lease_status l where l.name = j.name and l.state = 'held')`,
  expired: `exists (select 1 from leasehold.lease_status l where l.name = j.name and l.state = 'expired')`,
  // failed, lost and timed-out runs have ended, so they are history rows: run_log, not the view
  // runs (through the view the planner probed every job instead of one hash join: 0.7 s against
  // 0.4 s at 100,000 failing jobs). The failing names grouped first, then joined as a set: an
  // exists() per job probed the day's failures once per job (178 ms against 106 ms to count
  // 100,000 failing jobs on embedded PostgreSQL 18).
  failing: `j.name in (select r.job from leasehold.run_log r
                        where r.started_at > now() - interval '24 hours' and r.outcome in ('failed', 'lost', 'timed-out') group by r.job)`,
  // only jobs with a slow run in 24 h can creep (leasehold.slow_runs, sql/baseline/5_reads.sql): the
  // exact p95 for those, through their own index range
  creeping: `j.name in (select s.job from leasehold.slow_runs s join leasehold.jobs k on k.name = s.job
                          where s.last_started > now() - interval '24 hours' and k.interval_ms > 0
                            and (select percentile_cont(0.95) within group (order by extract(epoch from r.finished_at - r.started_at))
                                   from leasehold.run_log r
                                  where r.job = s.job and r.finished_at is not null and r.started_at > now() - interval '24 hours')
                                * 1000 / k.interval_ms >= ${CREEP_WARNING_RATIO})`,
};

// Per-job figures over 24 h for the page's jobs (the costly part: one index range per job), of
// ended runs only: run_log.
const FIGURES = `  left join lateral (select count(*) as runs,
                            count(*) filter (where r.outcome = 'failed') as failed,
                            count(*) filter (where r.outcome = 'lost') as lost,
                            count(*) filter (where r.outcome = 'timed-out') as timed_out,
                            percentile_cont(0.5) within group (order by extract(epoch from r.finished_at - r.started_at)) as p50,
                            percentile_cont(0.95) within group (order by extract(epoch from r.finished_at - r.started_at)) as p95
                       from leasehold.run_log r
                      where r.job = p.name and r.finished_at is not null and r.started_at > now() - interval '24 hours') rc on true`;
// Without them: state, holder, last run and schedule only, for a first paint that cannot wait.
const LIGHT_FIGURES = `  cross join (select 0 as runs, 0 as failed, 0 as lost, 0 as timed_out, null::double precision as p50, null::double precision as p95) rc`;

const PAGE_SQL = (filter: JobFilter, light: boolean) => `
with matching as (
  select j.name from leasehold.jobs j
   where ($1::text is null or strpos(lower(j.name), lower($1)) > 0) and ${FILTER_SQL[filter]}
     and j.removed_at is null
),
-- the matching names only, then the page's 50 rows: every matching job's whole row, kept to
-- count and to sort, was most of the page (100,000 failing jobs: 160 of 220 ms)
page as (select j.* from (select m.name from matching m order by m.name limit $2 offset $3) n join leasehold.jobs j on j.name = n.name)
select p.name as job, p.schedule, p.timezone, p.interval_ms, p.ttl_ms, p.overlap, p.catch_up,
       case l.state when 'held' then 'running' when 'expired' then 'expired' else case when p.paused_at is not null then 'paused' else 'idle' end end as state,
       case when l.state = 'free' then null else l.holder end as holder,
       case when l.state = 'free' then null else extract(epoch from now() - l.acquired_at)::double precision end as lease_age_seconds,
       l.fence, l.last_slot,
       lr.slot as last_run_slot, lr.outcome as last_outcome, lr.started_at as last_started_at,
       lr.finished_at as last_finished_at, lr.error as last_error,
       coalesce(rc.runs, 0)::integer as runs_24h, coalesce(rc.failed, 0)::integer as failed_24h,
       coalesce(rc.lost, 0)::integer as lost_24h,
       rc.p50::double precision as p50_seconds, rc.p95::double precision as p95_seconds,
       case when p.interval_ms > 0 and rc.p95 is not null then (rc.p95 * 1000 / p.interval_ms)::double precision end as p95_interval_ratio,
       ${light ? '0' : `(select count(*) from leasehold.skips s where s.job = p.name and s.recorded_at > now() - interval '24 hours')`}::integer as skips_24h,
       ${light ? '0' : `(select count(*) from leasehold.missed m where m.job = p.name and m.recorded_at > now() - interval '24 hours')`}::integer as missed_24h,
       p.source, p.handler, p.paused_at, p.paused_by, p.pause_reason,
       coalesce(rc.timed_out, 0)::integer as timed_out_24h,
       (select count(*) from matching)::integer as total,
       now() as db_now
  from page p
  left join leasehold.lease_status l on l.name = p.name
  left join lateral (select r.slot, r.outcome, r.started_at, r.finished_at, r.error from leasehold.runs r
                      where r.job = p.name order by r.started_at desc limit 1) lr on true
${light ? LIGHT_FIGURES : FIGURES}
 order by p.name`;

export interface JobPageQuery {
  offset: number;
  limit: number;
  /** Substring of the job name, case-insensitive. */
  search?: string;
  filter: JobFilter;
  /** Leave out the 24 h figures (runs, failures, durations, skips, missed): they read as 0 / null. */
  light?: boolean;
}

export interface JobPage {
  now: Date;
  /** Jobs matching the search and filter, all pages together. */
  total: number;
  jobs: JobStatus[];
}

export async function jobPage(db: Queryable, query: JobPageQuery): Promise<JobPage> {
  const { rows } = await db.query<PageRow>(PAGE_SQL(query.filter, query.light === true), [query.search || null, query.limit, query.offset]);
  let total = rows[0]?.total;
  let now = rows[0]?.db_now;
  if (total === undefined || now === undefined) {
    // an empty page (past the end): still say how many match
    const { rows: count } = await db.query<{ total: number; now: Date }>(
      `select count(*)::integer as total, now() as now from leasehold.jobs j where ($1::text is null or strpos(lower(j.name), lower($1)) > 0) and ${FILTER_SQL[query.filter]}`,
      [query.search || null],
    );
    total = count[0]!.total;
    now = count[0]!.now;
  }
  return { now, total, jobs: rows.map(toJobStatus) };
}

interface PageRow extends JobStatusRow {
  total: number;
  db_now: Date;
}

export interface LiveWorker {
  /** Backend process id of the worker's liveness session. */
  pid: number;
  /** The session's application_name (e.g. 'leasehold liveness'). */
  application: string;
  /** Client address, when the dashboard's role may see it. */
  client: string | null;
  since: Date | null;
  /** The holder name a scheduler worker registered for this session (null for other clients). */
  holder: string | null;
  /** Holder names of the leases held under this session, and how many. */
  holders: string[];
  leases: number;
}

/**
 * Live liveness sessions: connections that hold a session-level advisory lock and call
 * themselves '… liveness', with the leases recorded under their key. At most `limit`.
 */
export async function liveWorkers(db: Queryable, limit = 200): Promise<{ workers: LiveWorker[]; total: number }> {
  const { rows } = await db.query<{
    pid: number;
    application: string;
    client: string | null;
    since: Date | null;
    holder: string | null;
    holders: string[] | null;
    leases: number;
    total: number;
  }>(
    `with sessions as (
       select k.pid, a.application_name as application, host(a.client_addr) as client, a.backend_start as since, k.key
         from leasehold.liveness_locks() k join pg_stat_activity a on a.pid = k.pid
        where a.application_name like '%liveness'
     )
     select s.pid, s.application, s.client, s.since,
            (select w.holder from leasehold.worker_handlers w where w.worker_key = s.key) as holder,
            array(select distinct l.holder from leasehold.lease_status l where l.holder_key = s.key and l.state <> 'free' and l.holder is not null order by 1 limit 5) as holders,
            (select count(*) from leasehold.lease_status l where l.holder_key = s.key and l.state <> 'free')::int as leases,
            (select count(*) from sessions)::int as total
       from sessions s
      order by s.since nulls last, s.pid
      limit $1`,
    [limit],
  );
  return {
    total: rows[0]?.total ?? 0,
    workers: rows.map((r) => ({ pid: r.pid, application: r.application, client: r.client, since: r.since, holder: r.holder, holders: r.holders ?? [], leases: r.leases })),
  };
}
