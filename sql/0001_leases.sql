-- leasehold migration 0001: the lease protocol.
--
-- Glossary
--   lease   one row per job name: who may run the job now, and until when.
--   token   random secret of one acquisition; renew, release and fenced writes present it.
--   fence   bigint that grows on every acquisition of a name and never goes back, even across
--           a failover: next_fence() folds the epoch into it. A write checked against it
--           cannot come from an older holder.
--   epoch   the server's WAL timeline. It grows on every promotion of a standby, so a grant
--           made on a promoted server is told apart from anything the old primary issued.
--   incarnation  epoch and postmaster start time: one run of one server. Advisory locks
--           (liveness evidence) exist only in the incarnation that took them.
--   holder  human-readable identity of the acquirer (host:pid:id), for logs and skips.
--   holder_key  bigint of the holder's liveness session: a session-level advisory lock the
--           holder keeps while its process lives. When the lock is gone the lease is free.
--   slot    the scheduled occurrence a claim is for; each slot is claimed at most once.
--
-- Time: every decision uses the database clock (now()), never the caller's.
-- Errors: custom SQLSTATEs LH001 (bad name), LH002 (bad ttl), LH003 (lease lost),
-- LH004 (bad holder). See docs/sql-api.md for the contract.

-- check_characters: describes the first character a name or holder must not contain, or null.
-- Refused: C0/C1 controls and line separators, bidirectional controls (they reorder what a
-- terminal or page shows: 'invoice\u202Egnp.exe' renders as 'invoiceexe.png') and invisible
-- format characters (zero-width space, joiners, BOM, fillers, tags: 'pay\u200Bments' would look
-- like 'payments'). Positions count code points from 0, as the TypeScript client does.
create function leasehold.check_characters(p_text text) returns text
language sql immutable strict as $$
  select format('U+%s, %s, at position %s',
                upper(lpad(to_hex(ascii(m.c)), greatest(4, length(to_hex(ascii(m.c)))), '0')),
                case
                  when m.c ~ '[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]' then 'a bidirectional control'
                  when m.c ~ '[\u0001-\u001f\u007f-\u009f\u2028\u2029]' then 'a control character'
                  else 'an invisible character'
                end,
                strpos(p_text, m.c) - 1)
    from (select substring(p_text from
            '[\u0001-\u001f\u007f-\u009f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e007f]'
          ) as c) m
   where m.c is not null;
$$;

create table leasehold.leases (
  name        text primary key,
  token       uuid,
  fence       bigint not null default 0,
  holder      text,
  holder_key  bigint,
  acquired_at timestamptz,
  expires_at  timestamptz,
  last_slot   timestamptz,
  released_at timestamptz,
  ttl         interval,
  -- the epoch in which the current grant or its latest renewal was confirmed
  epoch       integer,
  -- the incarnation whose advisory lock table holds holder_key's lock
  holder_incarnation text,
  created_at  timestamptz not null default now(),
  constraint leases_name_valid
    check (char_length(name) between 1 and 200 and leasehold.check_characters(name) is null),
  -- A lease is held exactly when it has a token, and then it always has an expiry.
  constraint leases_token_has_expiry check ((token is null) = (expires_at is null))
);

comment on table leasehold.leases is
  'One row per lease name. Write it only through the leasehold.* functions.';

-- Argument checks shared by every entry point, so psql, Python and TypeScript callers get
-- the same answer with the same SQLSTATE.
create function leasehold.check_name(p_name text) returns void
language plpgsql immutable as $$
declare
  v_bad text := leasehold.check_characters(p_name);
begin
  if p_name is null or char_length(p_name) = 0 then
    raise exception 'lease name must not be empty'
      using errcode = 'LH001', hint = 'Name the job, e.g. ''nightly-report''.';
  end if;
  if char_length(p_name) > 200 then
    raise exception 'lease name must be 1-200 characters (got %)', char_length(p_name)
      using errcode = 'LH001', hint = 'Use a shorter name.';
  end if;
  if v_bad is not null then
    raise exception 'lease name must not contain control, bidirectional or invisible characters (found %)', v_bad
      using errcode = 'LH001', hint = 'Remove the character: names are shown to operators and must read as they are.';
  end if;
end $$;

create function leasehold.check_ttl(p_ttl interval) returns void
language plpgsql immutable as $$
begin
  if p_ttl is null or p_ttl <= interval '0' then
    raise exception 'ttl must be positive (got %)', p_ttl
      using errcode = 'LH002', hint = 'Pass an interval such as ''30 seconds''.';
  end if;
  if p_ttl < interval '100 milliseconds' or p_ttl > interval '7 days' then
    raise exception 'ttl must be between 100 milliseconds and 7 days (got %)', p_ttl
      using errcode = 'LH002',
            hint = 'The ttl bounds how long a stalled holder blocks others; heartbeats renew it while the job runs.';
  end if;
