-- leasehold migration 0018: the fleet's counts and the jobs needing attention first, in one
-- bounded function (what `leasehold status` shows).
--
-- Additive. fleet_status(p_limit) answers what src/observe/fleet-status.ts asked in one
-- statement until now, with the same counts, order and jobs: per reason (expired lease; failed,
-- lost or timed-out run; skipped slot; missed slot, each in the last 24 h) the jobs that have it
-- and that reason's latest time, then at most p_limit jobs, those needing attention first.
-- * Before, every flagged job was found once, and all of them were ranked together (distinct
--   on job, most urgent reason first) to count them and to pick the first p_limit: with every
--   one of 100,000 jobs flagged, a sort of all 200,000 (job, reason) pairs to keep 50 jobs.
-- * Now each reason is counted by its own aggregate (one row per job: the count is its rows),
--   and the page is filled reason by reason, most urgent first: a reason contributes its most
--   recent jobs, at most what is left of p_limit, leaving out the jobs of the more urgent
--   reasons (an anti-join). A reason is only looked at while the page is not full, and then
--   every job of the more urgent reasons is on the page already, so the anti-join is against
--   fewer than p_limit jobs and a job is listed once, under its most urgent reason. Each
--   reason's pick is a top-p_limit of its own rows, not a sort of all flagged jobs.
-- * jit = off: at 100,000 jobs the statement's estimated cost is above jit_above_cost, and
--   compiling the former statement cost 65-110 ms of it. Set on the function, it holds for
--   every caller, whatever the role's settings.
-- The figures of the listed jobs are job_status rows, read by the caller for these jobs only.

-- fleet_status: one row per listed job, in order (place 1, 2, ...): the job, why it is
-- listed first (attention: 'expired', 'failing', 'skipping', 'missing', or null for the jobs
-- that fill the page by name after the flagged ones) and that reason's latest time
-- (attention_at), with the fleet's counts on every row. When nothing is listed (no jobs), one
-- row of counts whose place, job, attention and attention_at are null. As before, a reason
-- counts and lists the names its history has, also those without a job_status row (a removed
-- job's failures): the caller joins job_status and leaves those out.
create function leasehold.fleet_status(p_limit integer)
returns table (
  place         integer,
  job           text,
  attention     text,
  attention_at  timestamptz,
  jobs          integer,
  running       integer,
  expired       integer,
  failing       integer,
  skipping      integer,
  missing       integer,
  leases        integer,
  leases_held   integer
)
language plpgsql stable
set jit = off
set plan_cache_mode = force_custom_plan
rows 50
as $$
#variable_conflict use_column
declare
  v_since timestamptz := now() - interval '24 hours';
begin
  if p_limit is null or p_limit < 1 then
    raise exception 'fleet_status: p_limit must be 1 or more (got %)', coalesce(p_limit::text, 'null') using errcode = '22023';
  end if;
  return query
  -- the leases that are not free or have no job, in one pass over the leases: every lease
  -- count, and the expired leases of jobs
  with leases_seen as materialized (
    select l.name, l.state, l.expires_at, j.name is not null as is_job
      from leasehold.lease_status l left join leasehold.jobs j on j.name = l.name
     where l.state <> 'free' or j.name is null
  ),
  -- each reason: one row per job that has it, with that reason's latest time
  expired_jobs as materialized (
    select l.name as job, l.expires_at as at from leases_seen l where l.is_job and l.state = 'expired'
  ),
  failing_jobs as materialized (
    select r.job, max(r.started_at) as at from leasehold.runs r
     where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at > v_since group by r.job
  ),
  skipping_jobs as materialized (
    select s.job, max(s.recorded_at) as at from leasehold.skips s where s.recorded_at > v_since group by s.job
  ),
  missing_jobs as materialized (
    select m.job, max(m.recorded_at) as at from leasehold.missed m where m.recorded_at > v_since group by m.job
  ),
  -- the page, reason by reason: a reason's most recent jobs (ties by name), as many as are
  -- left, without the jobs listed under a more urgent reason (all of them, when any room is
  -- left); a limit of 0 reads nothing
  page0 as materialized (
    select e.job, 0 as rank, e.at from expired_jobs e order by e.at desc, e.job limit p_limit
  ),
  page1 as materialized (
    select f.job, 1 as rank, f.at from failing_jobs f
     where not exists (select 1 from page0 p where p.job = f.job)
     order by f.at desc, f.job
     limit greatest(p_limit - (select count(*) from page0), 0)
  ),
  page2 as materialized (
    select s.job, 2 as rank, s.at from skipping_jobs s
     where not exists (select 1 from page0 p where p.job = s.job) and not exists (select 1 from page1 p where p.job = s.job)
     order by s.at desc, s.job
     limit greatest(p_limit - (select count(*) from page0) - (select count(*) from page1), 0)
  ),
  page3 as materialized (
    select m.job, 3 as rank, m.at from missing_jobs m
     where not exists (select 1 from page0 p where p.job = m.job) and not exists (select 1 from page1 p where p.job = m.job)
       and not exists (select 1 from page2 p where p.job = m.job)
     order by m.at desc, m.job
     limit greatest(p_limit - (select count(*) from page0) - (select count(*) from page1) - (select count(*) from page2), 0)
  ),
  flagged as materialized (
    select * from page0 union all select * from page1 union all select * from page2 union all select * from page3
  ),
  -- fewer flagged jobs than p_limit (then all of them are listed): the others by name
  unflagged as (
    select j.name as job, null::integer as rank, null::timestamptz as at
      from leasehold.jobs j
     where not exists (select 1 from flagged f where f.job = j.name)
     order by j.name
     limit greatest(p_limit - (select count(*) from flagged), 0)
  ),
  page as (
    select (row_number() over (order by p.rank nulls last, p.at desc nulls last, p.job))::integer as n, p.job, p.rank, p.at
      from (select * from flagged union all select * from unflagged) p
  ),
  lease_counts as (
    select count(*) filter (where l.is_job and l.state = 'held') as running,
           count(*) filter (where not l.is_job) as leases,
           count(*) filter (where not l.is_job and l.state <> 'free') as leases_held
      from leases_seen l
  ),
  counts as (
    select (select count(*) from leasehold.jobs)::integer as jobs,
           c.running::integer as running,
           (select count(*) from expired_jobs)::integer as expired,
           (select count(*) from failing_jobs)::integer as failing,
           (select count(*) from skipping_jobs)::integer as skipping,
           (select count(*) from missing_jobs)::integer as missing,
           c.leases::integer as leases,
           c.leases_held::integer as leases_held
      from lease_counts c
  )
  select p.n, p.job, (array['expired', 'failing', 'skipping', 'missing'])[p.rank + 1], p.at,
         c.jobs, c.running, c.expired, c.failing, c.skipping, c.missing, c.leases, c.leases_held
    from counts c
    left join page p on true
   order by p.n;
end $$;

insert into leasehold.access (object, level) values ('fleet_status', 'reader');
