-- leasehold migration 0026: a run's history records when its handler really started.
--
-- Additive for callers: finish_runs() and end_runs() take one more argument, with a default.
--
-- A run's started_at was written at the claim: the claim's time for a slot claimed at the slot
-- (a round trip and the worker's setup before the handler), and the slot itself for a slot
-- claimed ahead, whatever happened after (handlers started up to 0.6 s later at 10,000 jobs, and
-- a run never started at all read as started at its slot). Lateness (start - slot) could not be
-- read from the history. Now the worker sends, with each run's end, when it called the handler
-- on its estimate of the database clock (epoch milliseconds; null: not started, or unknown), and
-- the history row records that, kept between the claim and the finish (the estimate is as good
-- as the clock's round trip). A run that never started keeps the claim's time, and its error
-- says it was not started.

-- run_start: the recorded start of a run claimed at p_claimed whose handler started at
-- p_started_ms (the worker's estimate of the database clock), kept between the claim and now.
create function leasehold.run_start(p_claimed timestamptz, p_started_ms double precision) returns timestamptz
language sql stable as $$
  select case when p_started_ms is null then p_claimed
              else least(greatest(p_claimed, to_timestamp(p_started_ms / 1000.0)), now()) end;
$$;

drop function leasehold.finish_runs(text[], bigint[], uuid[], text[], text[], integer[]);
drop function leasehold.end_runs(text[], uuid[], bigint[], text[], text[], integer[]);

-- end_runs: as in schema 17, with each run's start (run_start).
create function leasehold.end_runs(
  p_names text[], p_tokens uuid[], p_fences bigint[], p_outcomes text[], p_errors text[], p_attempts integer[],
  p_started_ms double precision[] default null
) returns table (name text, fence bigint, released boolean, recorded boolean)
language plpgsql volatile
set plan_cache_mode = force_custom_plan
set jit = off
-- the lease rows of a batch are found through the primary key, not by a scan of every lease
-- (see claim_batch)
set random_page_cost = 1.1
as $$
#variable_conflict use_column
begin
  return query
  with locked as (
    -- both tests on the newest version of the row, once it is locked
    select l.name, i.fence, i.outcome, i.error, i.attempts, i.started_ms,
           coalesce(l.token = i.token, false) as releasing,
           coalesce(l.run_slot is not null and l.run_fence = i.fence, false) as ending,
           l.run_slot, l.run_fence, l.run_holder, l.run_started_at
      from leasehold.leases l
      join unnest(p_names, p_tokens, p_fences, p_outcomes, p_errors, p_attempts, p_started_ms)
             as i(name, token, fence, outcome, error, attempts, started_ms) on l.name = i.name
     where l.token = i.token or (l.run_slot is not null and l.run_fence = i.fence)
     order by l.name
       for no key update of l
  ),
  -- one change per row: a name given twice is released if any element has its token, and its
  -- run is recorded with the element that ends it
  changing as (
    select distinct on (k.name) k.name, k.fence, k.outcome, k.error, k.attempts, k.started_ms, k.ending,
           bool_or(k.releasing) over (partition by k.name) as releasing,
           k.run_slot, k.run_fence, k.run_holder, k.run_started_at
      from locked k order by k.name, k.ending desc
  ),
  changed as (
    update leasehold.leases l
       set token = case when c.releasing then null else l.token end,
           expires_at = case when c.releasing then null else l.expires_at end,
           holder_key = case when c.releasing then null else l.holder_key end,
           released_at = case when c.releasing then now() else l.released_at end,
           run_slot = case when c.ending then null else l.run_slot end,
           run_started_at = case when c.ending then null else l.run_started_at end
      from changing c
     where l.name = c.name
    returning c.*
  ),
  recorded as (
    insert into leasehold.run_log as r (job, slot, fence, holder, started_at, finished_at, outcome, error, attempts)
    select c.name, c.run_slot, c.run_fence, c.run_holder, leasehold.run_start(c.run_started_at, c.started_ms), now(), c.outcome,
           left(c.error, 4000), coalesce(c.attempts, 1)
      from changed c where c.ending
    on conflict (job, fence) do nothing
    returning r.job
  )
  select c.name, c.fence, c.releasing, c.ending and c.name in (select r.job from recorded r) from changed c;
end $$;

-- finish_runs: as in schema 17, with each run's start: p_started_ms[i], the epoch milliseconds
-- (database clock) at which run i's handler was called, or null.
create function leasehold.finish_runs(
  p_jobs text[], p_fences bigint[], p_tokens uuid[], p_outcomes text[], p_errors text[], p_attempts integer[],
  p_started_ms double precision[] default null
) returns table (job text, fence bigint, recorded boolean, released boolean, next_buffered_slot timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
set plan_cache_mode = force_custom_plan
set jit = off
as $$
#variable_conflict use_column
declare
  v_bad text;
  v_released text[];
  -- the runs recorded from their lease rows, as 'job#fence'
  v_recorded text[];
  v_queued boolean;
begin
  perform leasehold.pin_synchronous_commit();
  if coalesce(cardinality(p_fences), 0) <> coalesce(cardinality(p_jobs), 0) or coalesce(cardinality(p_tokens), 0) <> coalesce(cardinality(p_jobs), 0)
     or coalesce(cardinality(p_outcomes), 0) <> coalesce(cardinality(p_jobs), 0)
     or coalesce(cardinality(p_errors), cardinality(p_jobs), 0) <> coalesce(cardinality(p_jobs), 0)
     or coalesce(cardinality(p_attempts), cardinality(p_jobs), 0) <> coalesce(cardinality(p_jobs), 0)
     or coalesce(cardinality(p_started_ms), cardinality(p_jobs), 0) <> coalesce(cardinality(p_jobs), 0) then
    raise exception 'finish_runs: as many fences, tokens, outcomes, errors, attempts and start times as jobs are needed (% jobs)',
      coalesce(cardinality(p_jobs), 0) using errcode = '22023';
  end if;
  select o into v_bad from unnest(p_outcomes) o
   where o is null or o = 'running' or not (o = any (leasehold.run_outcomes())) limit 1;
  if found then
    raise exception 'outcome must be one of % (got %)',
      array_to_string(array_remove(leasehold.run_outcomes(), 'running'), ', '), coalesce(v_bad, 'null')
      using errcode = '22023';
  end if;
  -- the runs in flight on their lease rows get their history rows, and the leases given with
  -- their tokens are released, in one update of each row
  select coalesce(array_agg(e.name || '#' || e.fence) filter (where e.recorded), '{}'),
         coalesce(array_agg(e.name) filter (where e.released), '{}')
    into v_recorded, v_released
    from leasehold.end_runs(p_jobs, p_tokens, p_fences, p_outcomes, p_errors, p_attempts, p_started_ms) e;
  v_queued := exists (select 1 from leasehold.buffered) and exists (select 1 from leasehold.buffered b where b.job = any (p_jobs));
  return query
  with input as materialized (
    select * from unnest(p_jobs, p_fences, p_outcomes, p_errors, p_attempts, p_started_ms)
      as i(job, fence, outcome, error, attempts, started_ms)
  ),
  -- the runs that have a run_log row from their start
  recorded as (
    update leasehold.run_log r
       set outcome = i.outcome, finished_at = now(), error = left(i.error, 4000), attempts = coalesce(i.attempts, 1),
           started_at = leasehold.run_start(r.started_at, i.started_ms)
      from input i
     where cardinality(v_recorded) < cardinality(p_jobs)
       and r.job = i.job and r.fence = i.fence and r.outcome = 'running'
       and not ((i.job || '#' || i.fence) = any (v_recorded))
    returning r.job, r.fence
  ),
  stale_buffers as (
    delete from leasehold.buffered b using leasehold.leases l, input i
     where v_queued and b.job = i.job and l.name = i.job and b.slot <= l.last_slot
    returning b.job, b.slot
  )
  select i.job, i.fence,
         (i.job || '#' || i.fence) = any (v_recorded) or (i.job, i.fence) in (select r.job, r.fence from recorded r),
         i.job in (select unnest(v_released)),
         case when v_queued then (select min(b.slot) from leasehold.buffered b
           where b.job = i.job
             and b.slot > coalesce((select l.last_slot from leasehold.leases l where l.name = i.job), '-infinity')
             and not exists (select 1 from stale_buffers s where s.job = b.job and s.slot = b.slot)) end
    from input i;
end $$;

-- job_status: as in schema 17, with late_p95_seconds at the end: the p95 over the last 24 h of how
-- long after its slot each scheduled run started (started_at - slot; the jitter offset counts).
create or replace view leasehold.job_status as
select j.name as job,
       j.schedule,
       j.timezone,
       j.interval_ms,
       j.ttl_ms,
       j.overlap,
       j.catch_up,
       case when l.token is null and j.paused_at is not null then 'paused'
            when l.token is null then 'idle' when l.expires_at <= now() then 'expired' else 'running' end as state,
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
       coalesce(m.n, 0)::integer as missed_24h,
       j.source,
       j.handler,
       j.paused_at,
       j.paused_by,
       j.pause_reason,
       coalesce(rc.timed_out, 0)::integer as timed_out_24h,
       rc.late_p95::double precision as late_p95_seconds
  from leasehold.jobs j
  left join leasehold.leases l on l.name = j.name
  left join lateral (
    select x.slot, x.outcome, x.started_at, x.finished_at, x.error
      from leasehold.runs x where x.job = j.name order by x.started_at desc limit 1
  ) r on true
  left join lateral (
    select count(*) as runs,
           count(*) filter (where x.outcome = 'failed') as failed,
           count(*) filter (where x.outcome = 'lost') as lost,
           count(*) filter (where x.outcome = 'timed-out') as timed_out,
           percentile_cont(0.5) within group (order by extract(epoch from x.finished_at - x.started_at)) as p50,
           percentile_cont(0.95) within group (order by extract(epoch from x.finished_at - x.started_at)) as p95,
           percentile_cont(0.95) within group (order by extract(epoch from x.started_at - x.slot))
             filter (where x.trigger = 'schedule') as late_p95
      from leasehold.run_log x
     where x.job = j.name and x.finished_at is not null and x.started_at > now() - interval '24 hours'
  ) rc on true
  left join lateral (
    select count(*) as n from leasehold.skips x where x.job = j.name and x.recorded_at > now() - interval '24 hours'
  ) s on true
  left join lateral (
    select count(*) as n from leasehold.missed x where x.job = j.name and x.recorded_at > now() - interval '24 hours'
  ) m on true
 where j.removed_at is null;;

insert into leasehold.access (object, level) values ('run_start', 'owner');
