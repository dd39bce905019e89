-- leasehold migration 0015: a tick of 10,000 jobs at about half the database time.
--
-- Additive; the contract of claim() (arguments, row type, decisions) does not change. Measured
-- on one connection, 10,000 free jobs due at one slot (bench/claim-cost.ts): what cost most was
-- not the rules but the way they were evaluated row by row.
-- * claim() looked up every job's queued slots (buffered catch-up slots) with three correlated
--   subqueries per job, although at a tick almost no job has any: ~25% of the call. It now asks
--   once whether any job of the call has a queued slot; only then is the lookup planned.
-- * It took the slot a job held before and whether a lease was held from a second read of the
--   leases after the update; the locked row of step 1 already has both.
-- * is_free() (a SECURITY DEFINER function, so never inlined: each call saves and restores
--   the search_path) was asked of every row, also of released rows, which are free by
--   definition; and check_ttl() of every row instead of every distinct ttl.
-- * The check constraint on leases.name called check_characters() (SECURITY DEFINER too) on
--   every update of a lease row, although only insert sets the name: ~10% of a claim. A
--   trigger on insert and on update of name checks the same rule, with the same message.
-- * claim_due() hands claim() only the requests whose slot is after the job's last claimed
--   slot (and those of unknown, paused or removed jobs, whose reason the caller acts on). A
--   slot at or before last_slot was claimed already (last_slot only grows), and claim() could
--   only answer 'slot-taken', a row claim_due() leaves out anyway. A worker's second pass over
--   its peers' shares is mostly such slots (7,500 of 10,000 requests at a tick on 4 workers):
--   it no longer costs claim()'s per-request report.
-- * finish_runs() looked up each finished run's next queued slot (two correlated subqueries per
--   run) and deleted stale queued slots with a join over all the runs, also when no job of the
--   call has a queued slot; like claim(), it now asks once (10,000 runs: 265 -> 227 ms).
-- * renew_leases() (one statement per heartbeat for all of a worker's leases, schema 7) called
--   renew() once per lease: 1,000 leases took ~36 ms of database time per heartbeat. It is now
--   set-based: one update for all the leases it is given (1,000: ~14 ms). The rule by which a
--   holder keeps its lease stays in one place: confirm_leases() is confirm()'s update for many
--   leases, confirm() calls it for one, and renew() is renew_leases() of one lease.
-- * leases is stored with fillfactor 50: a claim, a renewal and a release rewrite the whole row,
--   and with room on its page the new version stays there (a HOT update: no index entry, no
--   new page). Existing pages take the setting when the table is rewritten (VACUUM FULL or
--   pg_repack, at a quiet moment); new pages at once.

alter table leasehold.leases set (fillfactor = 50);

-- check_lease_name: the rule of the former constraint leases_name_valid, on insert and on a
-- change of the name only.
create function leasehold.check_lease_name() returns trigger
language plpgsql volatile as $$
begin
  if not (char_length(new.name) between 1 and 200 and leasehold.check_characters(new.name) is null) then
    raise exception 'new row for relation "leases" violates check constraint "leases_name_valid"'
      using errcode = 'check_violation', constraint = 'leases_name_valid', table = 'leases', schema = 'leasehold';
  end if;
  return new;
end $$;

create trigger leases_name_valid before insert or update of name on leasehold.leases
  for each row execute function leasehold.check_lease_name();
alter table leasehold.leases drop constraint leases_name_valid;

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
  -- and, from the locked row, the slot it held before and whether a lease was held on it
  v_previous timestamptz[];
  v_held boolean[];
  -- the same for every row of this call: asked once, not once per claimed row (each asks
  -- pg_current_wal_lsn(), and the liveness check reads pg_locks)
  v_epoch integer := leasehold.epoch();
  v_incarnation text := leasehold.liveness_incarnation(p_holder_key);
  -- whether any job of this call has queued slots (buffered, catch-up): almost never at a
  -- tick. A constant of the plan (custom plans), so that when none has, the per-job lookups
  -- of the queue are not in the plan at all.
  v_queued boolean;
begin
  perform leasehold.check_holder(p_holder);
  -- the same bounds as acquire: a caller must not hold a job for a century
  -- (each distinct ttl once: a tick of 10,000 jobs has a handful)
  perform leasehold.check_ttl(d.ttl) from (select distinct c.ttl from unnest(p_claims) c) d;
  v_queued := exists (select 1 from unnest(p_claims) c join leasehold.buffered b on b.job = c.job);
  perform leasehold.pin_synchronous_commit();

  -- 1. Lock the lease rows this call may claim. Random order with SKIP LOCKED, so workers
  --    claiming the same tick share the jobs instead of queueing behind one another.
  select coalesce(array_agg(x.claim), '{}'), coalesce(array_agg(x.claim_slot), '{}'),
         coalesce(array_agg(x.last_slot), '{}'), coalesce(array_agg(x.held), '{}')
    into v_claims, v_slots, v_previous, v_held
    from (
      select w.claim, w.claim_slot, l.last_slot, l.token is not null as held
        from leasehold.leases l
        join (
          select c.job, c.mode, c.buffer_cap, c as claim,
                 case when not v_queued then c.slot else least(c.slot, coalesce(
                   (select min(b.slot) from leasehold.buffered b
                     where b.job = c.job
                       and b.slot > coalesce((select l2.last_slot from leasehold.leases l2 where l2.name = c.job), '-infinity')
                       -- a queued catch-up slot whose skip is final (overlap 'skip') never runs:
                       -- it must not stand in front of the later slots for ever
                       and not (c.mode = 'exclusive' and c.buffer_cap = 0
                                and exists (select 1 from leasehold.skips k where k.job = b.job and k.slot = b.slot))),
                   c.slot)) end as claim_slot
            from unnest(p_claims) c
        ) w on w.job = l.name
       where w.claim_slot <= now()
         -- cheap and necessary (a claim slot is never after the slot asked for), so that a
         -- slot a peer already claimed costs no is_free() (a read of pg_locks per row)
         and (l.last_slot is null or (w.claim).slot > l.last_slot)
         and (l.last_slot is null or w.claim_slot > l.last_slot)
         -- under overlap 'skip' a recorded skip is final: a late tick, a retry or a catch-up
         -- claim must not run the slot after its holder releases
         and not (w.mode = 'exclusive' and w.buffer_cap = 0
                  and exists (select 1 from leasehold.skips k where k.job = w.job and k.slot = w.claim_slot))
         -- (a released row is free: is_free() is asked only about a row with a token)
         and (w.mode in ('replace', 'allow') or l.token is null or leasehold.is_free(l))
         -- paused or removed (schema 11): checked on the locked row's newest version
         and l.suspended is null
       order by random()
         for update of l skip locked
    ) x;

  -- 2. A skip recorded by a peer that held the row (FOR SHARE) until step 1 got its lock
  --    committed before it: this statement's snapshot sees it, the lock of step 1 did not.
  select coalesce(array_agg(row(k.job, k.slot, k.ttl, k.mode, k.buffer_cap)::leasehold.slot_claim), '{}'),
         coalesce(array_agg(k.claim_slot), '{}'), coalesce(array_agg(k.previous_slot), '{}'), coalesce(array_agg(k.held), '{}')
    into v_claims, v_slots, v_previous, v_held
    from unnest(v_claims, v_slots, v_previous, v_held) k(job, slot, ttl, mode, buffer_cap, claim_slot, previous_slot, held)
   where not (k.mode = 'exclusive' and k.buffer_cap = 0
              and exists (select 1 from leasehold.skips s where s.job = k.job and s.slot = k.claim_slot));

  -- 3. Claim what is locked and still claimable.
  return query
  with claiming as (
    select k.job as name, k.claim_slot, k.slot, k.ttl, k.mode, k.buffer_cap as cap, k.previous_slot, k.held
      from unnest(v_claims, v_slots, v_previous, v_held) k(job, slot, ttl, mode, buffer_cap, claim_slot, previous_slot, held)
  ),
  claimed as (
    update leasehold.leases l
       set fence = leasehold.fence_after(l.fence, v_epoch),
           last_slot = c.claim_slot,
           token = case when c.mode = 'allow' then l.token else gen_random_uuid() end,
           holder = case when c.mode = 'allow' then l.holder else p_holder end,
           holder_key = case when c.mode = 'allow' then l.holder_key else p_holder_key end,
           acquired_at = case when c.mode = 'allow' then l.acquired_at else now() end,
           expires_at = case when c.mode = 'allow' then l.expires_at else now() + c.ttl end,
           released_at = case when c.mode = 'allow' then l.released_at else null end,
           ttl = case when c.mode = 'allow' then l.ttl else c.ttl end,
           epoch = case when c.mode = 'allow' then l.epoch else v_epoch end,
           holder_incarnation = case when c.mode = 'allow' then l.holder_incarnation else v_incarnation end
      from claiming c
     where l.name = c.name
    -- the row as it was (previous_slot, previous_token) comes from the locked version
    returning l.name, c.claim_slot, c.slot as wanted_slot, c.cap, c.mode, l.token, l.fence, l.expires_at, c.previous_slot, c.held
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
    delete from leasehold.buffered b using claimed c where v_queued and b.job = c.name and b.slot <= c.claim_slot
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
         c.fence, case when c.mode = 'allow' then null else c.expires_at end, c.previous_slot,
         p_holder, null::bigint, null::timestamptz, null::timestamptz, false, false, now(),
         c.mode <> 'allow' and c.held
    from claimed c;

  -- 4. Everything not claimed above: say why, record a real skip once per slot, buffer it
  --    if the policy says so.
  return query
  with pending as (
    select c.job, c.slot, c.mode, c.buffer_cap as cap, l.holder as l_holder, l.fence as l_fence,
           l.last_slot as l_last_slot, l.acquired_at as l_acquired_at,
           exists (select 1 from leasehold.skips k where k.job = c.job and k.slot = c.slot) as skip_exists,
           case
             when l.name is null then 'unknown-job'
             when l.suspended = 'paused' then 'paused'
             when l.suspended = 'removed' then 'removed'
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
  select c.*
    from leasehold.claim(
           array(select row(r.job, r.slot, r.ttl, r.mode, r.buffer_cap)::leasehold.slot_claim
                   from unnest(p_claims) r
                   left join leasehold.leases l on l.name = r.job
                  where l.name is null or l.suspended is not null or l.last_slot is null or r.slot > l.last_slot),
           p_holder, p_holder_key) c
   where c.claimed
      or c.reason not in ('slot-taken', 'slot-skipped', 'held')
      or c.skip_recorded
      or c.buffered;
$$;

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
  -- as in claim(): whether any of these jobs has a queued slot; when none has (almost always),
  -- neither the stale-slot delete nor the per-run lookup of the next queued slot is planned
  v_queued boolean;
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
  v_queued := exists (select 1 from unnest(p_jobs) j join leasehold.buffered b on b.job = j);
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
     where v_queued and b.job = i.job and l.name = i.job and b.slot <= l.last_slot
    returning b.job, b.slot
  )
  select i.job, i.fence,
         (i.job, i.fence) in (select r.job, r.fence from recorded r),
         i.job in (select unnest(v_released)),
         case when v_queued then (select min(b.slot) from leasehold.buffered b
           where b.job = i.job
             and b.slot > coalesce((select l.last_slot from leasehold.leases l where l.name = i.job), '-infinity')
             and not exists (select 1 from stale_buffers s where s.job = b.job and s.slot = b.slot)) end
    from input i;
end $$;

-- confirm_leases: confirm() for many leases in one statement. The one rule by which a holder
-- keeps its lease: while its token matches and the lease has not expired, extend it by the ttl
-- and confirm it in this epoch (after a failover this is what makes its fenced writes
-- acceptable again). Returns the rows it extended. The epoch is asked once per statement.
-- Planned for what it is: a join of the input with as many lease rows, found through the
-- primary key. Statistics taken while most leases were released estimate "not expired" at one
-- row, and a nested loop planned on that estimate compared every lease with every element
-- (1,000 leases: 220 ms instead of 10); a hash or merge join costs the same whatever the
-- estimate.
create function leasehold.confirm_leases(p_names text[], p_tokens uuid[], p_ttls interval[]) returns setof leasehold.leases
language plpgsql volatile
set plan_cache_mode = force_custom_plan
set enable_nestloop = off
set jit = off
as $$
begin
  return query
  update leasehold.leases l
     set expires_at = now() + i.ttl, ttl = i.ttl, epoch = (select leasehold.epoch())
    from unnest(p_names, p_tokens, p_ttls) as i(name, token, ttl)
   where l.name = any (p_names) and l.name = i.name and l.token = i.token and l.expires_at > now()
  returning l.*;
end $$;

-- confirm: confirm_leases() of one lease; the row, or a row of nulls when the lease is not (or
-- no longer) the caller's. Used by acquire's adoption of a grant whose answer was lost.
create or replace function leasehold.confirm(p_name text, p_token uuid, p_ttl interval) returns leasehold.leases
language plpgsql volatile as $$
declare
  r leasehold.leases;
begin
  select * into r from leasehold.confirm_leases(array[p_name], array[p_token], array[p_ttl]);
  return r;
end $$;

-- renew_leases: extends each given lease while its token matches and it has not expired, in
-- one update; says for each one why not otherwise ('unknown', 'expired': the caller's token but
-- past its expiry, 'released', 'taken-over'). In the order given.
create or replace function leasehold.renew_leases(p_leases leasehold.lease_renewal[])
returns table (name text, renewed boolean, expires_at timestamptz, fence bigint, reason text, database_time timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
set plan_cache_mode = force_custom_plan
set jit = off
as $$
#variable_conflict use_column
declare
  -- the leases this call renewed
  v_names text[];
  v_expires timestamptz[];
  v_fences bigint[];
begin
  if p_leases is null then
    return;
  end if;
  -- a name with a lease row passed the name rule when the row was inserted (leases_name_valid):
  -- only the others are checked, so that a bad name is refused (LH001) rather than 'unknown'
  perform leasehold.check_name(e.name) from unnest(p_leases) e
   where not exists (select 1 from leasehold.leases x where x.name = e.name);
  perform leasehold.check_ttl(d.ttl) from (select distinct e.ttl from unnest(p_leases) e) d;
  perform leasehold.pin_synchronous_commit();
  select coalesce(array_agg(c.name), '{}'), coalesce(array_agg(c.expires_at), '{}'), coalesce(array_agg(c.fence), '{}')
    into v_names, v_expires, v_fences
    from leasehold.confirm_leases(array(select e.name from unnest(p_leases) e), array(select e.token from unnest(p_leases) e),
                                  array(select e.ttl from unnest(p_leases) e)) c;
  -- a lease not renewed: as a new snapshot has it, so that a release or takeover the update
  -- waited for (its row lock) is the reason given, as renew() gave it
  return query
  select e.name, c.name is not null, coalesce(c.expires_at, l.expires_at), coalesce(c.fence, l.fence),
         case
           when c.name is not null then 'renewed'
           when l.name is null then 'unknown'
           when l.token = e.token then 'expired'
           when l.token is null then 'released'
           else 'taken-over'
         end,
         now()
    from unnest(p_leases) with ordinality as e(name, token, ttl, n)
    left join unnest(v_names, v_expires, v_fences) as c(name, expires_at, fence) on c.name = e.name
    left join leasehold.leases l on l.name = e.name and c.name is null
   order by e.n;
end $$;

-- renew: renew_leases() of one lease.
create or replace function leasehold.renew(p_name text, p_token uuid, p_ttl interval)
returns table (renewed boolean, expires_at timestamptz, fence bigint, reason text, database_time timestamptz)
language sql volatile
set lock_timeout = '2s'
as $$
  select r.renewed, r.expires_at, r.fence, r.reason, r.database_time
    from leasehold.renew_leases(array[row(p_name, p_token, p_ttl)::leasehold.lease_renewal]) r;
$$;

insert into leasehold.access (object, level) values ('check_lease_name', 'owner'), ('confirm_leases', 'owner');
