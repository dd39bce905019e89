-- leasehold migration 0017: a run's history row is written once, when it ends; a tick's claim
-- returns compact rows.
--
-- Additive for callers: leasehold.runs keeps its columns and still shows every run, running
-- or ended, and claim(), claim_due(), claim_slots() and finish_runs() keep their arguments,
-- rows and decisions. What changes is where a scheduled run lives while it runs.
-- * Before, claim() inserted a `runs` row ('running') for every claimed slot and finish_runs()
--   updated it: two index rounds per run (5 indexes), about 40% of a tick's claim on the
--   server (10,000 jobs on PostgreSQL 15: 235 ms with the insert, 140 ms without).
-- * Now a run claimed by claim() is recorded on its lease row while it runs (run_slot,
--   run_fence, run_holder, run_started_at: written by the same update that grants the lease),
--   and its history row is inserted once, complete, by finish_runs(). The table of history
--   rows is leasehold.run_log (the former runs table, renamed with its indexes and triggers);
--   leasehold.runs is a view of run_log and of the runs in flight on lease rows, with the
--   same columns (id is null for a run in flight). Readers see the same runs as before.
-- * A run in flight whose lease is taken over (its holder died, its lease expired, or overlap
--   'replace') is recorded 'lost' by the claim that takes it, as before, from the lease row
--   (end_runs: the one rule by which a lease row lets go of its lease and of its run).
-- * Runs that are not claimed by claim() still get a row when they start: run now and
--   backfill (claim_requests), start_run() (exec, run()) and overlap 'allow' (no lease to
--   hold the run). finish_runs() finishes both kinds.
-- * claim(), claim_due() and the new claim_tick() are one function, claim_batch(), with plain
--   arrays for its input (no composite array to build and unnest per step) and a flag for
--   which rows to return. claim_due() no longer probes every request's lease before calling
--   claim(): claim_batch() skips the reporting of slots already claimed itself.
-- * claim_tick() is the worker's claim: claim_due()'s rows with times as epoch milliseconds
--   (double precision), so a client parses numbers instead of timestamps.
-- * claim_batch() validates modes and buffer caps (22023), and finish_runs() the lengths of its
--   arrays: an unknown mode was taken as 'exclusive' before, arrays of other lengths were
--   padded with nulls.
-- * Found on the way: end_runs() locks like an UPDATE (FOR NO KEY UPDATE), so a holder's open
--   fenced transaction does not hold up its release; confirm_leases() locks in name order, as
--   end_runs() does (a renewal racing a finish of the same leases could deadlock);
--   add_run_counts() serializes a shard's transactions (one that recorded runs twice could
--   deadlock with another); acquire() and force_release() end a scheduled run in flight on the
--   row as lost, as a claim's takeover does.

alter table leasehold.runs rename to run_log;
comment on table leasehold.run_log is
  'History rows of runs: one per run, written when it ends (or when it starts, for runs of run now, backfill, start_run and overlap allow). Read leasehold.runs, which adds the runs in flight.';

-- The run in flight on this lease, claimed by claim(): its slot, fence, holder and start. Null
-- run_slot: none (run_fence stays: the fence of the lease's last claim() grant).
alter table leasehold.leases
  add column run_slot timestamptz,
  add column run_fence bigint,
  add column run_holder text,
  add column run_started_at timestamptz;

create view leasehold.runs as
select r.id, r.job, r.slot, r.fence, r.holder, r.started_at, r.finished_at, r.outcome, r.error, r.attempts,
       r.trigger, r.requested_by, r.request_id
  from leasehold.run_log r
union all
select null::bigint, l.name, l.run_slot, l.run_fence, l.run_holder, l.run_started_at, null::timestamptz,
       'running'::text, null::text, 1, 'schedule'::text, null::text, null::bigint
  from leasehold.leases l
 where l.run_slot is not null;
comment on view leasehold.runs is
  'Every run: ended runs and the runs of run now, backfill, start_run and overlap allow from run_log, and the scheduled runs in flight from their lease rows (id null).';

-- The views over runs were bound to the table, now run_log: bind them to the view again
-- (their text is that of migrations 11 and 12), so that a run in flight is their last run.
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
       coalesce(rc.timed_out, 0)::integer as timed_out_24h
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
           percentile_cont(0.95) within group (order by extract(epoch from x.finished_at - x.started_at)) as p95
      from leasehold.run_log x
     where x.job = j.name and x.finished_at is not null and x.started_at > now() - interval '24 hours'
  ) rc on true
  left join lateral (
    select count(*) as n from leasehold.skips x where x.job = j.name and x.recorded_at > now() - interval '24 hours'
  ) s on true
  left join lateral (
    select count(*) as n from leasehold.missed x where x.job = j.name and x.recorded_at > now() - interval '24 hours'
  ) m on true
 where j.removed_at is null;

create or replace view leasehold.run_request_status as
select q.id, q.job, q.kind, q.slot, q.requested_by, q.requested_at,
       case when q.state = 'claimed' and r.outcome is distinct from 'running' then 'done' else q.state end as state,
       q.decided_at, q.decided_by, q.fence, r.outcome, r.started_at, r.finished_at, r.error,
       q.skip_holder, q.skip_fence
  from leasehold.run_requests q
  left join leasehold.run_log r on r.job = q.job and r.fence = q.fence;

create or replace view leasehold.run_history as
select job, slot, 'run' as kind, outcome, fence, holder, started_at as at, finished_at,
       extract(epoch from finished_at - started_at)::double precision as duration_seconds, error as detail,
       trigger, requested_by
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
  left join lateral (select r.fence from leasehold.runs r
                      where r.job = k.job and r.slot = k.slot and r.trigger = 'schedule' limit 1) ran on true
union all
select job, slot, 'missed', 'missed', null, null, recorded_at, null, null, reason, 'schedule', null
  from leasehold.missed
union all
select q.job, q.slot, 'skip', 'skipped', q.skip_fence, q.skip_holder, q.decided_at, null, null,
       format('run now held by %s (fence %s)', q.skip_holder, q.skip_fence), q.kind, q.requested_by
  from leasehold.run_requests q
 where q.state = 'skipped';

