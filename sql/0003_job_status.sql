-- leasehold migration 0003: job_status, the operator's view of every scheduled job.
--
-- One row per registered job: its schedule, who holds its lease and for how long, the last
-- run and its outcome, run durations over the last 24 hours against the interval (a job whose
-- p95 duration creeps toward its interval is about to start skipping), and skips and missed
-- slots in the last 24 hours.
create view leasehold.job_status as
with recent as (
  select job,
         percentile_cont(0.5) within group (order by extract(epoch from finished_at - started_at)) as p50,
         percentile_cont(0.95) within group (order by extract(epoch from finished_at - started_at)) as p95,
         count(*) as runs,
         count(*) filter (where outcome = 'failed') as failed,
         count(*) filter (where outcome = 'lost') as lost
    from leasehold.runs
   where finished_at is not null and started_at > now() - interval '24 hours'
   group by job
),
last_run as (
  select distinct on (job) job, slot, outcome, started_at, finished_at, error, holder
    from leasehold.runs
   order by job, started_at desc
),
skips as (
  select job, count(*) as n from leasehold.skips where recorded_at > now() - interval '24 hours' group by job
),
missed as (
  select job, count(*) as n from leasehold.missed where recorded_at > now() - interval '24 hours' group by job
)
select j.name as job,
       j.schedule,
       j.timezone,
       j.interval_ms,
       j.ttl_ms,
       j.overlap,
       j.catch_up,
       case when l.token is null then 'idle' when l.expires_at <= now() then 'expired' else 'running' end as state,
       case when l.token is null then null else l.holder end as holder,
       case when l.token is null then null else extract(epoch from now() - l.acquired_at)::double precision end as lease_age_seconds,
       l.fence,
       l.last_slot,
       r.slot as last_run_slot,
       r.outcome as last_outcome,
       r.started_at as last_started_at,
       r.finished_at as last_finished_at,
       r.error as last_error,
       coalesce(rc.runs, 0)::integer as runs_24h,
       coalesce(rc.failed, 0)::integer as failed_24h,
       coalesce(rc.lost, 0)::integer as lost_24h,
       rc.p50::double precision as p50_seconds,
       rc.p95::double precision as p95_seconds,
       case when j.interval_ms > 0 and rc.p95 is not null then (rc.p95 * 1000 / j.interval_ms)::double precision end as p95_interval_ratio,
       coalesce(s.n, 0)::integer as skips_24h,
       coalesce(m.n, 0)::integer as missed_24h
  from leasehold.jobs j
  left join leasehold.leases l on l.name = j.name
  left join last_run r on r.job = j.name
  left join recent rc on rc.job = j.name
  left join skips s on s.job = j.name
  left join missed m on m.job = j.name;

comment on view leasehold.job_status is
  'One row per scheduled job: lease holder, last run, p50/p95 duration and their ratio to the interval over 24 h, skips and missed slots over 24 h.';
