-- leasehold schema, part 5 of 6: read models (no token shown). Each reads an index range per job,
-- so `where job = ...` or `order by job limit n` reads only those jobs.

-- fleet_status: the fleet's counts on every row, and the jobs needing attention (most urgent reason,
-- newest first), then the others by name. A reason lists the names its history has (the caller
-- leaves out those without a job_status row). Its cost follows the last day's failures.
create function leasehold.fleet_status(p_limit integer)
returns table (place integer, job text, attention text, attention_at timestamptz, jobs integer, running integer,
               expired integer, failing integer, skipping integer, missing integer, leases integer, leases_held integer)
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
  with leases_seen as materialized (
    select l.name, l.state, l.expires_at, j.name is not null as is_job
      from leasehold.lease_status l left join leasehold.jobs j on j.name = l.name
     where l.state <> 'free' or j.name is null
  ),
  -- each reason (0 the most urgent): one row per name that has it, with its latest time
  reasons as materialized (
    select 0 as rank, l.name as job, l.expires_at as at from leases_seen l where l.is_job and l.state = 'expired'
    union all
    select 1, r.job, max(r.started_at) from leasehold.runs r
     where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at > v_since group by r.job
    union all
    select 2, s.job, max(s.recorded_at) from leasehold.skips s where s.recorded_at > v_since group by s.job
    union all
    select 3, m.job, max(m.recorded_at) from leasehold.missed m where m.recorded_at > v_since group by m.job
  ),
  flagged as materialized (
    select distinct on (x.job) x.job, x.rank, x.at from reasons x order by x.job, x.rank
  ),
  page as (
    select (row_number() over (order by p.rank nulls last, p.at desc nulls last, p.job))::integer as n, p.job, p.rank, p.at
      from ((select f.job, f.rank, f.at from flagged f order by f.rank, f.at desc, f.job limit p_limit)
            union all
            (select j.name, null, null from leasehold.jobs j
              where not exists (select 1 from flagged f where f.job = j.name)
              order by j.name limit greatest(p_limit - (select count(*) from flagged), 0))) p
  ),
  counts as (
    select (select count(*) from leasehold.jobs)::integer as jobs,
           (select count(*) from leases_seen l where l.is_job and l.state = 'held')::integer as running,
           (select count(*) filter (where x.rank = 0) from reasons x)::integer as expired,
           (select count(*) filter (where x.rank = 1) from reasons x)::integer as failing,
           (select count(*) filter (where x.rank = 2) from reasons x)::integer as skipping,
           (select count(*) filter (where x.rank = 3) from reasons x)::integer as missing,
           (select count(*) from leases_seen l where not l.is_job)::integer as leases,
           (select count(*) from leases_seen l where not l.is_job and l.state <> 'free')::integer as leases_held
  )
  select p.n, p.job, (array['expired', 'failing', 'skipping', 'missing'])[p.rank + 1], p.at,
         c.jobs, c.running, c.expired, c.failing, c.skipping, c.missing, c.leases, c.leases_held
    from counts c left join page p on true
   order by p.n;
end $$;