end $$;

create function leasehold.check_holder(p_holder text) returns void
language plpgsql immutable as $$
declare
  v_bad text := leasehold.check_characters(p_holder);
begin
  if p_holder is null or char_length(p_holder) = 0 or char_length(p_holder) > 200 then
    raise exception 'holder must be 1-200 characters (got %)', coalesce(char_length(p_holder), 0)
      using errcode = 'LH004', hint = 'Use something like host:pid.';
  end if;
  if v_bad is not null then
    raise exception 'holder must not contain control, bidirectional or invisible characters (found %)', v_bad
      using errcode = 'LH004', hint = 'Use something like host:pid.';
  end if;
end $$;

-- epoch: the server's current WAL timeline. pg_walfile_name(pg_current_wal_lsn()) moves to
-- the new timeline the moment a standby is promoted; pg_control_checkpoint() only after the
-- end-of-recovery checkpoint, which can come seconds later (measured: docs/high-availability.md).
-- During recovery (a standby, read-only) the replayed timeline is reported, for status views.
create function leasehold.epoch() returns integer
language sql volatile as $$
  select case
    when pg_is_in_recovery() then (pg_control_checkpoint()).timeline_id
    else ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer
  end;
$$;

-- incarnation: one run of one server. A restart changes the start time, a promotion the
-- timeline; session advisory locks do not survive either.
create function leasehold.incarnation() returns text
language sql volatile as $$
  select leasehold.epoch() || '@' || to_char(pg_postmaster_start_time() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US');
$$;

-- next_fence: the one rule for every new fence (acquire, claim_slots, force_release).
-- Epoch e grants fences from (e - 1) << 40 up, so the first grant on a promoted server is
-- above every fence the old primary can have issued, even ones lost with it (as long as a
-- name is granted fewer than 2^40 times in one epoch). Timeline 1 keeps fences 1, 2, 3, ...
-- Fences stay below 2^53 (exact in JavaScript numbers) up to timeline 8192.
create function leasehold.next_fence(p_old bigint) returns bigint
language sql volatile as $$
  select greatest(coalesce(p_old, 0) + 1, (leasehold.epoch() - 1)::bigint << 40);
$$;

-- pin_synchronous_commit: lease-changing functions call it first. A role or session with
-- synchronous_commit = off (or local) would otherwise acknowledge a grant before a
-- synchronous standby has it. Transaction-local, so it still holds at COMMIT (a function's
-- SET clause would be reverted on return, before the commit).
create function leasehold.pin_synchronous_commit() returns void
language sql volatile as $$
  select set_config('synchronous_commit', 'on', true)
   where current_setting('synchronous_commit') not in ('on', 'remote_write', 'remote_apply');
$$;

-- holder_gone: true when nobody holds the liveness lock `p_key` any more. One lock-table probe
-- (pg_try_advisory_xact_lock_shared succeeds only when no session holds the exclusive lock);
-- only when it succeeds, a second look makes sure the lock is not held by this very session: an
-- advisory lock never conflicts with its own session, and behind a transaction pooler a
-- misrouted liveness lock can sit on the server connection an acquire runs on. CASE fixes the
-- evaluation order, so the common path (holder alive) costs the probe alone.
create function leasehold.holder_gone(p_key bigint) returns boolean
language sql volatile as $$
  select case
    when p_key is null then false
    when pg_try_advisory_xact_lock_shared(p_key) then not exists (
      select 1 from pg_locks
       where pid = pg_backend_pid() and locktype = 'advisory' and objsubid = 1 and granted
         and mode = 'ExclusiveLock' and ((classid::bigint << 32) | objid::bigint) = p_key)
    else false
  end;
$$;

-- liveness_incarnation: the incarnation to record with a grant under liveness key p_key: the
-- current one when the key's lock is held on this server right now, else null (the TTL then
-- governs). A client does not notice at once that its liveness session went with an old
-- primary; a grant recorded with that key as if it lived here would look "holder gone" at once.
create function leasehold.liveness_incarnation(p_key bigint) returns text
language sql volatile as $$
  select case when p_key is null or leasehold.holder_gone(p_key) then null else leasehold.incarnation() end;
$$;

