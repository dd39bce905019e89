-- leasehold migration 0028: a slot claimed ahead whose holder is gone before its start runs at
-- its slot on another worker; a skip names the slot of the run holding the lease.
--
-- Additive for callers: claim(), claim_due() and claim_tick() keep their arguments and rows; a
-- new reason, 'held-ahead'; one table and one function (start_tick) are new; force_release()
-- takes an optional second argument.
--
-- A slot claimed ahead (claim_ahead, schema 22) holds its lease for the lead. A worker killed in
-- the lead left the slot taken (last_slot) and unrun: the next slot's claim recorded it lost, a
-- day later for a daily job. A peer may now claim that slot again, at its slot, when the lease is
-- free by the usual rule (expired, or its holder's liveness lock gone) and its holder never
-- started the run. The evidence of a start is durable and per worker, not per run: a worker
-- marks, shortly before the start of runs it claimed ahead, that it starts every run it planned
-- to start until then (start_tick: one row per liveness key, started_through). A re-claim takes
-- only runs planned after the holder's mark, under the lock of that row, and notes the latest it
-- took (taken_through): a holder that was only cut off or paused finds it at its next mark and
-- checks each lease before starting (a renewal: the token changed). So each slot still runs at
-- most once, whether the holder died, paused or lost its liveness session. The holder's run is
-- recorded aborted ("not started"), the peer's run is the slot's run.
--
-- A lease still held (a paused holder, say) answers 'held-ahead' with the lease's expiry in
-- expires_at: the worker asks again then, within the slot's starting deadline.
--
-- force_release(name, by = null) names who: given, the act is recorded in
-- leasehold.actions ('force-released'), and the run holding the lease (leasehold exec, run(),
-- a scheduled run) ends lost with "the lease was force-released by <by>", so that the holder
-- (leasehold exec) and the history say who, not how the stopped command exited.
--
-- A skip caused by a run other than the scheduled one (a backfill, run now, start_run) named the
-- job's last scheduled slot as the holder's slot: it names the slot of the run holding the lease
-- (the running run_log row of the lease's fence).

-- worker_starts: per worker liveness key, through when its runs claimed ahead are (or may be)
-- started, and the latest planned start of a run of it a peer claimed again.
create table leasehold.worker_starts (
  holder_key      bigint primary key,
  started_through timestamptz not null,
  taken_through   timestamptz,
  updated_at      timestamptz not null default now()
);
comment on table leasehold.worker_starts is
  'Per worker liveness key: through when its runs claimed ahead are started (start_tick), and the latest planned start of one a peer claimed again.';

-- start_tick: a worker marks that it starts (or may start) every run it claimed ahead under
-- liveness key p_holder_key and planned to start at or before p_through (or now, if later),
-- before starting any of them. True: none of them was claimed again by a peer; false: some may
-- have been, and each lease is to be checked (renewed) before its run starts.
create function leasehold.start_tick(p_holder_key bigint, p_through timestamptz) returns boolean
language plpgsql volatile
set lock_timeout = '2s'
as $$
declare
  v_new boolean;
  v_old timestamptz;
  v_taken timestamptz;
  v_n integer;
begin
  if p_holder_key is null or p_through is null then
    raise exception 'start_tick: holder_key and through must not be null' using errcode = '22023';
  end if;
  perform leasehold.pin_synchronous_commit();
  insert into leasehold.worker_starts (holder_key, started_through) values (p_holder_key, '-infinity') on conflict do nothing;
  get diagnostics v_n = row_count;
  v_new := v_n > 0;
  select w.started_through, w.taken_through into v_old, v_taken
    from leasehold.worker_starts w where w.holder_key = p_holder_key for update;
  update leasehold.worker_starts w
     set started_through = greatest(w.started_through, p_through, clock_timestamp()), updated_at = now()
   where w.holder_key = p_holder_key;
  -- once per key: rows of keys no longer live and unchanged for a week are forgotten (a slot is
  -- claimed again only within its starting deadline)
  if v_new then
    delete from leasehold.worker_starts w
     where w.updated_at < now() - interval '7 days'
       and not exists (select 1 from leasehold.worker_keys() k where k.key = w.holder_key);
  end if;
  return v_taken is null or v_taken <= v_old;
end $$;

-- claim_batch: as in schema 22, with the re-claim of a slot claimed ahead and never started,
-- 'held-ahead', and the holder's slot of a skip from the run holding the lease.
create or replace function leasehold.claim_batch(
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
  -- and those that claim again a slot claimed ahead that its holder never started (schema 28):
  -- name, fence, the holder's liveness key, when the run was to start
  v_re_names text[];
  v_re_fences bigint[];
  v_re_keys bigint[];
  v_re_starts timestamptz[];
  -- re-claims refused after the lock: the holder marked the start meanwhile
  v_refused text[];
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
         array_agg(x.job) filter (where x.run_slot is not null and x.mode <> 'allow' and not x.reclaim),
         array_agg(x.run_fence) filter (where x.run_slot is not null and x.mode <> 'allow' and not x.reclaim),
         array_agg(x.job) filter (where x.mode <> 'allow' and x.run_fence is distinct from x.fence),
         array_agg(x.job) filter (where x.reclaim), array_agg(x.fence) filter (where x.reclaim),
         array_agg(x.holder_key) filter (where x.reclaim), array_agg(x.run_started_at) filter (where x.reclaim)
    into v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_fences,
         v_taken_names, v_taken_fences, v_older, v_re_names, v_re_fences, v_re_keys, v_re_starts
    from (
      select w.at, w.job, w.claim_slot, w.slot, w.ttl, w.mode, w.cap,
             l.last_slot, l.token is not null as held, l.run_slot, l.run_fence, l.fence,
             l.holder_key, l.run_started_at, l.last_slot is not distinct from w.claim_slot as reclaim
        from leasehold.leases l
        -- the holders' marks of the runs they started ahead (a handful of rows: hashed)
        left join leasehold.worker_starts s on s.holder_key = l.holder_key
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
         and l.suspended is null
         -- one CASE, so that the slot guard comes first and is_free() is asked last (a slot
         -- claimed already, the second pass's usual row, asks nothing of the lease)
         and case
               when l.last_slot is null or (w.slot > l.last_slot and w.claim_slot > l.last_slot)
                 -- (a recorded skip under overlap 'skip' is final: step 3 checks it, after this lock)
                 -- a released row is free: is_free() is asked only about a row with a token
                 then w.mode in ('replace', 'allow') or l.token is null or leasehold.is_free(l)
               -- the slot itself again: claimed ahead (granted before the slot), under a
               -- liveness key, its run never marked started by its holder (start_tick), and the
               -- lease free by the usual rule (expired, or its holder gone); a re-claim is never
               -- a claim ahead
               when p_ahead is not null or w.slot is distinct from l.last_slot or w.claim_slot <> w.slot or w.mode = 'allow'
                    or l.token is null or l.holder_key is null or l.run_slot is distinct from l.last_slot
                    or l.run_fence is distinct from l.fence or l.acquired_at >= l.run_slot
                    or l.run_started_at <= coalesce(s.started_through, '-infinity') then false
               else leasehold.is_free(l)
             end
       order by random()
         for update of l skip locked
    ) x;

  -- A re-claim: under the lock of the holder's worker_starts row (start_tick takes it too), a
  -- run the holder marked started meanwhile is left to it; the others are taken, the latest
  -- planned start among them kept in taken_through for the holder's next mark to find, and
  -- their unstarted runs recorded aborted.
  if v_re_names is not null then
    insert into leasehold.worker_starts (holder_key, started_through)
    select distinct k, '-infinity'::timestamptz from unnest(v_re_keys) k order by 1
    on conflict do nothing;
    perform 1 from leasehold.worker_starts s where s.holder_key = any (v_re_keys) order by s.holder_key for update;
    select array_agg(r.name) into v_refused
      from unnest(v_re_names, v_re_keys, v_re_starts) r(name, key, planned)
      join leasehold.worker_starts s on s.holder_key = r.key
     where r.planned <= s.started_through;
    if v_refused is not null then
      select coalesce(array_agg(k.at), '{}'), coalesce(array_agg(k.job), '{}'), coalesce(array_agg(k.claim_slot), '{}'),
             coalesce(array_agg(k.wanted), '{}'), coalesce(array_agg(k.ttl), '{}'), coalesce(array_agg(k.mode), '{}'),
             coalesce(array_agg(k.cap), '{}'), coalesce(array_agg(k.previous_slot), '{}'), coalesce(array_agg(k.held), '{}'),
             coalesce(array_agg(k.fence), '{}')
        into v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_fences
        from unnest(v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_fences)
               k(at, job, claim_slot, wanted, ttl, mode, cap, previous_slot, held, fence)
       where not (k.job = any (v_refused));
      select array_agg(r.name), array_agg(r.fence), array_agg(r.key), array_agg(r.planned)
        into v_re_names, v_re_fences, v_re_keys, v_re_starts
        from unnest(v_re_names, v_re_fences, v_re_keys, v_re_starts) r(name, fence, key, planned)
       where not (r.name = any (v_refused));
    end if;
    if v_re_names is not null then
      update leasehold.worker_starts s
         set taken_through = greatest(s.taken_through, m.planned), updated_at = now()
        from (select r.key, max(r.planned) as planned from unnest(v_re_keys, v_re_starts) r(key, planned) group by r.key) m
       where s.holder_key = m.key;
      perform leasehold.end_runs(
        v_re_names, null, v_re_fences,
        array_fill('aborted'::text, array[cardinality(v_re_names)]),
        array_fill('not started: its lease was free (expired, or its holder gone) before the start; run by ' || p_holder,
                   array[cardinality(v_re_names)]),
        null);
    end if;
  end if;

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
           -- the slot of the run holding the lease (a backfill's, say), not the last scheduled one
           case when l.token is null or l.run_fence = l.fence then coalesce(l.run_slot, l.last_slot)
                else coalesce((select r.slot from leasehold.run_log r where r.job = l.name and r.fence = l.fence and r.outcome = 'running'),
                              l.last_slot) end as l_holder_slot,
           l.acquired_at as l_acquired_at, l.expires_at as l_expires_at,
           exists (select 1 from leasehold.skips k where k.job = i.job and k.slot = i.slot) as skip_exists,
           case
             when l.name is null then 'unknown-job'
             when l.suspended = 'paused' then 'paused'
             when l.suspended = 'removed' then 'removed'
             when i.slot > now() then 'slot-not-due'
             -- claimed ahead by a holder that has not started it, and whose lease is not free:
             -- ask again when the lease expires (a row locked meanwhile: shortly)
             when i.slot = l.last_slot and i.mode <> 'allow' and l.token is not null and l.holder_key is not null
                  and l.run_slot = l.last_slot and l.run_fence = l.fence and l.acquired_at < l.run_slot
                  and l.run_started_at > coalesce(s.started_through, '-infinity')
               then case when leasehold.is_free(l) then 'holder-committing' else 'held-ahead' end
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
      left join leasehold.worker_starts s on s.holder_key = l.holder_key
     where i.at not in (select k.at from unnest(c_at) k(at))
       and (p_every or l.name is null or l.suspended is not null or l.last_slot is null or i.slot > l.last_slot
            or (i.slot = l.last_slot and l.token is not null and l.run_slot = l.last_slot and l.acquired_at < l.run_slot
                and l.run_started_at > coalesce(s.started_through, '-infinity')))
  ),
  -- held, as the newest row version says under a lock no claim can pass; a row a claimer has
  -- locked (SKIP LOCKED) or that changed meanwhile is reported holder-committing: ask again.
  -- A slot whose skip is recorded already needs no lock (and takes no lock, no xid).
  held as (
    select p.job, p.slot, p.cap, l.holder, l.fence, p.l_holder_slot as holder_slot, l.acquired_at
      from pending p join leasehold.leases l on l.name = p.job
     where p.why = 'held' and not p.skip_exists
       and (l.last_slot is null or p.slot > l.last_slot)
       and not leasehold.is_free(l)
       for share of l skip locked
  ),
  skipped as (
    insert into leasehold.skips (job, slot, holder, holder_fence, holder_slot, held_for, recorded_by)
    select h.job, h.slot, h.holder, h.fence, h.holder_slot, now() - h.acquired_at, p_holder
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
           p.l_holder, p.l_fence, p.l_holder_slot, p.l_acquired_at, p.l_expires_at,
           exists (select 1 from skipped s where s.job = p.job and s.slot = p.slot) as skip_recorded,
           exists (select 1 from buffering b where b.job = p.job and b.slot = p.slot) as buffered
      from pending p
  )
  select a.job, a.slot, false, a.why,
         null::uuid, null::bigint, case when a.why = 'held-ahead' then a.l_expires_at end, null::timestamptz,
         a.l_holder, a.l_fence, a.l_holder_slot, a.l_acquired_at,
         a.skip_recorded, a.buffered, now(), false
    from answered a
   where p_every or a.why not in ('slot-taken', 'slot-skipped', 'held') or a.skip_recorded or a.buffered;
end $$;


-- force_release: as in schema 17, with p_by: who releases (checked like a holder name). Given,
-- the act is recorded in leasehold.actions, and the run holding the lease ends lost naming p_by.
drop function leasehold.force_release(text);
create function leasehold.force_release(p_name text, p_by text default null)
returns table (released boolean, previous_holder text, previous_fence bigint, fence bigint)
language plpgsql volatile as $$
#variable_conflict use_column
declare
  old leasehold.leases;
  r leasehold.leases;
  v_why text := coalesce('the lease was force-released by ' || p_by, 'the lease was released by force (leasehold.force_release)');
begin
  if p_by is not null then
    perform leasehold.check_holder(p_by);
  end if;
  perform leasehold.pin_synchronous_commit();
  select * into old from leasehold.leases l where l.name = p_name for update;
  if not found then
    return query select false, null::text, null::bigint, null::bigint;
    return;
  end if;
  -- the scheduled run in flight on the row, if any, ends with its lease
  if old.run_slot is not null then
    perform leasehold.end_runs(array[p_name], null, array[old.run_fence], array['lost'], array[v_why], null);
  end if;
  -- and so does a run with a run_log row under the lease (leasehold exec, run()), naming who
  if p_by is not null and old.token is not null then
    update leasehold.run_log x set outcome = 'lost', finished_at = now(), error = v_why
     where x.job = p_name and x.fence = old.fence and x.outcome = 'running';
  end if;
  update leasehold.leases l
     set token = null, expires_at = null, holder_key = null, released_at = now(),
         fence = leasehold.next_fence(l.fence)
   where l.name = p_name
  returning l.* into r;
  if p_by is not null then
    perform leasehold.record_action('force-released', p_name, p_by,
      jsonb_build_object('released', old.token is not null, 'previous_holder', old.holder, 'previous_fence', old.fence, 'fence', r.fence));
  end if;
  return query select old.token is not null, old.holder, old.fence, r.fence;
end $$;

insert into leasehold.access (object, level) values ('worker_starts', 'owner'), ('start_tick', 'client');