-- fleet_summary: the fleet's counts over 24 hours, from run_counts and slow_runs, not a day of runs.
create function leasehold.fleet_summary(p_warn_ratio double precision default 0.8)
returns table (jobs integer, running integer, expired integer, failing integer, creeping integer, over_interval integer,
               runs_24h bigint, failed_24h bigint, lost_24h bigint, skips_24h bigint, missed_24h bigint, timed_out_24h bigint)
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
    select count(*) filter (where l.expires_at > now()) as held, count(*) filter (where l.expires_at <= now()) as expired
      from leasehold.leases l join leasehold.jobs j on j.name = l.name
     where l.token is not null
  ),
  failed_runs as not materialized (
    select r.job, r.outcome from leasehold.run_log r
     where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at > v_since and r.finished_at is not null
  ),
  ratios as (
    select (select percentile_cont(0.95) within group (order by extract(epoch from r.finished_at - r.started_at))
              from leasehold.run_log r
             where r.job = j.name and r.finished_at is not null and r.started_at > v_since) * 1000 / j.interval_ms as ratio
      from leasehold.slow_runs s join leasehold.jobs j on j.name = s.job
     where s.last_started > v_since and j.interval_ms > 0
  )
  select (select count(*) from leasehold.jobs)::integer, (select held from states)::integer, (select expired from states)::integer,
         (select count(*) from (select r.job from failed_runs r group by r.job) f join leasehold.jobs j on j.name = f.job)::integer,
         (select count(*) from ratios where ratio >= p_warn_ratio and ratio < 1)::integer,
         (select count(*) from ratios where ratio >= 1)::integer,
         -- the minutes inside the window from the counts, the partial minute at its edge from run_log
         (select coalesce(sum(c.runs), 0) from leasehold.run_counts c where c.minute > v_edge)::bigint
           + (select count(*) from leasehold.run_log r
               where r.started_at > v_since and r.started_at < to_timestamp((v_edge + 1) * 60) and r.finished_at is not null)::bigint,
         (select count(*) from failed_runs r where r.outcome = 'failed')::bigint,
         (select count(*) from failed_runs r where r.outcome = 'lost')::bigint,
         (select count(*) from leasehold.skips where recorded_at > v_since)::bigint,
         (select count(*) from leasehold.missed where recorded_at > v_since)::bigint,
         (select count(*) from failed_runs r where r.outcome = 'timed-out')::bigint;
end $$;

create view leasehold.lease_status as
select l.name,
       case when l.token is null then 'free' when l.expires_at <= now() then 'expired' else 'held' end as state,
       l.holder, l.fence, l.acquired_at, l.expires_at,
       case when l.token is not null then greatest(extract(epoch from l.expires_at - now()), 0)::double precision end as seconds_left,
       -- liveness locks exist only on the incarnation that took them: elsewhere, unknown
       case when l.token is null or l.holder_key is null
                 or l.holder_incarnation is distinct from (select e.incarnation from leasehold.epoch_source() e) then null
            else l.holder_key in (select k.key from leasehold.liveness_locks() k)
       end as holder_alive,
       l.last_slot, l.released_at, l.epoch, l.holder_key
  from leasehold.leases l;

create view leasehold.runs as
select r.id, r.job, r.slot, r.fence, r.holder, r.started_at, r.finished_at, r.outcome, r.error, r.attempts, r.trigger, r.requested_by, r.request_id
  from leasehold.run_log r
union all
select null::bigint, l.name, l.run_slot, l.run_fence, l.run_holder, l.run_started_at, null::timestamptz,
       'running'::text, null::text, 1, 'schedule'::text, null::text, null::bigint
  from leasehold.leases l
 where l.run_slot is not null;
comment on view leasehold.runs is
  'Every run: ended runs and the runs of run now, backfill, start_run and overlap allow from run_log, and the scheduled runs in flight from their lease rows (id null).';

create view leasehold.run_history as
select job, slot, 'run' as kind, outcome, fence, holder, started_at as at, finished_at,
       extract(epoch from finished_at - started_at)::double precision as duration_seconds, error as detail, trigger, requested_by
  from leasehold.runs
union all
select k.job, k.slot, 'skip', case when ran.fence is null then 'skipped' else 'buffered' end,
       k.holder_fence, k.holder, k.recorded_at, null, null,
       format('held by %s (fence %s%s) for %ss%s', k.holder, k.holder_fence,
              coalesce(', slot ' || to_char(k.holder_slot at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), ''),
              round(extract(epoch from k.held_for)::numeric, 1),
              case when ran.fence is null then '' else format('; buffered, ran later (fence %s)', ran.fence) end),
       'schedule', null
  from leasehold.skips k
  left join lateral (select r.fence from leasehold.runs r -- a later run of the slot: from the skip's holder on (fences grow)
                      where r.job = k.job and r.fence >= coalesce(k.holder_fence, 0) and r.slot = k.slot and r.trigger = 'schedule' limit 1) ran on true