-- is_free: the one rule for "anyone may take this lease now".
--   * never held or released;
--   * expired by the database clock; a lease last confirmed in an earlier epoch (before a
--     failover) gets a grace of one more ttl, because with asynchronous replication the
--     holder's latest renewals may be lost with the old primary while it still runs;
--   * its holder's liveness lock is gone, asked only on the incarnation where the lock was
--     taken: after a restart or promotion no advisory lock exists, which proves nothing.
create function leasehold.is_free(l leasehold.leases) returns boolean
language sql volatile as $$
  select case
    when l.token is null then true
    when l.epoch is not distinct from leasehold.epoch() and l.expires_at <= now() then true
    when l.epoch is distinct from leasehold.epoch()
         and l.expires_at + coalesce(l.ttl, interval '0') <= now() then true
    when l.holder_incarnation is not distinct from leasehold.incarnation() then leasehold.holder_gone(l.holder_key)
    else false
  end;
$$;

-- confirm: the one rule by which a holder keeps its lease: while its token matches and the
-- lease has not expired, extend it by p_ttl and confirm it in this epoch (after a failover
-- this is what makes its fenced writes acceptable again). Returns the row, or a row of nulls
-- when the lease is not (or no longer) the caller's. Used by renew and by acquire's adoption
-- of a grant whose answer was lost.
create function leasehold.confirm(p_name text, p_token uuid, p_ttl interval) returns leasehold.leases
language plpgsql volatile as $$
declare
  r leasehold.leases;
begin
  update leasehold.leases l
     set expires_at = now() + p_ttl, ttl = p_ttl, epoch = leasehold.epoch()
   where l.name = p_name and l.token = p_token and l.expires_at > now()
  returning l.* into r;
  return r;
end $$;

