-- leasehold migration 0019: the fleet summary joins sets instead of probing per row.
--
-- Additive: fleet_summary() keeps its arguments, columns and numbers. Two of its counts did one
-- index probe per row of a large set; at 100,000 jobs that each failed once in the last 24 hours
-- (embedded PostgreSQL 18, 10 million runs) they were most of its time:
-- * failing jobs: count(distinct job) over the day's failed, lost and timed-out runs, with an
--   exists() probe of jobs for each of those runs (215 ms). Now the failing job names are
--   grouped once (a hash aggregate) and joined to jobs as a set (115 ms).
-- * running and expired: every job joined to its lease to classify all 100,000 leases, free ones
--   included (123 ms). Now only the leases that have a holder are read and joined (a held lease
--   has a token), which is the few a fleet holds at a time.
-- The failure counts read run_log, the ended runs (a failed, lost or timed-out run has ended),
-- not the view runs.

create or replace function leasehold.fleet_summary(p_warn_ratio double precision default 0.8)
returns table (
  jobs integer, running integer, expired integer, failing integer, creeping integer, over_interval integer,
  runs_24h bigint, failed_24h bigint, lost_24h bigint, skips_24h bigint, missed_24h bigint, timed_out_24h bigint
)
language plpgsql stable set jit = off as $$
#variable_conflict use_column
declare
  v_since timestamptz := now() - interval '24 hours';
  v_edge  bigint := floor(extract(epoch from now() - interval '24 hours') / 60)::bigint;
begin
  if p_warn_ratio is null or p_warn_ratio < 0.5 or p_warn_ratio >= 1 then
    raise exception 'p_warn_ratio must be from 0.5 to below 1 (got %)', p_warn_ratio using errcode = '22023';
  end if;
  return query
  with states as (
    -- a lease without a token is free: neither running nor expired
    select count(*) filter (where l.expires_at > now()) as held, count(*) filter (where l.expires_at <= now()) as expired
      from leasehold.leases l join leasehold.jobs j on j.name = l.name
     where l.token is not null
  ),
  failed_runs as not materialized (
    select r.job, r.outcome from leasehold.run_log r
     where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at > v_since and r.finished_at is not null
  ),
  failures as (
    select count(*) filter (where r.outcome = 'failed') as failed,
           count(*) filter (where r.outcome = 'lost') as lost,
           count(*) filter (where r.outcome = 'timed-out') as timed_out
      from failed_runs r
  ),
  failing_jobs as (
    select count(*) as jobs
      from (select r.job from failed_runs r group by r.job) f join leasehold.jobs j on j.name = f.job
  ),
  ratios as (
    select (select percentile_cont(0.95) within group (order by extract(epoch from r.finished_at - r.started_at))
              from leasehold.run_log r
             where r.job = j.name and r.finished_at is not null and r.started_at > v_since) * 1000 / j.interval_ms as ratio
      from leasehold.slow_runs s join leasehold.jobs j on j.name = s.job
     where s.last_started > v_since and j.interval_ms > 0
  )
  select (select count(*) from leasehold.jobs)::integer,
         (select held from states)::integer,
         (select expired from states)::integer,
         (select f.jobs from failing_jobs f)::integer,
         (select count(*) from ratios where ratio >= p_warn_ratio and ratio < 1)::integer,
         (select count(*) from ratios where ratio >= 1)::integer,
         (select coalesce(sum(c.runs), 0) from leasehold.run_counts c where c.minute > v_edge)::bigint
           + (select count(*) from leasehold.run_log r
               where r.started_at > v_since and r.started_at < to_timestamp((v_edge + 1) * 60) and r.finished_at is not null)::bigint,
         (select f.failed from failures f)::bigint,
         (select f.lost from failures f)::bigint,
         (select count(*) from leasehold.skips where recorded_at > v_since)::bigint,
         (select count(*) from leasehold.missed where recorded_at > v_since)::bigint,
         (select f.timed_out from failures f)::bigint;
end $$;
