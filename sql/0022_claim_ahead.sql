-- leasehold migration 0022: a tick's claim does less work per slot, and a worker may claim a
-- slot shortly before it is due, so that its run starts on time.
--
-- Additive for callers: claim(), claim_due(), claim_tick() and claim_slots() keep their
-- arguments, rows and decisions; claim_ahead() is new.
--
-- Fewer passes. claim_batch() (behind those four) made more passes over a call's jobs than its
-- decisions need (2,500 free jobs claimed on one connection of PostgreSQL 15: 47.5 ms inside the
-- function, of which step 1 14 ms, step 2 8 ms and step 3 22 ms; 40.5 ms now):
-- * The check that a skip recorded for the slot under overlap 'skip' is final ran three times
--   per job: in step 1 (before the lock), in step 2 (a pass of its own over every locked row,
--   whose only purpose was a snapshot taken after the lock) and again in step 4 for what was
--   not claimed. Step 3's update now makes it, in the same pass that claims: its snapshot is
--   taken after step 1's locks, which is what step 2 was for. Step 1 no longer asks; a row it
--   locks whose skip is final is left unclaimed by step 3 and reported by step 4, as before.
--   Step 2 still runs first when step 1 locked a row with a run in flight to take over (the run
--   recorded lost must belong to a row that step 3 then claims).
-- * Step 3 keeps what it claimed in arrays, so that step 4 leaves out exactly those (a row that
--   step 1 locked but step 3 refused is reported), and inserts the run_log rows of overlap
--   'allow' in a statement of its own, run only when such a job was claimed: the empty insert
--   fired run_log's statement triggers on every tick.
-- * The checks of a call's requests are check_claim_requests().
--
-- Claiming ahead. A claim is work for the database and for the worker (10,000 jobs due at one
-- instant on 4 workers: the share claims and the starts of their runs take 300-600 ms on a
-- shared 2-core machine). claim_ahead() lets a worker do that work before the slot: it claims
-- slots that are due within `ahead_ms` (at most 10 s), and the worker starts each run at its
-- slot. It is claim_batch() with `p_ahead`: what it claims, a later claim of the same slot finds
-- taken (last_slot), as any claim; what it leaves (a lease still held, a row a peer is
-- committing, a job with queued slots, a paused job...) is claimed at the slot by claim_batch()
-- with its usual decisions. It records no skip and buffers nothing: whether the slot is skipped
-- is decided at the slot. Only a lease that is free in the plainest sense is claimed ahead:
-- released (no token), no run in flight, and last granted by a claim (or never granted), so
-- that no run_log row of an earlier grant can still be running. The run in flight starts
-- (run_started_at) at the start the caller gives (its slot, plus the job's jitter), not before.
-- claim_batch() takes two more arguments for that (it is private: its callers are the claim
-- functions), so the old one is dropped.

-- check_claim_requests: the rules every claim's requests follow, checked in one pass (the value
-- named in an error is looked for after): parallel arrays of one length, a known mode, a buffer
-- cap of 0 or more, no null job or slot, ttls within acquire's bounds. Raises 22023 (LH002 for a
-- ttl); claims nothing. Used by claim_batch() and claim_ahead().
create function leasehold.check_claim_requests(
  p_jobs text[], p_slots timestamptz[], p_ttls interval[], p_modes text[], p_caps integer[]
) returns void
language plpgsql stable as $$
declare
  v_n integer := coalesce(cardinality(p_jobs), 0);
  v_bad text;
  v_bad_mode boolean;
  v_bad_cap boolean;
  v_bad_null boolean;
  v_null_ttl boolean;
  v_min_ttl interval;
  v_max_ttl interval;
begin
  if coalesce(cardinality(p_slots), 0) <> v_n or coalesce(cardinality(p_ttls), 0) <> v_n
     or coalesce(cardinality(p_modes), 0) <> v_n or coalesce(cardinality(p_caps), 0) <> v_n then
    raise exception 'claim: as many slots, ttls, modes and buffer caps as jobs are needed (% jobs)', v_n using errcode = '22023';
  end if;
  if v_n = 0 then
    return;
  end if;
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
end $$;

drop function leasehold.claim_batch(text[], timestamptz[], interval[], text[], integer[], text, bigint, boolean);