-- acquire: one call, one round trip, never waits for a row lock.
--
-- Takes the lease where it is free (is_free). Sets a token, the next fence (next_fence),
-- now() + ttl and the current epoch and incarnation.
-- With p_slot, the claim also needs p_slot newer than the last claimed slot and not in
-- the future, so each scheduled occurrence is claimed once across a fleet.
-- p_token: the caller's own random token for this acquisition (null: the server makes one).
-- A retry whose first answer was lost passes the same token; while the lease is held with
-- it, the answer is 'acquired' again with the same fence (the caller adopts its own grant)
-- instead of 'held' by itself. Never reuse a token for a second acquisition.
--
-- Why this shape (measured, see docs/design.md): the losing path must write nothing. A
-- SELECT ... FOR UPDATE whose WHERE is false locks nothing, takes no transaction id and
-- writes no WAL; INSERT ... ON CONFLICT DO UPDATE would lock the row on every losing call.
-- SKIP LOCKED makes racing acquirers lose at once instead of queueing, and makes a lease
-- whose holder is inside a fenced transaction (FOR KEY SHARE) report 'holder-committing'.
create function leasehold.acquire(
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

  select l.name, l.token into candidate, previous_token
    from leasehold.leases l
   where l.name = p_name
     and leasehold.is_free(l)
     and (p_slot is null or ((l.last_slot is null or p_slot > l.last_slot) and p_slot <= now()))
     for update skip locked;

  if found then
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

-- renew: extends the lease while the token matches and it has not expired, and confirms it
-- in the current epoch: after a failover, a live holder's first renewal on the new primary
-- makes its fenced writes valid again (assert_lease refuses leases of an earlier epoch).
create function leasehold.renew(p_name text, p_token uuid, p_ttl interval)
returns table (renewed boolean, expires_at timestamptz, fence bigint, reason text, database_time timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  r leasehold.leases;
begin
  perform leasehold.check_name(p_name);
  perform leasehold.check_ttl(p_ttl);
  perform leasehold.pin_synchronous_commit();
  r := leasehold.confirm(p_name, p_token, p_ttl);
  if r.name is not null then
    return query select true, r.expires_at, r.fence, 'renewed'::text, now();
    return;
  end if;
  select * into r from leasehold.leases l where l.name = p_name;
  return query select false, r.expires_at, r.fence,
    case
      when r.name is null then 'unknown'
      when r.token = p_token then 'expired'
      when r.token is null then 'released'
      else 'taken-over'
    end, now();
end $$;

-- release: frees the lease only for the matching token. A late release from an old holder
-- matches nothing, changes nothing and returns false.
create function leasehold.release(p_name text, p_token uuid) returns boolean
language sql volatile
set lock_timeout = '2s'
as $$
  select leasehold.pin_synchronous_commit();
  with released as (
    update leasehold.leases l
       set token = null, expires_at = null, holder_key = null, released_at = now()
     where l.name = p_name and l.token = p_token
    returning 1
  )
  select exists (select 1 from released);
$$;

-- holds_lease: the fence check, as a boolean for WHERE clauses and triggers (assert_lease below
-- raises LH003 where it is false, start_run calls assert_lease):
--   update results set ... where id = $1 and leasehold.holds_lease('job', $token, $fence);
create function leasehold.holds_lease(p_name text, p_token uuid, p_fence bigint) returns boolean
language plpgsql volatile as $$
begin
  perform 1 from leasehold.leases l
   where l.name = p_name and l.token = p_token and l.fence = p_fence and l.expires_at > now()
     and l.epoch = leasehold.epoch()
     for key share;
  return found;
end $$;

-- assert_lease: the fence check for the caller's own transaction. Locks the lease row (holds_lease)
-- FOR KEY SHARE where name, token and fence match, the lease is unexpired and it was
-- confirmed in the current epoch (a release or takeover lost in a failover must not let the
-- old token write again; the live holder's next renewal re-confirms it), so no
-- takeover (which needs FOR UPDATE) can happen before this transaction ends, while the
-- holder's own renewals (plain UPDATEs of non-key columns) still go through. Raises LH003
-- otherwise. Returns the fence.
create function leasehold.assert_lease(p_name text, p_token uuid, p_fence bigint) returns bigint
language plpgsql volatile as $$
declare
  r leasehold.leases;
  v_detail text;
begin
  -- the rule and the lock are holds_lease's; this function only explains a refusal
  if leasehold.holds_lease(p_name, p_token, p_fence) then
    return p_fence;
  end if;
  select * into r from leasehold.leases l where l.name = p_name;
  v_detail := case
      when r.name is null then 'no such lease'
      when r.fence <> p_fence and r.token is null then format('the lease was force-released (fence is now %s, held by nobody)', r.fence)
      when r.fence <> p_fence then format('fence is now %s, held by %s', r.fence, r.holder)
      when r.token is null then 'the lease was released'
      when r.expires_at <= now() then 'the lease expired'
      -- a wrong token is no failover, whatever the row's epoch says
      when r.token <> p_token then 'the token does not match the lease'
    end;
  if v_detail is not null then
    raise exception 'lease "%" (fence %) is no longer held', p_name, p_fence
      using errcode = 'LH003', detail = v_detail,
            hint = 'Roll back: another holder may be running. Do not retry the write under this lease.';
  end if;
  -- Not lost as far as this server knows, only unconfirmed since a failover. The DETAIL's
  -- first words are part of the contract: clients recognise this case by them, renew, and
  -- run the transaction again.
  raise exception 'lease "%" (fence %) is no longer held', p_name, p_fence
    using errcode = 'LH003',
          detail = format('a database failover happened since the lease was last confirmed (epoch %s, now %s): '
                          'renew it, or roll back if it is lost', r.epoch, leasehold.epoch()),
          hint = 'Roll back, renew the lease (leasehold.renew) and run the transaction again; if the renewal fails, the lease is lost.';
end $$;

-- force_release: for operators. Frees the lease whoever holds it and bumps the fence, so the
-- old holder's fenced writes fail. Waits for an open fenced transaction to end (FOR UPDATE):
-- once it returns, no write under the old fence can commit.
create function leasehold.force_release(p_name text)
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
  update leasehold.leases l
     set token = null, expires_at = null, holder_key = null, released_at = now(),
         fence = leasehold.next_fence(l.fence)
   where l.name = p_name
  returning l.* into r;
  return query select old.token is not null, old.holder, old.fence, r.fence;
end $$;

-- register_liveness: run once on the holder's dedicated session. Takes a session-level
-- advisory lock on a fresh random key and returns it; pass the key to acquire. When the
-- session ends (process killed, connection lost) the lock goes, and so does every lease
-- recorded with that key. Keys are non-negative so lease_status can match pg_locks.
create function leasehold.register_liveness() returns bigint
language plpgsql volatile as $$
declare
  k bigint;
begin
  loop
    k := floor(random() * 9.2e18)::bigint;
    if pg_try_advisory_lock(k) then
      return k;
    end if;
  end loop;
end $$;

-- lease_status: every lease, for people and dashboards (not for the claim path: it reads
-- pg_locks to show whether each holder's liveness session is still there).
create view leasehold.lease_status as
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
            else exists (
              select 1 from pg_locks k
               where k.locktype = 'advisory' and k.objsubid = 1 and k.granted
                 and k.database = (select oid from pg_database where datname = current_database())
                 and k.mode = 'ExclusiveLock'
                 and ((k.classid::bigint << 32) | k.objid::bigint) = l.holder_key)
       end as holder_alive,
       l.last_slot,
       l.released_at,
       l.epoch,
       -- the liveness session's advisory lock key (visible in pg_locks anyway), so a dashboard
       -- can group leases by worker without reading the table
       l.holder_key
  from leasehold.leases l;