-- end_runs: the one rule by which a lease row lets go: of its lease (release: only for the
-- current token) and of the run in flight on it (its history row is written, complete, now).
-- For each element: the lease p_names[i] is released if its token is p_tokens[i]; the run of
-- fence p_fences[i] in flight on it, if it still is, is recorded with outcome, error and
-- attempts and forgotten on the row. Both in one update of the row, which is locked first (a
-- takeover of the lease, which ends the same run as lost, waits or skips). The lock is FOR NO
-- KEY UPDATE, as an UPDATE's own: the holder's fenced transactions (FOR KEY SHARE) do not
-- block it, so a release goes through while the holder still has a transaction open, as before.
-- Returns the rows it changed: released, and whether the run was recorded.
create function leasehold.end_runs(
  p_names text[], p_tokens uuid[], p_fences bigint[], p_outcomes text[], p_errors text[], p_attempts integer[]
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
    select l.name, i.fence, i.outcome, i.error, i.attempts,
           coalesce(l.token = i.token, false) as releasing,
           coalesce(l.run_slot is not null and l.run_fence = i.fence, false) as ending,
           l.run_slot, l.run_fence, l.run_holder, l.run_started_at
      from leasehold.leases l
      join unnest(p_names, p_tokens, p_fences, p_outcomes, p_errors, p_attempts)
             as i(name, token, fence, outcome, error, attempts) on l.name = i.name
     where l.token = i.token or (l.run_slot is not null and l.run_fence = i.fence)
     order by l.name
       for no key update of l
  ),
  -- one change per row: a name given twice is released if any element has its token, and its
  -- run is recorded with the element that ends it
  changing as (
    select distinct on (k.name) k.name, k.fence, k.outcome, k.error, k.attempts, k.ending,
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
    select c.name, c.run_slot, c.run_fence, c.run_holder, c.run_started_at, now(), c.outcome, left(c.error, 4000), coalesce(c.attempts, 1)
      from changed c where c.ending
    on conflict (job, fence) do nothing
    returning r.job
  )
  select c.name, c.fence, c.releasing, c.ending and c.name in (select r.job from recorded r) from changed c;
end $$;

-- release_matching: as in schema 6 (the names released), now a step of end_runs().
create or replace function leasehold.release_matching(p_names text[], p_tokens uuid[]) returns setof text
language sql volatile as $$
  select e.name from leasehold.end_runs(p_names, p_tokens, null, null, null, null) e where e.released;
$$;

-- fences_after: fence_after() for many fences at once (one call, not one per row: every
-- call of a function of this schema sets and restores its search_path). The rule is here;
-- fence_after() is this for one fence.
create function leasehold.fences_after(p_old bigint[], p_epoch integer) returns bigint[]
language sql immutable as $$
  select coalesce(array_agg(greatest(coalesce(o.old, 0) + 1, (p_epoch - 1)::bigint << 40) order by o.n), '{}')
    from unnest(p_old) with ordinality as o(old, n);
$$;

create or replace function leasehold.fence_after(p_old bigint, p_epoch integer) returns bigint
language sql immutable as $$
  select (leasehold.fences_after(array[p_old], p_epoch))[1];
$$;

-- claim_batch: claim(), claim_due() and claim_tick() in one. Parallel arrays, one element per
-- request; p_every: one row per request with its reason (claim()), or only the rows the caller
-- must act on (claim_due(): claimed, a skip this call recorded or buffered, unknown, paused or
-- removed jobs, slots not due, rows a peer was committing). The rules are those of schema 15's
-- claim(), step for step; see the comments there and docs/sql-api.md.
create function leasehold.claim_batch(
  p_jobs text[], p_slots timestamptz[], p_ttls interval[], p_modes text[], p_caps integer[],
  p_holder text, p_holder_key bigint, p_every boolean
) returns table (
  job            text,
  slot           timestamptz,
  claimed        boolean,
  reason         text,
  token          uuid,
  fence          bigint,
  expires_at     timestamptz,
  previous_slot  timestamptz,
  holder         text,
  holder_fence   bigint,
  holder_slot    timestamptz,
  holder_since   timestamptz,
  skip_recorded  boolean,
  buffered       boolean,
  database_time  timestamptz,
  took_over      boolean
)
language plpgsql volatile
set lock_timeout = '2s'
set plan_cache_mode = force_custom_plan
set jit = off
-- Lease rows are hot (every tick touches them): with the default cost of a random page the
-- planner joins a worker's share of 2,500 jobs to the leases by scanning and hashing every
-- lease row (27,500 of them: 24 ms of a 32 ms step), where 2,500 primary-key probes take 7 ms.
-- What a call costs grows with the jobs it is given, not with the jobs registered.
set random_page_cost = 1.1
as $$
#variable_conflict use_column
declare
  v_n integer := coalesce(cardinality(p_jobs), 0);
  -- what step 1 locked, as parallel arrays (an element of a text array is found by walking
  -- the array: values are carried along, never looked up by position): each request's
  -- position, job, the slot it claims (an older buffered one may come first), the slot it
  -- asked for, ttl, mode, buffer cap, and from the locked row the slot it held before, whether
  -- it was held and its fence
  v_at integer[];
  v_jobs text[];
  v_slots timestamptz[];
  v_wanted timestamptz[];
  v_ttls interval[];
  v_modes text[];
  v_caps integer[];
  v_previous timestamptz[];
  v_held boolean[];
  v_fences bigint[];
  v_new_fences bigint[];
  -- the locked rows that carry a run in flight of an earlier claim (a takeover): name, fence
  v_taken_names text[];
  v_taken_fences bigint[];
  -- and those whose previous grant was not claim()'s (run now, start_run, acquire, a forced
  -- release), which may have a run_log row still running: it is lost to this claim
  v_older text[];
  v_epoch integer := leasehold.epoch();
  v_incarnation text := leasehold.liveness_incarnation(p_holder_key);
  v_queued boolean;
  v_bad text;
  v_bad_mode boolean;
  v_bad_cap boolean;
  v_bad_null boolean;
  v_null_ttl boolean;
  v_min_ttl interval;
  v_max_ttl interval;
