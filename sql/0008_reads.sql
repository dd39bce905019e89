-- leasehold migration 0008: reads that stay fast at 100,000 jobs and 10 million history rows.
--
--   * job_status reads each job's figures through runs (job, started_at desc), one index range
--     per job (LATERAL): `where job = ...` or `order by job limit n` reads only those jobs.
--     Columns, names and types are unchanged.
--   * BRIN indexes on the history tables' time columns: prune_history and fleet-wide "since"
--     reads skip the old (or the new) part of the table without a btree that every claim pays.
--   * runs_failed: a partial index of failed and lost runs only (a claim inserts 'running' rows,
--     which it does not hold), so "which jobs failed in the last 24 h" reads only those.
--   * prune_history(p_keep, p_batch = null): with p_batch, one batch of at most p_batch rows of
--     each kind; without, everything prunable in batches of 10,000, as before.
--   * recent_history(p_limit, p_since): the newest entries across all jobs, bounded.

-- BRIN: a few pages for 10 million rows, updated only when a block's range grows.
create index runs_finished_brin on leasehold.runs using brin (finished_at) with (pages_per_range = 32);
create index runs_started_brin on leasehold.runs using brin (started_at) with (pages_per_range = 32);
create index skips_recorded_brin on leasehold.skips using brin (recorded_at) with (pages_per_range = 32);
create index missed_recorded_brin on leasehold.missed using brin (recorded_at) with (pages_per_range = 32);
create index runs_failed on leasehold.runs (started_at desc) where outcome in ('failed', 'lost');

create or replace view leasehold.job_status as
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
  left join lateral (
    select x.slot, x.outcome, x.started_at, x.finished_at, x.error
      from leasehold.runs x where x.job = j.name order by x.started_at desc limit 1
  ) r on true
  left join lateral (
    select count(*) as runs,
           count(*) filter (where x.outcome = 'failed') as failed,
           count(*) filter (where x.outcome = 'lost') as lost,
           percentile_cont(0.5) within group (order by extract(epoch from x.finished_at - x.started_at)) as p50,
           percentile_cont(0.95) within group (order by extract(epoch from x.finished_at - x.started_at)) as p95
      from leasehold.runs x
     where x.job = j.name and x.finished_at is not null and x.started_at > now() - interval '24 hours'
  ) rc on true
  left join lateral (
    select count(*) as n from leasehold.skips x where x.job = j.name and x.recorded_at > now() - interval '24 hours'
  ) s on true
  left join lateral (
    select count(*) as n from leasehold.missed x where x.job = j.name and x.recorded_at > now() - interval '24 hours'
  ) m on true;

comment on view leasehold.job_status is
  'One row per scheduled job: lease holder, last run, p50/p95 duration and their ratio to the interval over 24 h, skips and missed slots over 24 h. '
  'Each row costs one index range of its job''s runs: filter by job or order by job with a limit at scale.';

-- prune_history(p_keep, p_batch): deletes finished runs, skips, missed slots and clock step
-- windows older than p_keep, in batches of at most p_batch rows of each kind.
-- With p_batch null (and from the one-argument calls of schema 7) it deletes everything
-- prunable, 10,000 rows of each kind at a time; with p_batch it deletes one batch, so a caller
-- can commit between batches (fewer than p_batch rows of each kind: nothing prunable is left).
-- The BRIN indexes find the old rows: when nothing is old enough, no table is scanned.
drop function leasehold.prune_history(interval);
create function leasehold.prune_history(p_keep interval, p_batch integer default null) returns bigint
language plpgsql volatile as $$
declare
  n bigint := 0;
  c bigint;
  v_before timestamptz := now() - p_keep;
  v_batch integer := coalesce(p_batch, 10000);
begin
  if v_batch < 1 then
    raise exception 'prune_history: p_batch must be at least 1 (got %)', p_batch using errcode = '22023';
  end if;
  if not pg_try_advisory_xact_lock(7308604897068083570) then
    return 0;
  end if;
  loop
    c := 0;
    with d as (
      delete from leasehold.runs where id in (
        select id from leasehold.runs where finished_at < v_before and outcome <> 'running' limit v_batch)
      returning 1)
    select c + count(*) into c from d;
    with d as (
      delete from leasehold.skips where ctid in (
        select ctid from leasehold.skips where recorded_at < v_before limit v_batch)
      returning 1)
    select c + count(*) into c from d;
    with d as (
      delete from leasehold.missed where ctid in (
        select ctid from leasehold.missed where recorded_at < v_before limit v_batch)
      returning 1)
    select c + count(*) into c from d;
    n := n + c;
    exit when p_batch is not null or c = 0;
  end loop;
  delete from leasehold.clock_steps where recorded_at < v_before;
  get diagnostics c = row_count;
  return n + c;