-- claim_batch: claim(), claim_due(), claim_tick() and claim_ahead() in one. Parallel arrays, one
-- element per request; p_every: one row per request with its reason (claim()), or only the rows
-- the caller must act on (claim_due()). p_ahead: a claim ahead of the slots (claim_ahead()):
-- slots due within it, from free leases only, and only the claimed rows come back; p_starts
-- (with p_ahead): when each run starts. The rules are those of schema 15's claim(), step for
-- step; see the comments there and docs/sql-api.md.
create function leasehold.claim_batch(
  p_jobs text[], p_slots timestamptz[], p_ttls interval[], p_modes text[], p_caps integer[],
  p_holder text, p_holder_key bigint, p_every boolean, p_ahead interval default null, p_starts timestamptz[] default null
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
  -- what step 3 claimed, as parallel arrays: positions, jobs, slots, tokens, fences, expiries,
  -- previous slots, whether the row was held, modes
  c_at integer[];
  c_jobs text[];
  c_slots timestamptz[];
  c_tokens uuid[];
  c_fences bigint[];
  c_expires timestamptz[];
  c_previous timestamptz[];
  c_held boolean[];
  c_modes text[];
  v_epoch integer := leasehold.epoch();
  v_incarnation text := leasehold.liveness_incarnation(p_holder_key);
  v_queued boolean;
begin
  perform leasehold.check_holder(p_holder);
  perform leasehold.check_claim_requests(p_jobs, p_slots, p_ttls, p_modes, p_caps);
  if v_n = 0 then
    return;
  end if;
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
       where case when p_ahead is null then w.claim_slot <= now()
                  -- ahead: due within p_ahead, from a lease that is free in the plainest sense
                  else w.claim_slot <= now() + p_ahead and w.claim_slot = w.slot and w.mode in ('exclusive', 'replace')
                       and l.token is null and l.run_slot is null and (l.run_fence = l.fence or l.fence = 0) end
         and (l.last_slot is null or (w.slot > l.last_slot and w.claim_slot > l.last_slot))
         -- (a recorded skip under overlap 'skip' is final: step 3 checks it, after this lock)
         -- a released row is free: is_free() is asked only about a row with a token
         and (w.mode in ('replace', 'allow') or l.token is null or leasehold.is_free(l))
         and l.suspended is null
       order by random()
         for update of l skip locked
    ) x;

  -- 2. A skip recorded by a peer that held the row (FOR SHARE) until step 1 got its lock
  --    committed before it: a statement after the lock sees it, step 1's snapshot did not.
  --    Step 3 checks that itself; only a takeover needs the answer earlier, since the run in
  --    flight it records lost must be a run of a row that step 3 then claims.
  if v_taken_names is not null or v_older is not null then
    select coalesce(array_agg(k.at), '{}'), coalesce(array_agg(k.job), '{}'), coalesce(array_agg(k.claim_slot), '{}'),
           coalesce(array_agg(k.wanted), '{}'), coalesce(array_agg(k.ttl), '{}'), coalesce(array_agg(k.mode), '{}'),
           coalesce(array_agg(k.cap), '{}'), coalesce(array_agg(k.previous_slot), '{}'), coalesce(array_agg(k.held), '{}'),
           coalesce(array_agg(k.fence), '{}')
      into v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_fences
      from unnest(v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_fences)
             k(at, job, claim_slot, wanted, ttl, mode, cap, previous_slot, held, fence)
     where not (k.mode = 'exclusive' and k.cap = 0
                and exists (select 1 from leasehold.skips s where s.job = k.job and s.slot = k.claim_slot));
  end if;

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
  --    each had is the fence it has. A skip recorded for the slot under overlap 'skip' is
  --    final: this statement's snapshot, taken after the locks, sees every skip a peer
  --    committed before step 1 locked the row (step 2's recheck, done here in the same pass).
  v_new_fences := leasehold.fences_after(v_fences, v_epoch);
  with claiming as (
    select k.at, k.job as name, k.claim_slot, k.wanted as wanted_slot, k.ttl, k.mode, k.cap, k.previous_slot, k.held, k.new_fence
      from unnest(v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_new_fences)
             k(at, job, claim_slot, wanted, ttl, mode, cap, previous_slot, held, new_fence)
     where not (k.mode = 'exclusive' and k.cap = 0
                and exists (select 1 from leasehold.skips s where s.job = k.job and s.slot = k.claim_slot))
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
           -- claimed ahead: the run starts at its start, not at the claim
           run_started_at = case when p_ahead is null then clock_timestamp()
                                 else greatest(clock_timestamp(), coalesce(p_starts[c.at], c.claim_slot), c.claim_slot) end
      from claiming c
     where l.name = c.name and c.mode <> 'allow'
    returning c.at, l.name, c.claim_slot, c.wanted_slot, c.cap, c.mode, l.token, l.fence, l.expires_at, c.previous_slot, c.held
  ),
  claimed_allow as (
    update leasehold.leases l
       set fence = c.new_fence, last_slot = c.claim_slot
      from claiming c
     where l.name = c.name and c.mode = 'allow'
    returning c.at, l.name, c.claim_slot, c.wanted_slot, c.cap, c.mode, l.token, l.fence, l.expires_at, c.previous_slot, c.held
  ),
  claimed as (
    select * from claimed_lease union all select * from claimed_allow
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
  select coalesce(array_agg(c.at), '{}'), coalesce(array_agg(c.name), '{}'), coalesce(array_agg(c.claim_slot), '{}'),
         coalesce(array_agg(c.token), '{}'), coalesce(array_agg(c.fence), '{}'), coalesce(array_agg(c.expires_at), '{}'),
         coalesce(array_agg(c.previous_slot), '{}'), coalesce(array_agg(c.held), '{}'), coalesce(array_agg(c.mode), '{}')
    into c_at, c_jobs, c_slots, c_tokens, c_fences, c_expires, c_previous, c_held, c_modes
    from claimed c;

  -- overlap 'allow' has no lease to carry its runs: a run_log row from the start, as before (a
  -- statement of its own, so that a tick without such a job fires no trigger on run_log)
  if 'allow' = any (c_modes) then
    insert into leasehold.run_log (job, slot, fence, holder)
    select k.job, k.slot, k.fence, p_holder from unnest(c_jobs, c_slots, c_fences, c_modes) k(job, slot, fence, mode)
     where k.mode = 'allow';
  end if;

  return query
  select k.job, k.slot, true, 'claimed'::text, case when k.mode = 'allow' then null else k.token end,
         k.fence, case when k.mode = 'allow' then null else k.expires end, k.previous_slot,
         p_holder, null::bigint, null::timestamptz, null::timestamptz, false, false, now(),
         k.mode <> 'allow' and k.held
    from unnest(c_jobs, c_slots, c_tokens, c_fences, c_expires, c_previous, c_held, c_modes)
           k(job, slot, token, fence, expires, previous_slot, held, mode);

  -- A claim ahead leaves everything else to the claim at the slot.
  if p_ahead is not null then
    return;
  end if;

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
     where i.at not in (select k.at from unnest(c_at) k(at))
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

-- claim_ahead: claim_batch() ahead of the slots; only the claimed rows, with times as epoch
-- milliseconds (docs/sql-api.md).
create function leasehold.claim_ahead(
  p_jobs text[], p_slots timestamptz[], p_ttl_ms bigint[], p_modes text[], p_buffer_caps integer[],
  p_holder text, p_holder_key bigint, p_ahead_ms bigint, p_starts timestamptz[] default null
) returns table (
  job            text,
  slot           double precision,
  token          uuid,
  fence          bigint,
  expires_at     double precision,
  previous_slot  double precision,
  database_time  double precision
)
language plpgsql volatile
set plan_cache_mode = force_custom_plan
set jit = off
as $$
#variable_conflict use_column
begin
  if p_ahead_ms is null or p_ahead_ms < 0 or p_ahead_ms > 10000 then
    raise exception 'claim_ahead: ahead_ms must be between 0 and 10000 (got %)', coalesce(p_ahead_ms::text, 'null') using errcode = '22023';
  end if;
  if p_starts is not null and cardinality(p_starts) <> coalesce(cardinality(p_jobs), 0) then
    raise exception 'claim_ahead: as many starts as jobs are needed (% jobs)', coalesce(cardinality(p_jobs), 0) using errcode = '22023';
  end if;
  return query
  select c.job, (extract(epoch from c.slot) * 1000)::double precision, c.token, c.fence,
         (extract(epoch from c.expires_at) * 1000)::double precision, (extract(epoch from c.previous_slot) * 1000)::double precision,
         (extract(epoch from c.database_time) * 1000)::double precision
    from leasehold.claim_batch(p_jobs, p_slots, array(select t * interval '1 millisecond' from unnest(p_ttl_ms) t),
                               p_modes, p_buffer_caps, p_holder, p_holder_key, false,
                               p_ahead_ms * interval '1 millisecond', p_starts) c;
end $$;

insert into leasehold.access (object, level) values ('check_claim_requests', 'owner'), ('claim_ahead', 'client');
