-- leasehold migration 0027: the loser of a simultaneous acquire learns who won.
--
-- Additive: acquire() keeps its arguments and rows.
--
-- When two acquirers met on a free lease at the same moment, the loser found the row locked by
-- the winner's uncommitted grant and answered 'being-acquired' with no holder and no since (2
-- of 12 rounds of the seed scenario from Python; most rounds of Python racing TypeScript). The
-- rule is that the one that skips learns who holds the lease and since when. Now the loser waits
-- up to 50 ms for the winner's commit (only on that path: a lock_timeout for one statement, in a
-- block of its own) and reads the row again, so it answers 'held' naming the winner.

-- acquire: as in schema 17, with the wait for a concurrent winner.
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

  -- Locked by another acquirer taking it right now: wait a few milliseconds for its commit, so
  -- that the one that skips learns who holds the lease and since when. A winner slower than
  -- that (or one that rolls back) leaves it 'being-acquired', naming nobody: the row would
  -- still name the previous holder.
  if key_share_free is false then
    begin
      perform set_config('lock_timeout', '50ms', true);
      perform 1 from leasehold.leases l where l.name = p_name for key share;
      select * into r from leasehold.leases l where l.name = p_name;
    exception when lock_not_available then
      null;
    end;
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