begin
  perform leasehold.check_holder(p_holder);
  if coalesce(cardinality(p_slots), 0) <> v_n or coalesce(cardinality(p_ttls), 0) <> v_n
     or coalesce(cardinality(p_modes), 0) <> v_n or coalesce(cardinality(p_caps), 0) <> v_n then
    raise exception 'claim: as many slots, ttls, modes and buffer caps as jobs are needed (% jobs)', v_n using errcode = '22023';
  end if;
  if v_n = 0 then
    return;
  end if;
  -- every request checked in one pass; the value named in an error is looked for after
  select bool_or(i.mode is null or i.mode not in ('exclusive', 'replace', 'allow')), bool_or(i.cap is null or i.cap < 0),
         bool_or(i.job is null or i.slot is null), bool_or(i.ttl is null), min(i.ttl), max(i.ttl)
    into v_bad_mode, v_bad_cap, v_bad_null, v_null_ttl, v_min_ttl, v_max_ttl
    from unnest(p_jobs, p_slots, p_ttls, p_modes, p_caps) as i(job, slot, ttl, mode, cap);
  if v_bad_mode then
    select m into v_bad from unnest(p_modes) m where m is null or m not in ('exclusive', 'replace', 'allow') limit 1;
    raise exception 'claim: mode must be exclusive, replace or allow (got %)', coalesce(v_bad, 'null') using errcode = '22023';
  end if;
  if v_bad_cap then
    select c::text into v_bad from unnest(p_caps) c where c is null or c < 0 limit 1;
    raise exception 'claim: buffer_cap must be 0 or more (got %)', coalesce(v_bad, 'null') using errcode = '22023';
  end if;
  if v_bad_null then
    raise exception 'claim: job and slot must not be null' using errcode = '22023';
  end if;
  -- the same bounds as acquire (check_ttl's bounds are a range: its two ends tell for all)
  if v_null_ttl then
    perform leasehold.check_ttl(null);
  end if;
  perform leasehold.check_ttl(v_min_ttl);
  perform leasehold.check_ttl(v_max_ttl);
  -- whether any job of this call has queued slots (buffered, catch-up): almost never at a
  -- tick, and then the per-job lookups of the queue are not planned at all (custom plans)
  -- (an empty table first: the usual answer, without a probe per job)
  v_queued := exists (select 1 from leasehold.buffered) and exists (select 1 from leasehold.buffered b where b.job = any (p_jobs));
  perform leasehold.pin_synchronous_commit();

  -- 1. Lock the lease rows this call may claim (random order, SKIP LOCKED: workers claiming
  --    the same tick share the jobs instead of queueing behind one another).
  select coalesce(array_agg(x.at), '{}'), coalesce(array_agg(x.job), '{}'), coalesce(array_agg(x.claim_slot), '{}'),
         coalesce(array_agg(x.slot), '{}'), coalesce(array_agg(x.ttl), '{}'), coalesce(array_agg(x.mode), '{}'),
         coalesce(array_agg(x.cap), '{}'), coalesce(array_agg(x.last_slot), '{}'), coalesce(array_agg(x.held), '{}'),
         coalesce(array_agg(x.fence), '{}'),
         array_agg(x.job) filter (where x.run_slot is not null and x.mode <> 'allow'),
         array_agg(x.run_fence) filter (where x.run_slot is not null and x.mode <> 'allow'),
         array_agg(x.job) filter (where x.mode <> 'allow' and x.run_fence is distinct from x.fence)
    into v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_fences,
         v_taken_names, v_taken_fences, v_older
    from (
      select w.at, w.job, w.claim_slot, w.slot, w.ttl, w.mode, w.cap,
             l.last_slot, l.token is not null as held, l.run_slot, l.run_fence, l.fence
        from leasehold.leases l
        join (
          select i.at, i.job, i.slot, i.ttl, i.mode, i.cap,
                 case when not v_queued then i.slot else least(i.slot, coalesce(
                   (select min(b.slot) from leasehold.buffered b
                     where b.job = i.job
                       and b.slot > coalesce((select l2.last_slot from leasehold.leases l2 where l2.name = i.job), '-infinity')
                       -- a queued catch-up slot whose skip is final never runs: it must not
                       -- stand in front of the later slots for ever
                       and not (i.mode = 'exclusive' and i.cap = 0
                                and exists (select 1 from leasehold.skips k where k.job = b.job and k.slot = b.slot))),
                   i.slot)) end as claim_slot
            from unnest(p_jobs, p_slots, p_ttls, p_modes, p_caps) with ordinality as i(job, slot, ttl, mode, cap, at)
        ) w on w.job = l.name
       where w.claim_slot <= now()
         and (l.last_slot is null or (w.slot > l.last_slot and w.claim_slot > l.last_slot))
         -- under overlap 'skip' a recorded skip is final
         and not (w.mode = 'exclusive' and w.cap = 0
                  and exists (select 1 from leasehold.skips k where k.job = w.job and k.slot = w.claim_slot))
         -- a released row is free: is_free() is asked only about a row with a token
         and (w.mode in ('replace', 'allow') or l.token is null or leasehold.is_free(l))
         and l.suspended is null
       order by random()
         for update of l skip locked
    ) x;

  -- 2. A skip recorded by a peer that held the row (FOR SHARE) until step 1 got its lock
  --    committed before it: this statement's snapshot sees it, the lock of step 1 did not.
  select coalesce(array_agg(k.at), '{}'), coalesce(array_agg(k.job), '{}'), coalesce(array_agg(k.claim_slot), '{}'),
         coalesce(array_agg(k.wanted), '{}'), coalesce(array_agg(k.ttl), '{}'), coalesce(array_agg(k.mode), '{}'),
         coalesce(array_agg(k.cap), '{}'), coalesce(array_agg(k.previous_slot), '{}'), coalesce(array_agg(k.held), '{}'),
         coalesce(array_agg(k.fence), '{}')
    into v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_fences
    from unnest(v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_fences)
           k(at, job, claim_slot, wanted, ttl, mode, cap, previous_slot, held, fence)
   where not (k.mode = 'exclusive' and k.cap = 0
              and exists (select 1 from leasehold.skips s where s.job = k.job and s.slot = k.claim_slot));

  -- A takeover: the run in flight of the previous claim is recorded lost before the grant
  -- below overwrites it (overlap 'allow' keeps the lease and its run). And a run_log row
  -- still running under an older grant (run now, start_run) is lost too.
  if v_taken_names is not null then
    perform leasehold.end_runs(
      array(select t.name from unnest(v_taken_names, v_taken_fences) t(name, fence) where t.name = any (v_jobs)),
      null,
      array(select t.fence from unnest(v_taken_names, v_taken_fences) t(name, fence) where t.name = any (v_jobs)),
      array_fill('lost'::text, array[cardinality(v_taken_names)]),
      array_fill('lease taken over by ' || p_holder, array[cardinality(v_taken_names)]),
      null);
  end if;
  if v_older is not null then
    update leasehold.run_log r
       set outcome = 'lost', finished_at = now(), error = 'lease taken over by ' || p_holder
     where r.job = any (v_older) and r.job = any (v_jobs) and r.outcome = 'running';
  end if;

  -- 3. Claim what is locked and still claimable. The rows are locked since step 1: the fence
  --    each had is the fence it has.
  v_new_fences := leasehold.fences_after(v_fences, v_epoch);
  return query
  with claiming as (
    select k.job as name, k.claim_slot, k.wanted as wanted_slot, k.ttl, k.mode, k.cap, k.previous_slot, k.held, k.new_fence
      from unnest(v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_new_fences)
             k(job, claim_slot, wanted, ttl, mode, cap, previous_slot, held, new_fence)
  ),
  -- two updates, one per kind of claim: under overlap 'allow' only the fence and the slot
  -- change (no exclusivity, the holder's token is kept); every other claim takes the lease
  claimed_lease as (
    update leasehold.leases l
       set fence = c.new_fence,
           last_slot = c.claim_slot,
           token = gen_random_uuid(),
           holder = p_holder,
           holder_key = p_holder_key,
           acquired_at = now(),
           expires_at = now() + c.ttl,
           released_at = null,
           ttl = c.ttl,
           epoch = v_epoch,
           holder_incarnation = v_incarnation,
           -- the run, on the lease row until finish_runs() writes its history row; read when
           -- the row is written, after the lock (so after the previous holder's release)
           run_slot = c.claim_slot,
           run_fence = c.new_fence,
           run_holder = p_holder,
           run_started_at = clock_timestamp()
      from claiming c
     where l.name = c.name and c.mode <> 'allow'
    returning l.name, c.claim_slot, c.wanted_slot, c.cap, c.mode, l.token, l.fence, l.expires_at, c.previous_slot, c.held
  ),
  claimed_allow as (
    update leasehold.leases l
       set fence = c.new_fence, last_slot = c.claim_slot
      from claiming c
     where l.name = c.name and c.mode = 'allow'
    returning l.name, c.claim_slot, c.wanted_slot, c.cap, c.mode, l.token, l.fence, l.expires_at, c.previous_slot, c.held
  ),
  claimed as (
    select * from claimed_lease union all select * from claimed_allow
  ),
  -- overlap 'allow' has no lease to carry its runs: a run_log row from the start, as before
  started as (
    insert into leasehold.run_log (job, slot, fence, holder)
    select c.name, c.claim_slot, c.fence, p_holder from claimed c where c.mode = 'allow'
  ),
  unbuffered as (
    delete from leasehold.buffered b using claimed c where v_queued and b.job = c.name and b.slot <= c.claim_slot
  ),
  rebuffered as (
    -- the slot that came in behind a buffered one waits its turn (within the cap)
    insert into leasehold.buffered (job, slot)
    select c.name, c.wanted_slot from claimed c
     where v_queued and c.claim_slot < c.wanted_slot
       and (select count(*) from leasehold.buffered b where b.job = c.name and b.slot > c.claim_slot) < c.cap
    on conflict do nothing
  )
  select c.name, c.claim_slot, true, 'claimed'::text, case when c.mode = 'allow' then null else c.token end,
         c.fence, case when c.mode = 'allow' then null else c.expires_at end, c.previous_slot,
         p_holder, null::bigint, null::timestamptz, null::timestamptz, false, false, now(),
         c.mode <> 'allow' and c.held
    from claimed c;

  -- 4. Everything not claimed above: say why, record a real skip once per slot, buffer it
  --    if the policy says so. Without p_every, a slot already claimed (last_slot only grows)
  --    is passed over before anything else is asked about it.
  return query
  with pending as (
    select i.job, i.slot, i.mode, i.cap, l.holder as l_holder, l.fence as l_fence,
           l.last_slot as l_last_slot, l.acquired_at as l_acquired_at,
           exists (select 1 from leasehold.skips k where k.job = i.job and k.slot = i.slot) as skip_exists,
           case
             when l.name is null then 'unknown-job'
             when l.suspended = 'paused' then 'paused'
             when l.suspended = 'removed' then 'removed'
             when i.slot > now() then 'slot-not-due'
             when l.last_slot is not null and i.slot <= l.last_slot then 'slot-taken'
             when i.mode = 'exclusive' and i.cap = 0
                  and exists (select 1 from leasehold.skips k where k.job = i.job and k.slot = i.slot) then 'slot-skipped'
             -- replace and allow only fail on a row lock: a transient state, not a skip
             when i.mode in ('replace', 'allow') then 'holder-committing'
             when not leasehold.is_free(l) then 'held'
             else 'holder-committing'
           end as why
      from unnest(p_jobs, p_slots, p_modes, p_caps) with ordinality as i(job, slot, mode, cap, at)
      left join leasehold.leases l on l.name = i.job
     where i.at not in (select k.at from unnest(v_at) k(at))
       and (p_every or l.name is null or l.suspended is not null or l.last_slot is null or i.slot > l.last_slot)
  ),
  -- held, as the newest row version says under a lock no claim can pass; a row a claimer has
  -- locked (SKIP LOCKED) or that changed meanwhile is reported holder-committing: ask again.
  -- A slot whose skip is recorded already needs no lock (and takes no lock, no xid).
  held as (
    select p.job, p.slot, p.cap, l.holder, l.fence, l.last_slot, l.acquired_at
      from pending p join leasehold.leases l on l.name = p.job
     where p.why = 'held' and not p.skip_exists
       and (l.last_slot is null or p.slot > l.last_slot)
       and not leasehold.is_free(l)
       for share of l skip locked
  ),
  skipped as (
    insert into leasehold.skips (job, slot, holder, holder_fence, holder_slot, held_for, recorded_by)
    select h.job, h.slot, h.holder, h.fence, h.last_slot, now() - h.acquired_at, p_holder
      from held h
    on conflict do nothing
    returning skips.job, skips.slot
  ),
  buffering as (
    insert into leasehold.buffered (job, slot)
    select h.job, h.slot from held h
     where h.cap > 0
       and (select count(*) from leasehold.buffered b where b.job = h.job) < h.cap
    on conflict do nothing
    returning buffered.job, buffered.slot
  ),
  answered as (
    select p.job, p.slot,
           case when p.why = 'held' and not p.skip_exists and not exists (select 1 from held h where h.job = p.job)
                then 'holder-committing' else p.why end as why,
           p.l_holder, p.l_fence, p.l_last_slot, p.l_acquired_at,
           exists (select 1 from skipped s where s.job = p.job and s.slot = p.slot) as skip_recorded,
           exists (select 1 from buffering b where b.job = p.job and b.slot = p.slot) as buffered
      from pending p
  )
  select a.job, a.slot, false, a.why,
         null::uuid, null::bigint, null::timestamptz, null::timestamptz,
         a.l_holder, a.l_fence, a.l_last_slot, a.l_acquired_at,
         a.skip_recorded, a.buffered, now(), false
    from answered a
   where p_every or a.why not in ('slot-taken', 'slot-skipped', 'held') or a.skip_recorded or a.buffered;
end $$;

-- claim: as before (docs/sql-api.md), one row per request.
create or replace function leasehold.claim(
  p_claims leasehold.slot_claim[], p_holder text, p_holder_key bigint default null
) returns table (
  job            text,
  slot           timestamptz,
  claimed        boolean,
  reason         text,
  token          uuid,
  fence          bigint,
  expires_at     timestamptz,
  previous_slot  timestamptz,
  holder         text,
  holder_fence   bigint,
  holder_slot    timestamptz,
  holder_since   timestamptz,
  skip_recorded  boolean,
  buffered       boolean,
  database_time  timestamptz,
  took_over      boolean
)
language sql volatile
set plan_cache_mode = force_custom_plan
set jit = off
as $$
  select * from leasehold.claim_batch(
    array(select c.job from unnest(p_claims) c), array(select c.slot from unnest(p_claims) c),
    array(select c.ttl from unnest(p_claims) c), array(select c.mode from unnest(p_claims) c),
    array(select c.buffer_cap from unnest(p_claims) c), p_holder, p_holder_key, true);
$$;

-- claim_due: claim() without the rows that need nothing from the caller (schema 9).
create or replace function leasehold.claim_due(
  p_claims leasehold.slot_claim[], p_holder text, p_holder_key bigint default null
) returns table (
  job            text,
  slot           timestamptz,
  claimed        boolean,
  reason         text,
  token          uuid,
  fence          bigint,
  expires_at     timestamptz,
  previous_slot  timestamptz,
  holder         text,
  holder_fence   bigint,
  holder_slot    timestamptz,
  holder_since   timestamptz,
  skip_recorded  boolean,
  buffered       boolean,
  database_time  timestamptz,
  took_over      boolean
)
language sql volatile
set plan_cache_mode = force_custom_plan
set jit = off
as $$
  select * from leasehold.claim_batch(
    array(select c.job from unnest(p_claims) c), array(select c.slot from unnest(p_claims) c),
    array(select c.ttl from unnest(p_claims) c), array(select c.mode from unnest(p_claims) c),
    array(select c.buffer_cap from unnest(p_claims) c), p_holder, p_holder_key, false);
$$;

-- claim_tick: the worker's claim. claim_due() with plain arrays (ttls in milliseconds) and
-- every time as epoch milliseconds (double precision): the same rows, cheaper to send and to
-- parse (a tick of 10,000 jobs is 10,000 rows).
create function leasehold.claim_tick(
  p_jobs text[], p_slots timestamptz[], p_ttl_ms bigint[], p_modes text[], p_buffer_caps integer[],
  p_holder text, p_holder_key bigint default null
) returns table (
  job            text,
  slot           double precision,
  claimed        boolean,
  reason         text,
  token          uuid,
  fence          bigint,
  expires_at     double precision,
  previous_slot  double precision,
  holder         text,
  holder_fence   bigint,
  holder_slot    double precision,
  holder_since   double precision,
  skip_recorded  boolean,
  buffered       boolean,
  database_time  double precision,
  took_over      boolean
)
language sql volatile
set plan_cache_mode = force_custom_plan
set jit = off
as $$
  select c.job, (extract(epoch from c.slot) * 1000)::double precision, c.claimed, c.reason, c.token, c.fence,
         (extract(epoch from c.expires_at) * 1000)::double precision, (extract(epoch from c.previous_slot) * 1000)::double precision,
         c.holder, c.holder_fence, (extract(epoch from c.holder_slot) * 1000)::double precision,
         (extract(epoch from c.holder_since) * 1000)::double precision, c.skip_recorded, c.buffered,
         (extract(epoch from c.database_time) * 1000)::double precision, c.took_over
    from leasehold.claim_batch(p_jobs, p_slots, array(select t * interval '1 millisecond' from unnest(p_ttl_ms) t),
                               p_modes, p_buffer_caps, p_holder, p_holder_key, false) c;
$$;

-- finish_runs: as in schema 15, for both kinds of run. A run in flight on its lease row gets
-- its history row now, and the same update of the row that releases the lease forgets it
-- (end_runs); a run with a run_log row from its start (run now, backfill, start_run, allow)
-- has that row updated, as before.
create or replace function leasehold.finish_runs(
  p_jobs text[], p_fences bigint[], p_tokens uuid[], p_outcomes text[], p_errors text[], p_attempts integer[]
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
     or coalesce(cardinality(p_attempts), cardinality(p_jobs), 0) <> coalesce(cardinality(p_jobs), 0) then
    raise exception 'finish_runs: as many fences, tokens, outcomes, errors and attempts as jobs are needed (% jobs)',
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
    from leasehold.end_runs(p_jobs, p_tokens, p_fences, p_outcomes, p_errors, p_attempts) e;
  v_queued := exists (select 1 from leasehold.buffered) and exists (select 1 from leasehold.buffered b where b.job = any (p_jobs));
  return query
  with input as materialized (
    select * from unnest(p_jobs, p_fences, p_outcomes, p_errors, p_attempts)
      as i(job, fence, outcome, error, attempts)
  ),
  -- the runs that have a run_log row from their start
  recorded as (
    update leasehold.run_log r
       set outcome = i.outcome, finished_at = now(), error = left(i.error, 4000), attempts = coalesce(i.attempts, 1)
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

-- start_run: as in schema 4, into run_log.
create or replace function leasehold.start_run(p_name text, p_token uuid, p_fence bigint, p_slot timestamptz default null)
returns timestamptz
language plpgsql volatile as $$
declare
  v_slot timestamptz := coalesce(p_slot, now());
  v_holder text;
begin
  perform leasehold.assert_lease(p_name, p_token, p_fence);
  select l.holder into v_holder from leasehold.leases l where l.name = p_name;
  insert into leasehold.run_log (job, slot, fence, holder) values (p_name, v_slot, p_fence, v_holder)
  on conflict (job, fence) do nothing;
  return v_slot;
end $$;

-- prune_history: as in schema 8, on run_log (a run in flight is never pruned).
create or replace function leasehold.prune_history(p_keep interval, p_batch integer default null) returns bigint
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
      delete from leasehold.run_log where id in (
        select id from leasehold.run_log where finished_at < v_before and outcome <> 'running' limit v_batch)
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

-- refresh_run_counts: as in schema 14, from run_log (ended runs only).
create or replace function leasehold.refresh_run_counts() returns void
language plpgsql volatile set jit = off as $$
begin
  lock table leasehold.run_counts, leasehold.slow_runs in exclusive mode;
  delete from leasehold.run_counts;
  delete from leasehold.slow_runs;
  insert into leasehold.run_counts (bucket, shard, minute, runs)
  select (minute % 1500)::smallint, 0, minute, n
    from (select floor(extract(epoch from started_at) / 60)::bigint as minute, count(*) as n
            from leasehold.run_log
           where finished_at is not null and started_at > now() - interval '25 hours'
           group by 1) d;
  insert into leasehold.slow_runs (job, last_started)
  select r.job, max(r.started_at)
    from leasehold.run_log r join leasehold.jobs j on j.name = r.job
   where r.finished_at is not null and r.started_at > now() - interval '25 hours' and j.interval_ms > 0
     and extract(epoch from r.finished_at - r.started_at) * 1000 >= 0.5 * j.interval_ms
   group by r.job;
end $$;

-- claim_requests: as in schema 12; a run now or backfill that takes over a lease records the
-- scheduled run in flight on it as lost, and keeps its own row in run_log.
create or replace function leasehold.claim_requests(
  p_jobs text[], p_holder text, p_holder_key bigint default null, p_limit integer default 100
) returns table (
  request_id     bigint,
  job            text,
  kind           text,
  slot           timestamptz,
  requested_by   text,
  claimed        boolean,
  token          uuid,
  fence          bigint,
  expires_at     timestamptz,
  holder         text,
  holder_fence   bigint,
  took_over      boolean,
  database_time  timestamptz
)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v record;
  l leasehold.leases;
  v_mode text;
  v_epoch integer;
  v_incarnation text;
  v_fence bigint;
  v_token uuid;
  v_expires timestamptz;
begin
  perform leasehold.check_holder(p_holder);
  if p_limit is null or p_limit < 1 or p_limit > 1000 then
    raise exception 'claim_requests: p_limit must be 1 to 1000 (got %)', p_limit using errcode = '22023';
  end if;
  -- the common case: nothing pending, nothing locked, nothing written
  if not exists (select 1 from leasehold.run_requests q where q.state = 'pending' and q.job = any (p_jobs)) then
    return;
  end if;
  perform leasehold.pin_synchronous_commit();
  for v in
    select q.id, q.job, q.kind, q.slot, q.requested_by, j.overlap, j.ttl_ms
      from (select distinct on (q.job) q.id, q.job, q.kind, q.slot, q.requested_by
              from leasehold.run_requests q
             where q.state = 'pending' and q.job = any (p_jobs)
             order by q.job, q.kind = 'backfill', q.slot, q.id) q
      join leasehold.jobs j on j.name = q.job
     order by random()
     limit p_limit
  loop
    v_mode := case v.overlap when 'replace' then 'replace' when 'allow' then 'allow' else 'exclusive' end;
    -- a backfill under allow has no lease to wait for: one backfill run at a time, unless the
    -- worker of the running one is gone (a peer that claimed this very request meanwhile is
    -- caught by the pending check under the lock below)
    continue when v.kind = 'backfill' and v_mode = 'allow' and exists (
      select 1 from leasehold.run_requests b join leasehold.runs r on r.job = b.job and r.fence = b.fence
       where b.job = v.job and b.kind = 'backfill' and b.state = 'claimed' and r.outcome = 'running'
         and not leasehold.holder_gone(b.holder_key));
    if (v.kind = 'backfill' and v_mode <> 'allow') or v.overlap in ('buffer-one', 'buffer-all') then
      -- It waits for a free lease: the row is locked only when free (a WHERE that is false
      -- locks no row), so a request that waits costs its job no lock and no write per call.
      select * into l from leasehold.leases x where x.name = v.job and leasehold.is_free(x) for update skip locked;
      if not found then
        if v.kind = 'manual' and v.overlap = 'buffer-one' then
          select * into l from leasehold.leases x where x.name = v.job;
          if found and not leasehold.is_free(l) then
            -- this one waits; any later run now of the job is one too many
            return query
            with later as (
              update leasehold.run_requests q
                 set state = 'skipped', decided_at = now(), decided_by = p_holder, skip_holder = l.holder, skip_fence = l.fence
               where q.job = v.job and q.kind = 'manual' and q.state = 'pending' and q.id > v.id
              returning q.id, q.job, q.kind, q.slot, q.requested_by
            )
            select s.id, s.job, s.kind, s.slot, s.requested_by, false, null::uuid, null::bigint,
                   null::timestamptz, l.holder, l.fence, false, now()
              from later s;
          end if;
        end if;
        continue;
      end if;
      v_mode := case when v_mode = 'allow' then 'allow' else 'exclusive' end;
    else
      -- decided now, whoever holds the lease: a run now under skip, replace or allow, a
      -- backfill under allow
      select * into l from leasehold.leases x where x.name = v.job for update skip locked;
      continue when not found;
    end if;
    -- under the lease lock, with a fresh snapshot: still pending? (a peer may have decided it
    -- and committed before we got the lock)
    perform 1 from leasehold.run_requests q where q.id = v.id and q.state = 'pending';
    continue when not found;
    if v.kind = 'manual' and v.overlap = 'skip' and not leasehold.is_free(l) then
      update leasehold.run_requests q
         set state = 'skipped', decided_at = now(), decided_by = p_holder, skip_holder = l.holder, skip_fence = l.fence
       where q.id = v.id;
      return query select v.id, v.job, v.kind, v.slot, v.requested_by, false, null::uuid, null::bigint,
                          null::timestamptz, l.holder, l.fence, false, now();
      continue;
    end if;

    -- claim: the same grant as claim() gives a slot, except that last_slot stays
    v_epoch := coalesce(v_epoch, leasehold.epoch());
    if v_incarnation is null and p_holder_key is not null then
      v_incarnation := leasehold.liveness_incarnation(p_holder_key);
    end if;
    v_fence := leasehold.fence_after(l.fence, v_epoch);
    -- a scheduled run in flight on the row loses its lease to this one (as in claim_batch())
    if v_mode <> 'allow' and l.run_slot is not null then
      perform leasehold.end_runs(array[v.job], null, array[l.run_fence], array['lost'],
                                 array['lease taken over by ' || p_holder], null);
    end if;
    update leasehold.leases x
       set fence = v_fence,
           token = case when v_mode = 'allow' then x.token else gen_random_uuid() end,
           holder = case when v_mode = 'allow' then x.holder else p_holder end,
           holder_key = case when v_mode = 'allow' then x.holder_key else p_holder_key end,
           acquired_at = case when v_mode = 'allow' then x.acquired_at else now() end,
           expires_at = case when v_mode = 'allow' then x.expires_at else now() + v.ttl_ms * interval '1 millisecond' end,
           released_at = case when v_mode = 'allow' then x.released_at else null end,
           ttl = case when v_mode = 'allow' then x.ttl else v.ttl_ms * interval '1 millisecond' end,
           epoch = case when v_mode = 'allow' then x.epoch else v_epoch end,
           holder_incarnation = case when v_mode = 'allow' then x.holder_incarnation else v_incarnation end,
           -- this run's row is in run_log from its start (trigger, requested_by, request_id)
           run_slot = case when v_mode = 'allow' then x.run_slot end,
           run_started_at = case when v_mode = 'allow' then x.run_started_at end
     where x.name = v.job
    returning x.token, x.expires_at into v_token, v_expires;
    insert into leasehold.run_log (job, slot, fence, holder, trigger, requested_by, request_id)
    values (v.job, v.slot, v_fence, p_holder, v.kind, v.requested_by, v.id);
    -- a run still 'running' under an older fence lost its lease to this one (as in claim())
    if v_mode <> 'allow' then
      update leasehold.run_log r
         set outcome = 'lost', finished_at = now(), error = 'lease taken over by ' || p_holder
       where r.job = v.job and r.outcome = 'running' and r.fence < v_fence;
    end if;
    update leasehold.run_requests q
       set state = 'claimed', decided_at = now(), decided_by = p_holder, holder_key = p_holder_key, fence = v_fence
     where q.id = v.id;
    return query select v.id, v.job, v.kind, v.slot, v.requested_by, true,
                        case when v_mode = 'allow' then null else v_token end, v_fence,
                        case when v_mode = 'allow' then null else v_expires end,
                        p_holder, null::bigint, v_mode <> 'allow' and l.token is not null, now();
  end loop;
end $$;

-- pause_job: as in schema 11; stopRunning ends the run in flight on the lease row too.
create or replace function leasehold.pause_job(p_name text, p_by text, p_reason text default null, p_stop_running boolean default false)
returns table (paused boolean, already_paused boolean, stopped_holder text, stopped_fence bigint)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v_job leasehold.jobs;
  v_lease leasehold.leases;
begin
  perform leasehold.pin_synchronous_commit();
  perform leasehold.check_holder(p_by);
  if p_reason is not null then
    perform leasehold.check_schedule_field(char_length(p_reason) <= 1000 and leasehold.check_characters(p_reason) is null,
      'reason', 'must be at most 1000 characters without control or invisible characters');
  end if;
  select * into v_job from leasehold.jobs j where j.name = p_name and j.removed_at is null for update;
  if not found then
    raise exception 'no job named "%"', p_name using errcode = 'LH006';
  end if;
  insert into leasehold.leases (name) values (p_name) on conflict do nothing;
  -- waits for a claim that locked the row first; a later claim sees the mark
  select * into v_lease from leasehold.leases l where l.name = p_name for update;
  update leasehold.leases l set suspended = 'paused' where l.name = p_name;
  if v_job.paused_at is null then
    perform set_config('leasehold.job_writer', 'schedules', true);
    update leasehold.jobs j set paused_at = now(), paused_by = p_by, pause_reason = p_reason where j.name = p_name;
    perform set_config('leasehold.job_writer', '', true);
  end if;
  if p_stop_running and v_lease.token is not null then
    -- the operator's override, as force_release does it: the fence moves past the holder's
    -- its run ends aborted, whether it is in flight on the lease row or a run_log row
    if v_lease.run_slot is not null then
      perform leasehold.end_runs(array[p_name], null, array[v_lease.run_fence], array['aborted'],
        array['stopped: paused by ' || p_by || coalesce(' (' || p_reason || ')', '')], null);
    end if;
    perform from leasehold.force_release(p_name);
    update leasehold.run_log r
       set outcome = 'aborted', finished_at = now(), error = left('stopped: paused by ' || p_by || coalesce(' (' || p_reason || ')', ''), 4000)
     where r.job = p_name and r.outcome = 'running';
  end if;
  perform leasehold.record_action('paused', p_name, p_by, jsonb_build_object('reason', p_reason, 'stop_running', p_stop_running,
    'stopped_holder', case when p_stop_running then v_lease.holder end, 'already_paused', v_job.paused_at is not null));
  return query select true, v_job.paused_at is not null,
    case when p_stop_running and v_lease.token is not null then v_lease.holder end,
    case when p_stop_running and v_lease.token is not null then v_lease.fence end;
end $$;

-- acquire: as in schema 1; a winner that takes over a lease with a scheduled run in flight on
-- it records that run as lost, as a claim does.
create or replace function leasehold.acquire(
  p_name       text,
  p_ttl        interval,
  p_holder     text,
  p_holder_key bigint default null,
  p_slot       timestamptz default null,
  p_token      uuid default null
) returns table (
  acquired       boolean,
  token          uuid,
  fence          bigint,
  expires_at     timestamptz,
  holder         text,
  acquired_at    timestamptz,
  last_slot      timestamptz,
  reason         text,
  database_time  timestamptz,
  took_over      boolean
)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  r leasehold.leases;
  candidate text;
  previous_token uuid;
  -- a scheduled run in flight on the row (claim_batch), lost to this acquisition
  previous_run_slot timestamptz;
  previous_run_fence bigint;
  key_share_free boolean;
  why text;
begin
  perform leasehold.check_name(p_name);
  perform leasehold.check_ttl(p_ttl);
  perform leasehold.check_holder(p_holder);
  perform leasehold.pin_synchronous_commit();

  if p_token is not null then
    -- the retry of an acquisition whose answer was lost: still ours, so hand it back
    -- (renewed and confirmed in this epoch), with the fence it was granted
    r := leasehold.confirm(p_name, p_token, p_ttl);
    if r.name is not null then
      return query select true, r.token, r.fence, r.expires_at, r.holder, r.acquired_at,
                          r.last_slot, 'acquired'::text, now(), false;
      return;
    end if;
  end if;

  select l.name, l.token, l.run_slot, l.run_fence into candidate, previous_token, previous_run_slot, previous_run_fence
    from leasehold.leases l
   where l.name = p_name
     and leasehold.is_free(l)
     and (p_slot is null or ((l.last_slot is null or p_slot > l.last_slot) and p_slot <= now()))
     for update skip locked;

  if found then
    if previous_run_slot is not null then
      perform leasehold.end_runs(array[p_name], null, array[previous_run_fence], array['lost'],
                                 array['lease taken over by ' || p_holder], null);
    end if;
    update leasehold.leases l
       set token = coalesce(p_token, gen_random_uuid()), fence = leasehold.next_fence(l.fence),
           holder = p_holder, holder_key = p_holder_key, acquired_at = now(),
           expires_at = now() + p_ttl, ttl = p_ttl, epoch = leasehold.epoch(),
           holder_incarnation = leasehold.liveness_incarnation(p_holder_key),
           released_at = null, last_slot = coalesce(p_slot, l.last_slot)
     where l.name = p_name
    returning l.* into r;
    -- took_over: the previous holder never released (expired, or its liveness lock is gone)
    return query select true, r.token, r.fence, r.expires_at, r.holder, r.acquired_at,
                        r.last_slot, 'acquired'::text, now(), previous_token is not null;
    return;
  end if;

  select * into r from leasehold.leases l where l.name = p_name;
  if not found then
    if p_slot is not null and p_slot > now() then
      return query select false, null::uuid, 0::bigint, null::timestamptz, null::text,
                          null::timestamptz, null::timestamptz, 'slot-not-due'::text, now(), false;
      return;
    end if;
    -- First use of this name. Concurrent creators are resolved by the primary key: one
    -- inserts, the others do nothing and report the winner below.
    insert into leasehold.leases as l (name, token, fence, holder, holder_key, acquired_at, expires_at,
                                      last_slot, ttl, epoch, holder_incarnation)
    values (p_name, coalesce(p_token, gen_random_uuid()), leasehold.next_fence(0), p_holder, p_holder_key,
            now(), now() + p_ttl, p_slot, p_ttl, leasehold.epoch(), leasehold.liveness_incarnation(p_holder_key))
    on conflict (name) do nothing
    returning l.* into r;
    if found then
      return query select true, r.token, r.fence, r.expires_at, r.holder, r.acquired_at,
                          r.last_slot, 'acquired'::text, now(), false;
      return;
    end if;
  end if;

  -- Lost. When the row is free by the rules but was locked, find out by whom before
  -- reading it: a fenced transaction holds FOR KEY SHARE (which a KEY SHARE probe passes),
  -- a concurrent acquirer holds FOR UPDATE (which it does not). Read the row after the
  -- probe, so an acquirer that committed meanwhile is reported as the holder.
  select * into r from leasehold.leases l where l.name = p_name;
  if leasehold.is_free(r) and (p_slot is null or r.last_slot is null or p_slot > r.last_slot) then
    perform 1 from leasehold.leases l where l.name = p_name for key share skip locked;
    key_share_free := found;
    select * into r from leasehold.leases l where l.name = p_name;
  end if;

  -- Our own first attempt may have committed since the token check at the top: adopt it.
  if p_token is not null and r.token = p_token then
    r := leasehold.confirm(p_name, p_token, p_ttl);
    if r.name is not null then
      return query select true, r.token, r.fence, r.expires_at, r.holder, r.acquired_at,
                          r.last_slot, 'acquired'::text, now(), false;
      return;
    end if;
    select * into r from leasehold.leases l where l.name = p_name;
  end if;

  why := case
      when p_slot is not null and p_slot > now() then 'slot-not-due'
      when p_slot is not null and r.last_slot is not null and p_slot <= r.last_slot then 'slot-taken'
      when not leasehold.is_free(r) then 'held'
      -- free by the rules but locked by another acquirer taking it right now: the row
      -- still names the previous holder, which must not be reported
      when key_share_free is false then 'being-acquired'
      -- locked by its holder's fenced transaction, which is committing
      else 'holder-committing'
    end;
  if why = 'being-acquired' then
    return query select false, null::uuid, r.fence, null::timestamptz, null::text, null::timestamptz,
                        r.last_slot, why, now(), false;
  else
    return query select false, null::uuid, r.fence, r.expires_at, r.holder, r.acquired_at,
                        r.last_slot, why, now(), false;
  end if;
end $$;

-- force_release: as in schema 1; the scheduled run in flight on the row ends lost with it.
create or replace function leasehold.force_release(p_name text)
returns table (released boolean, previous_holder text, previous_fence bigint, fence bigint)
language plpgsql volatile as $$
#variable_conflict use_column
declare
  old leasehold.leases;
  r leasehold.leases;
begin
  perform leasehold.pin_synchronous_commit();
  select * into old from leasehold.leases l where l.name = p_name for update;
  if not found then
    return query select false, null::text, null::bigint, null::bigint;
    return;
  end if;
  -- the scheduled run in flight on the row, if any, ends with its lease
  if old.run_slot is not null then
    perform leasehold.end_runs(array[p_name], null, array[old.run_fence], array['lost'],
                               array['the lease was released by force (leasehold.force_release)'], null);
  end if;
  update leasehold.leases l
     set token = null, expires_at = null, holder_key = null, released_at = now(),
         fence = leasehold.next_fence(l.fence)
   where l.name = p_name
  returning l.* into r;
  return query select old.token is not null, old.holder, old.fence, r.fence;
end $$;

-- add_run_counts: as in schema 14, and the first call of a transaction takes its shard's
-- advisory lock: a transaction that records runs twice (the insert and the update trigger of
-- one finish_runs(), a takeover that records both kinds of run) locks buckets in bucket order
-- within each call but not across them, and two such transactions on one shard could deadlock.
create or replace function leasehold.add_run_counts(p_minutes bigint[], p_counts bigint[]) returns void
language sql volatile as $$
  select pg_advisory_xact_lock(1819042147, (pg_backend_pid() % 64)::integer);
  insert into leasehold.run_counts as c (bucket, shard, minute, runs)
  select (d.minute % 1500)::smallint, (pg_backend_pid() % 64)::smallint, d.minute, d.n
    from unnest(p_minutes, p_counts) as d (minute, n)
   where d.n <> 0 and d.minute > floor(extract(epoch from now()) / 60)::bigint - 1500
   order by 1 -- rows locked in bucket order: two sessions on one shard wait, never deadlock
  on conflict (bucket, shard) do update
     set minute = excluded.minute,
         runs = case when c.minute = excluded.minute then c.runs + excluded.runs else excluded.runs end
   where c.minute <= excluded.minute;
$$;

-- confirm_leases: as in schema 15, with the rows locked in name order first, the order of
-- end_runs(): a renewal still in flight as the same leases are finished waited for the finish
-- while the finish waited for it (the update locked in physical order).
create or replace function leasehold.confirm_leases(p_names text[], p_tokens uuid[], p_ttls interval[]) returns setof leasehold.leases
language plpgsql volatile
set plan_cache_mode = force_custom_plan
set enable_nestloop = off
set jit = off
as $$
begin
  perform 1 from leasehold.leases l join unnest(p_names, p_tokens) as i(name, token) on l.name = i.name and l.token = i.token
   where l.name = any (p_names) and l.expires_at > now()
   order by l.name
     for no key update of l;
  return query
  update leasehold.leases l
     set expires_at = now() + i.ttl, ttl = i.ttl, epoch = (select leasehold.epoch())
    from unnest(p_names, p_tokens, p_ttls) as i(name, token, ttl)
   where l.name = any (p_names) and l.name = i.name and l.token = i.token and l.expires_at > now()
  returning l.*;
end $$;

-- record_missed_slots: record_missed() for many jobs in one statement, one element per (job,
-- slot): after a downtime every job of a worker has missed slots, and a statement per job was
-- 10,000 statements for 10,000 jobs. Returns the slots it recorded (not the ones that ran, were
-- skipped, lie in a clock step's window, or were recorded already).
create function leasehold.record_missed_slots(p_jobs text[], p_slots timestamptz[], p_reason text, p_holder text)
returns table (job text, slot timestamptz)
language sql volatile
set plan_cache_mode = force_custom_plan
set jit = off
as $$
  insert into leasehold.missed as m (job, slot, reason, recorded_by)
  select i.job, i.slot, p_reason, p_holder from unnest(p_jobs, p_slots) as i(job, slot)
   where i.job is not null and i.slot is not null
     and not exists (select 1 from leasehold.skips k where k.job = i.job and k.slot = i.slot)
     and not exists (select 1 from leasehold.runs r where r.job = i.job and r.slot = i.slot)
     and not exists (select 1 from leasehold.clock_steps w where i.slot > w.from_time and i.slot <= w.to_time)
  on conflict do nothing
  returning m.job, m.slot;
$$;

-- record_missed: record_missed_slots() of one job.
create or replace function leasehold.record_missed(p_job text, p_slots timestamptz[], p_reason text, p_holder text)
returns integer
language sql volatile as $$
  select count(*)::integer
    from leasehold.record_missed_slots(array_fill(p_job, array[coalesce(cardinality(p_slots), 0)]), p_slots, p_reason, p_holder);
$$;

insert into leasehold.access (object, level) values
  ('run_log', 'reader'), ('claim_batch', 'owner'), ('end_runs', 'owner'), ('fences_after', 'owner'), ('claim_tick', 'client'),
  ('record_missed_slots', 'client');
