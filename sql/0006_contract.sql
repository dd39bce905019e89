-- leasehold migration 0006: each protocol rule in one place, and a claim that is safe anywhere.
--
-- Additive (not breaking): every function of schema 5 keeps its signature and its answers.
--   * run_outcomes(): the one list of run outcomes (the runs table's check and the finish
--     functions read it; src/worker/run-outcomes.ts mirrors it, checked by a test).
--   * release_matching(): the one token-checked release (release and finish_runs use it).
--   * finish_run is finish_runs for one run.
--   * liveness_locks(): the one reading of pg_locks for liveness keys (holder_gone,
--     lease_status, the dashboard's worker list).
--   * claim(): claim_slots' successor. One composite argument (leasehold.slot_claim[]) instead of
--     parallel arrays; it tells its own claims apart without xmin, so it works inside any
--     transaction or savepoint; and a slot is either run or recorded skipped, never both.
--     claim_slots() stays, as a thin wrapper, for SQL callers of schema 5.
--   * The batch functions plan every statement for the arrays they are given
--     (plan_cache_mode = force_custom_plan): PostgreSQL may switch a PL/pgSQL statement to a
--     generic plan after five calls on a connection, and a generic plan guesses the size of
--     unnest(); a slow finish keeps the finished jobs' lease rows locked. And jit = off: the
--     planner's row estimates for joins of unnest() run far above the real sizes, which made
--     PostgreSQL compile a 10,000-job claim with JIT, for seconds of a statement that runs in
--     a fraction of that (measured with auto_explain: bench/batch-plans.ts EXPLAIN=1).

-- run_outcomes: every value leasehold.runs.outcome may hold. 'running' until the run ends.
create function leasehold.run_outcomes() returns text[]
language sql immutable as $$
  select array['running', 'succeeded', 'failed', 'lost', 'aborted'];
$$;

alter table leasehold.runs
  drop constraint runs_outcome_check,
  add constraint runs_outcome_known check (outcome = any (leasehold.run_outcomes()));

-- release_matching: the one rule by which a lease is released: only for its current token.
-- A late release from an old holder matches nothing and changes nothing. Returns the names
-- released (a null token releases nothing).
create function leasehold.release_matching(p_names text[], p_tokens uuid[]) returns setof text
language sql volatile as $$
  update leasehold.leases l
     set token = null, expires_at = null, holder_key = null, released_at = now()
    from unnest(p_names, p_tokens) as i(name, token)
   where l.name = i.name and l.token = i.token
  returning l.name;
$$;

create or replace function leasehold.release(p_name text, p_token uuid) returns boolean
language sql volatile
set lock_timeout = '2s'
as $$
  select leasehold.pin_synchronous_commit();
  select exists (select 1 from leasehold.release_matching(array[p_name], array[p_token]));
$$;

-- liveness_locks: the liveness locks held in this database right now: session-level advisory
-- locks taken with one bigint key (objsubid 1), exclusive and granted, with the backend that
-- holds each. The key is the bigint register_liveness() returned.
create function leasehold.liveness_locks() returns table (pid integer, key bigint)
language sql volatile as $$
  select k.pid, (k.classid::bigint << 32) | k.objid::bigint
    from pg_locks k
   where k.locktype = 'advisory' and k.objsubid = 1 and k.granted and k.mode = 'ExclusiveLock'
     and k.database = (select d.oid from pg_database d where d.datname = current_database());
$$;

create or replace function leasehold.holder_gone(p_key bigint) returns boolean
language sql volatile as $$
  select case
    when p_key is null then false
    when pg_try_advisory_xact_lock_shared(p_key) then not exists (
      select 1 from leasehold.liveness_locks() k where k.pid = pg_backend_pid() and k.key = p_key)
    else false
  end;
$$;

create or replace view leasehold.lease_status as
select l.name,
       case
         when l.token is null then 'free'
         when l.expires_at <= now() then 'expired'
         else 'held'
       end as state,
       l.holder,
       l.fence,
       l.acquired_at,
       l.expires_at,
       case when l.token is null then null
            else greatest(extract(epoch from l.expires_at - now()), 0)::double precision
       end as seconds_left,
       -- liveness locks exist only on the incarnation that took them: elsewhere, unknown
       case when l.token is null or l.holder_key is null
                 or l.holder_incarnation is distinct from leasehold.incarnation() then null
            else l.holder_key in (select k.key from leasehold.liveness_locks() k)
       end as holder_alive,
       l.last_slot,
       l.released_at,
       l.epoch,
       l.holder_key
  from leasehold.leases l;

-- finish_runs: records the outcome of many runs in one call and, for each run given a token,
-- releases its lease (release_matching). Returns, per run, whether it was recorded and its
-- lease released, and the job's oldest buffered slot (buffer policies claim it at once).
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
begin
  perform leasehold.pin_synchronous_commit();
  select o into v_bad from unnest(p_outcomes) o
   where o is null or o = 'running' or not (o = any (leasehold.run_outcomes())) limit 1;
  if found then
    raise exception 'outcome must be one of % (got %)',
      array_to_string(array_remove(leasehold.run_outcomes(), 'running'), ', '), coalesce(v_bad, 'null')
      using errcode = '22023';
  end if;
  select coalesce(array_agg(r), '{}') into v_released
    from leasehold.release_matching(
      array(select i.job from unnest(p_jobs, p_tokens) i(job, token) where i.token is not null),
      array(select i.token from unnest(p_jobs, p_tokens) i(job, token) where i.token is not null)) r;
  return query
  with input as materialized (
    select * from unnest(p_jobs, p_fences, p_outcomes, p_errors, p_attempts)
      as i(job, fence, outcome, error, attempts)
  ),
  recorded as (
    update leasehold.runs r
       set outcome = i.outcome, finished_at = now(), error = left(i.error, 4000), attempts = i.attempts
      from input i
     where r.job = i.job and r.fence = i.fence and r.outcome = 'running'
    returning r.job, r.fence
  ),
  -- buffered slots at or before the last claimed one can never be claimed: drop them
  stale_buffers as (
    delete from leasehold.buffered b using leasehold.leases l, input i
     where b.job = i.job and l.name = i.job and b.slot <= l.last_slot
    returning b.job, b.slot
  )
  select i.job, i.fence,
         (i.job, i.fence) in (select r.job, r.fence from recorded r),
         i.job in (select unnest(v_released)),
         (select min(b.slot) from leasehold.buffered b
           where b.job = i.job
             and b.slot > coalesce((select l.last_slot from leasehold.leases l where l.name = i.job), '-infinity')
             and not exists (select 1 from stale_buffers s where s.job = b.job and s.slot = b.slot))
    from input i;
end $$;

-- finish_run: finish_runs for one run.
create or replace function leasehold.finish_run(
  p_job text, p_fence bigint, p_token uuid, p_outcome text, p_error text default null, p_attempts integer default 1
) returns table (recorded boolean, released boolean, next_buffered_slot timestamptz)
language sql volatile as $$
  select f.recorded, f.released, f.next_buffered_slot
    from leasehold.finish_runs(array[p_job], array[p_fence], array[p_token], array[p_outcome], array[p_error], array[p_attempts]) f;
$$;

-- slot_claim: one (job, slot) a worker wants to claim.
--   mode        'exclusive' (skip and buffer policies: only a free lease), 'replace' (take it
--               from a running holder: its token changes, so its renewals and fenced writes
--               fail) or 'allow' (no exclusivity: only the slot guard and a new fence)
--   buffer_cap  how many skipped slots to keep for later (0 skip, 1 buffer-one, n buffer-all)
create type leasehold.slot_claim as (job text, slot timestamptz, ttl interval, mode text, buffer_cap integer);

-- claim: claims the given (job, slot) pairs for p_holder in one call.
--
-- A job with buffered slots claims its oldest buffered slot first and buffers the new one, so
-- buffered slots run in order. Every claim needs slot > last_slot and slot <= now(): each
-- occurrence is claimed at most once across all workers, and a worker whose clock runs ahead
-- cannot claim early.
--
-- Returns one row per input job: claimed or the reason not, the holder that blocked it, and
-- whether this call recorded the skip (exactly one caller does per slot).
--
-- A slot is run or recorded skipped, never both. Both decisions are taken under the lease
-- row's lock, each after the other's lock is gone: a claim locks the row FOR UPDATE (step 1)
-- and then, with a fresh snapshot, refuses a slot with a recorded skip (step 2); a skip is
-- recorded only under FOR SHARE (which a claim's FOR UPDATE cannot pass) and only while the
-- newest row version still shows the lease held and the slot unclaimed (step 4). FOR SHARE,
-- not FOR KEY SHARE: a key-share lock passes the holder's release (a non-key update) and then
-- waits on the newer version's claimer, SKIP LOCKED or not, and would lock the old version.
-- Nothing here depends on the caller's transaction: claimed rows are told apart by name, not
-- by xmin, so the function works in a savepoint or after other writes.
create function leasehold.claim(
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
language plpgsql volatile
set lock_timeout = '2s'
set plan_cache_mode = force_custom_plan
set jit = off
as $$
#variable_conflict use_column
declare
  -- the claims this call locked, and the slot each claims (an older buffered one may come
  -- first); parallel arrays, so that no step joins two unnest()s (the planner's estimate of such
  -- a join is the product of their sizes)
  v_claims leasehold.slot_claim[];
  v_slots timestamptz[];
begin
  perform leasehold.check_holder(p_holder);
  -- the same bounds as acquire: a caller must not hold a job for a century
  perform leasehold.check_ttl(c.ttl) from unnest(p_claims) c;
  perform leasehold.pin_synchronous_commit();

  -- 1. Lock the lease rows this call may claim. Random order with SKIP LOCKED, so workers
  --    claiming the same tick share the jobs instead of queueing behind one another.
  select coalesce(array_agg(x.claim), '{}'), coalesce(array_agg(x.claim_slot), '{}') into v_claims, v_slots
    from (
      select w.claim, w.claim_slot
        from leasehold.leases l
        join (
          select c.job, c.mode, c.buffer_cap, c as claim,
                 least(c.slot, coalesce(
                   (select min(b.slot) from leasehold.buffered b
                     where b.job = c.job
                       and b.slot > coalesce((select l2.last_slot from leasehold.leases l2 where l2.name = c.job), '-infinity')),
                   c.slot)) as claim_slot
            from unnest(p_claims) c
        ) w on w.job = l.name
       where w.claim_slot <= now()
         and (l.last_slot is null or w.claim_slot > l.last_slot)
         -- under overlap 'skip' a recorded skip is final: a late tick, a retry or a catch-up
         -- claim must not run the slot after its holder releases
         and not (w.mode = 'exclusive' and w.buffer_cap = 0
                  and exists (select 1 from leasehold.skips k where k.job = w.job and k.slot = w.claim_slot))
         and (w.mode in ('replace', 'allow') or leasehold.is_free(l))
       order by random()
         for update of l skip locked
    ) x;

  -- 2. A skip recorded by a peer that held the row (FOR SHARE) until step 1 got its lock
  --    committed before it: this statement's snapshot sees it, the lock of step 1 did not.
  select coalesce(array_agg(row(k.job, k.slot, k.ttl, k.mode, k.buffer_cap)::leasehold.slot_claim), '{}'),
         coalesce(array_agg(k.claim_slot), '{}') into v_claims, v_slots
    from unnest(v_claims, v_slots) k(job, slot, ttl, mode, buffer_cap, claim_slot)
   where not (k.mode = 'exclusive' and k.buffer_cap = 0
              and exists (select 1 from leasehold.skips s where s.job = k.job and s.slot = k.claim_slot));

  -- 3. Claim what is locked and still claimable.
  return query
  with claiming as (
    select k.job as name, k.claim_slot, k.slot, k.ttl, k.mode, k.buffer_cap as cap
      from unnest(v_claims, v_slots) k(job, slot, ttl, mode, buffer_cap, claim_slot)
  ),
  claimed as (
    update leasehold.leases l
       set fence = leasehold.next_fence(l.fence),
           last_slot = c.claim_slot,
           token = case when c.mode = 'allow' then l.token else gen_random_uuid() end,
           holder = case when c.mode = 'allow' then l.holder else p_holder end,
           holder_key = case when c.mode = 'allow' then l.holder_key else p_holder_key end,
           acquired_at = case when c.mode = 'allow' then l.acquired_at else now() end,
           expires_at = case when c.mode = 'allow' then l.expires_at else now() + c.ttl end,
           released_at = case when c.mode = 'allow' then l.released_at else null end,
           ttl = case when c.mode = 'allow' then l.ttl else c.ttl end,
           epoch = case when c.mode = 'allow' then l.epoch else leasehold.epoch() end,
           holder_incarnation = case when c.mode = 'allow' then l.holder_incarnation else leasehold.liveness_incarnation(p_holder_key) end
      from claiming c
     where l.name = c.name
    -- the row as it was (previous_slot, previous_token) comes from the locked version
    returning l.name, c.claim_slot, c.slot as wanted_slot, c.cap, c.mode, l.token, l.fence, l.expires_at
  ),
  previous as (
    select l.name, l.last_slot as previous_slot, l.token as previous_token
      from leasehold.leases l join claiming c on c.name = l.name
  ),
  started as (
    insert into leasehold.runs (job, slot, fence, holder)
    select c.name, c.claim_slot, c.fence, p_holder from claimed c
  ),
  -- A run still 'running' under an older fence lost its lease when this one took it (its
  -- holder died, expired or was replaced); 'allow' runs overlap by design and stay running.
  superseded as (
    update leasehold.runs r
       set outcome = 'lost', finished_at = now(), error = 'lease taken over by ' || p_holder
      from claimed c
     where r.job = c.name and c.mode <> 'allow' and r.outcome = 'running' and r.fence < c.fence
  ),
  unbuffered as (
    delete from leasehold.buffered b using claimed c where b.job = c.name and b.slot <= c.claim_slot
  ),
  rebuffered as (
    -- the slot that came in behind a buffered one waits its turn (within the cap)
    insert into leasehold.buffered (job, slot)
    select c.name, c.wanted_slot from claimed c
     where c.claim_slot < c.wanted_slot
       and (select count(*) from leasehold.buffered b where b.job = c.name and b.slot > c.claim_slot) < c.cap
    on conflict do nothing
  )
  select c.name, c.claim_slot, true, 'claimed'::text, case when c.mode = 'allow' then null else c.token end,
         c.fence, case when c.mode = 'allow' then null else c.expires_at end, p.previous_slot,
         p_holder, null::bigint, null::timestamptz, null::timestamptz, false, false, now(),
         c.mode <> 'allow' and p.previous_token is not null
    from claimed c join previous p on p.name = c.name;

  -- 4. Everything not claimed above: say why, record a real skip once per slot, buffer it
  --    if the policy says so.
  return query
  with pending as (
    select c.job, c.slot, c.mode, c.buffer_cap as cap, l.holder as l_holder, l.fence as l_fence,
           l.last_slot as l_last_slot, l.acquired_at as l_acquired_at,
           exists (select 1 from leasehold.skips k where k.job = c.job and k.slot = c.slot) as skip_exists,
           case
             when l.name is null then 'unknown-job'
             when c.slot > now() then 'slot-not-due'
             when l.last_slot is not null and c.slot <= l.last_slot then 'slot-taken'
             when c.mode = 'exclusive' and c.buffer_cap = 0
                  and exists (select 1 from leasehold.skips k where k.job = c.job and k.slot = c.slot) then 'slot-skipped'
             -- replace and allow only fail on a row lock: a transient state, not a skip
             when c.mode in ('replace', 'allow') then 'holder-committing'
             when not leasehold.is_free(l) then 'held'
             else 'holder-committing'
           end as why
      from unnest(p_claims) c
      left join leasehold.leases l on l.name = c.job
     where c.job not in (select k.job from unnest(v_claims) k)
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
  )
  select p.job, p.slot, false,
         case when p.why = 'held' and not p.skip_exists and not exists (select 1 from held h where h.job = p.job)
              then 'holder-committing' else p.why end,
         null::uuid, null::bigint, null::timestamptz, null::timestamptz,
         p.l_holder, p.l_fence, p.l_last_slot, p.l_acquired_at,
         exists (select 1 from skipped s where s.job = p.job and s.slot = p.slot),
         exists (select 1 from buffering b where b.job = p.job and b.slot = p.slot),
         now(), false
    from pending p;
end $$;

-- claim_slots: claim() with parallel arrays, as schema 5 had it.
create or replace function leasehold.claim_slots(
  p_jobs text[], p_slots timestamptz[], p_ttls interval[], p_modes text[], p_buffer_caps integer[],
  p_holder text, p_holder_key bigint default null
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
language sql volatile as $$
  select * from leasehold.claim(
    array(select row(i.job, i.slot, i.ttl, i.mode, i.cap)::leasehold.slot_claim
            from unnest(p_jobs, p_slots, p_ttls, p_modes, p_buffer_caps) as i(job, slot, ttl, mode, cap)),
    p_holder, p_holder_key);
$$;

-- register_jobs is a batch too. RESET ALL first, so that its settings come in the same order
-- on an upgraded database as on a fresh one (secure_schema() adds search_path back after).
alter function leasehold.register_jobs(text[], text[], text[], bigint[], bigint[], text[], text[], text) reset all;
alter function leasehold.register_jobs(text[], text[], text[], bigint[], bigint[], text[], text[], text)
  set plan_cache_mode = force_custom_plan;
alter function leasehold.register_jobs(text[], text[], text[], bigint[], bigint[], text[], text[], text)
  set jit = off;

insert into leasehold.access (object, level) values
  ('claim', 'client'), ('liveness_locks', 'reader'),
  ('slot_claim', 'client'), ('run_outcomes', 'reader'), ('release_matching', 'owner');