end $$;

-- recent_history: the newest p_limit entries of run_history across all jobs, newest first
-- (only those at or after p_since when given). run_history itself has no fleet-wide time
-- index: `order by at desc limit n` on the view reads every row. This looks back through
-- growing windows (BRIN on the time columns) until one holds p_limit entries, so its cost
-- follows how many entries the newest window holds, not the size of the history.
create function leasehold.recent_history(p_limit integer, p_since timestamptz default null)
returns table (job text, slot timestamptz, kind text, outcome text, fence bigint, holder text, at timestamptz,
               finished_at timestamptz, duration_seconds double precision, detail text)
language plpgsql stable as $$
#variable_conflict use_column
declare
  v_window interval;
  v_from timestamptz;
  v_found bigint;
begin
  if p_limit is null or p_limit < 1 or p_limit > 10000 then
    raise exception 'recent_history: p_limit must be 1 to 10000 (got %)', p_limit using errcode = '22023';
  end if;
  foreach v_window in array array['5 minutes', '1 hour', '1 day', '7 days', '90 days']::interval[] loop
    v_from := greatest(now() - v_window, p_since);
    select (select count(*) from (select 1 from leasehold.runs where started_at >= v_from limit p_limit) a)
         + (select count(*) from (select 1 from leasehold.skips where recorded_at >= v_from limit p_limit) b)
         + (select count(*) from (select 1 from leasehold.missed where recorded_at >= v_from limit p_limit) c)
      into v_found;
    -- p_limit entries at or after v_from: the newest p_limit overall are among them
    exit when v_found >= p_limit or v_from = p_since;
  end loop;
  if v_found < p_limit and v_from is distinct from p_since then
    v_from := p_since;  -- fewer than p_limit in 90 days: all of it (or all since p_since)
  end if;
  -- Each kind cut at p_limit first; a skip's "ran later" lookup only for the skips kept.
  return query
  with r as (
    select * from leasehold.runs x where x.started_at >= coalesce(v_from, '-infinity')
     order by x.started_at desc, x.slot desc, x.job limit p_limit
  ), k as (
    select * from leasehold.skips x where x.recorded_at >= coalesce(v_from, '-infinity')
     order by x.recorded_at desc, x.slot desc, x.job limit p_limit
  ), m as (
    select * from leasehold.missed x where x.recorded_at >= coalesce(v_from, '-infinity')
     order by x.recorded_at desc, x.slot desc, x.job limit p_limit
  ), merged as (
    select r.job, r.slot, 'run' as kind, r.outcome, r.fence, r.holder, r.started_at as at, r.finished_at,
           extract(epoch from r.finished_at - r.started_at)::double precision as duration_seconds, r.error as detail,
           null::text as skip_holder, null::bigint as skip_fence, null::timestamptz as skip_slot, null::interval as held_for
      from r
    union all
    select k.job, k.slot, 'skip', null, k.holder_fence, k.holder, k.recorded_at, null, null, null,
           k.holder, k.holder_fence, k.holder_slot, k.held_for
      from k
    union all
    select m.job, m.slot, 'missed', 'missed', null, null, m.recorded_at, null, null, m.reason, null, null, null, null
      from m
  ), newest as (
    select * from merged order by at desc, slot desc, job, kind limit p_limit
  )
  -- the skip row as run_history words it
  select n.job, n.slot, n.kind,
         case when n.kind <> 'skip' then n.outcome when ran.fence is null then 'skipped' else 'buffered' end,
         n.fence, n.holder, n.at, n.finished_at, n.duration_seconds,
         case when n.kind <> 'skip' then n.detail else
           format('held by %s (fence %s%s) for %ss%s', n.skip_holder, n.skip_fence,
                  coalesce(', slot ' || to_char(n.skip_slot at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), ''),
                  round(extract(epoch from n.held_for)::numeric, 1),
                  case when ran.fence is null then '' else format('; buffered, ran later (fence %s)', ran.fence) end)
         end
    from newest n
    left join lateral (select x.fence from leasehold.runs x
                        where n.kind = 'skip' and x.job = n.job and x.slot = n.slot limit 1) ran on true
   order by n.at desc, n.slot desc, n.job, n.kind;
end $$;

comment on function leasehold.recent_history(integer, timestamptz) is
  'The newest entries of run_history across all jobs (at most p_limit, 1 to 10000), in the order at desc, slot desc, job, kind.';

insert into leasehold.access (object, level) values ('recent_history', 'reader');