union all
select job, slot, 'missed', 'missed', null, null, recorded_at, null, null, reason, 'schedule', null
  from leasehold.missed
union all
select q.job, q.slot, 'skip', 'skipped', q.skip_fence, q.skip_holder, q.decided_at, null, null,
       format('run now held by %s (fence %s)', q.skip_holder, q.skip_fence), q.kind, q.requested_by
  from leasehold.run_requests q
 where q.state = 'skipped';

create view leasehold.run_request_status as
select q.id, q.job, q.kind, q.slot, q.requested_by, q.requested_at,
       case when q.state = 'claimed' and r.outcome is distinct from 'running' then 'done' else q.state end as state,
       q.decided_at, q.decided_by, q.fence, r.outcome, r.started_at, r.finished_at, r.error, q.skip_holder, q.skip_fence
  from leasehold.run_requests q
  left join leasehold.run_log r on r.job = q.job and r.fence = q.fence;

-- job_status: late_p95_seconds is the p95 over 24 h of how long after its slot each scheduled
-- run started (started_at - slot; the jitter offset counts).
create view leasehold.job_status as
select j.name as job, j.schedule, j.timezone, j.interval_ms, j.ttl_ms, j.overlap, j.catch_up,
       case when l.token is null and j.paused_at is not null then 'paused'
            when l.token is null then 'idle' when l.expires_at <= now() then 'expired' else 'running' end as state,
       case when l.token is not null then l.holder end as holder,
       case when l.token is not null then extract(epoch from now() - l.acquired_at)::double precision end as lease_age_seconds,
       l.fence, l.last_slot, r.slot as last_run_slot, r.outcome as last_outcome, r.started_at as last_started_at,
       r.finished_at as last_finished_at, r.error as last_error,
       coalesce(rc.runs, 0)::integer as runs_24h, coalesce(rc.failed, 0)::integer as failed_24h,
       coalesce(rc.lost, 0)::integer as lost_24h, rc.p50::double precision as p50_seconds, rc.p95::double precision as p95_seconds,
       case when j.interval_ms > 0 and rc.p95 is not null then (rc.p95 * 1000 / j.interval_ms)::double precision end as p95_interval_ratio,
       coalesce(s.n, 0)::integer as skips_24h, coalesce(m.n, 0)::integer as missed_24h,
       j.source, j.handler, j.paused_at, j.paused_by, j.pause_reason,
       coalesce(rc.timed_out, 0)::integer as timed_out_24h, rc.late_p95::double precision as late_p95_seconds
  from leasehold.jobs j
  left join leasehold.leases l on l.name = j.name
  left join lateral (select x.slot, x.outcome, x.started_at, x.finished_at, x.error
                       from leasehold.runs x where x.job = j.name order by x.started_at desc limit 1) r on true
  left join lateral (
    select count(*) as runs, count(*) filter (where x.outcome = 'failed') as failed,
           count(*) filter (where x.outcome = 'lost') as lost, count(*) filter (where x.outcome = 'timed-out') as timed_out,
           percentile_cont(0.5) within group (order by extract(epoch from x.finished_at - x.started_at)) as p50,
           percentile_cont(0.95) within group (order by extract(epoch from x.finished_at - x.started_at)) as p95,
           percentile_cont(0.95) within group (order by extract(epoch from x.started_at - x.slot))
             filter (where x.trigger = 'schedule') as late_p95
      from leasehold.run_log x
     where x.job = j.name and x.finished_at is not null and x.started_at > now() - interval '24 hours'
  ) rc on true
  left join lateral (select count(*) as n from leasehold.skips x where x.job = j.name and x.recorded_at > now() - interval '24 hours') s on true
  left join lateral (select count(*) as n from leasehold.missed x where x.job = j.name and x.recorded_at > now() - interval '24 hours') m on true
 where j.removed_at is null;
comment on view leasehold.job_status is
  'One row per scheduled job: lease holder, last run, p50/p95 duration and their ratio to the interval over 24 h, skips and missed slots over 24 h. Each row costs one index range of its job''s runs: filter by job or order by job with a limit at scale.';
