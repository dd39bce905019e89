-- leasehold schema version 28: complete install script.
-- Generated from the migrations in sql/ (leasehold migrate --dry-run prints it for a database).
-- Apply it in ONE transaction, as the role that is to own the schema (not a superuser if you can):
--   psql --single-transaction -v ON_ERROR_STOP=1 -f this-file.sql
-- or as one migration of Flyway, Liquibase, Alembic (op.execute) or Django (RunSQL).
-- Afterwards grant your application roles access: see docs/security.md (leasehold grant --print).

select pg_advisory_xact_lock(7810756276994469740);

create schema if not exists leasehold;
create table if not exists leasehold.migrations (
  version    integer primary key,
  name       text not null,
  breaking   boolean not null default false,
  applied_at timestamptz not null default now()
);

do $$ begin
  if (select coalesce(max(version), 0) from leasehold.migrations) <> 0 then
    raise exception 'this script upgrades the leasehold schema from version 0 to 28, but the database is at version %',
      (select coalesce(max(version), 0) from leasehold.migrations);
  end if;
end $$;

-- 0001_leases
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

insert into leasehold.migrations (version, name, breaking) values (1, '0001_leases', false);

-- 0002_scheduler
-- leasehold migration 0002: scheduled jobs, batched slot claims and run history.
--
-- A job's lease row (leasehold.leases, name = job name) carries last_slot: the newest
-- scheduled occurrence anyone claimed. claim_slots() claims many jobs' slots in one call with
-- a fixed number of set-based statements, whatever the number of jobs, and records each skip
-- once per (job, slot) however many workers notice it.

create table leasehold.jobs (
  name             text primary key,
  schedule         text not null,
  timezone         text,
  interval_ms      bigint,
  ttl_ms           bigint not null,
  overlap          text not null,
  catch_up         text not null,
  registered_by    text not null,
  registered_at    timestamptz not null default now()
);
comment on table leasehold.jobs is 'The latest definition of each scheduled job, as registered by a worker.';

create table leasehold.runs (
  id          bigserial primary key,
  job         text not null,
  slot        timestamptz not null,
  fence       bigint not null,
  holder      text not null,
  started_at  timestamptz not null default now(),
  finished_at timestamptz,
  outcome     text not null default 'running'
              check (outcome in ('running', 'succeeded', 'failed', 'lost', 'aborted')),
  error       text,
  attempts    integer not null default 1
);
create unique index runs_job_fence on leasehold.runs (job, fence);
create index runs_job_started on leasehold.runs (job, started_at desc);
create index runs_running on leasehold.runs (job) where outcome = 'running';

create table leasehold.skips (
  job          text not null,
  slot         timestamptz not null,
  holder       text,
  holder_fence bigint,
  holder_slot  timestamptz,
  held_for     interval,
  recorded_by  text not null,
  recorded_at  timestamptz not null default now(),
  primary key (job, slot)
);

create table leasehold.missed (
  job         text not null,
  slot        timestamptz not null,
  reason      text not null,
  recorded_by text not null,
  recorded_at timestamptz not null default now(),
  primary key (job, slot)
);

-- Windows (from_time, to_time] of database time that a forward step of the database clock
-- jumped over, as the workers that noticed it measured them. Slots inside never existed in
-- real time: record_missed() does not record them, whichever worker (started before or after
-- the step) asks. Kept as long as the history (prune_history) and at most 1,000 windows.
create table leasehold.clock_steps (
  id          bigint generated always as identity primary key,
  from_time   timestamptz not null,
  to_time     timestamptz not null check (to_time > from_time),
  recorded_by text not null,
  recorded_at timestamptz not null default now()
);

-- Slots waiting for the running one to finish (overlap policies buffer-one and buffer-all).
create table leasehold.buffered (
  job         text not null,
  slot        timestamptz not null,
  buffered_at timestamptz not null default now(),
  primary key (job, slot)
);

-- register_jobs: upserts job definitions and makes sure each has a lease row. Returns each
-- job's last claimed slot, so a starting worker can apply its catch-up policy. When a job's
-- schedule or timezone changes, its last slot moves up to now(): the slots between the old
-- schedule's last run and now never existed, so they are neither caught up nor recorded missed.
create function leasehold.register_jobs(
  p_names text[], p_schedules text[], p_timezones text[], p_interval_ms bigint[], p_ttl_ms bigint[],
  p_overlaps text[], p_catch_ups text[], p_holder text
) returns table (name text, last_slot timestamptz, database_time timestamptz)
language plpgsql volatile as $$
#variable_conflict use_column
begin
  perform leasehold.check_name(n) from unnest(p_names) as n;
  insert into leasehold.leases (name) select n from unnest(p_names) as n on conflict do nothing;
  update leasehold.leases l
     set last_slot = greatest(l.last_slot, now())
    from unnest(p_names, p_schedules, p_timezones) as i(name, schedule, timezone)
    join leasehold.jobs j on j.name = i.name
   where l.name = i.name and l.last_slot is not null
     and (j.schedule, j.timezone) is distinct from (i.schedule, i.timezone);
  insert into leasehold.jobs as j (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
  select * , p_holder from unnest(p_names, p_schedules, p_timezones, p_interval_ms, p_ttl_ms, p_overlaps, p_catch_ups)
  on conflict (name) do update
     set schedule = excluded.schedule, timezone = excluded.timezone, interval_ms = excluded.interval_ms,
         ttl_ms = excluded.ttl_ms, overlap = excluded.overlap, catch_up = excluded.catch_up,
         registered_by = excluded.registered_by, registered_at = now()
   where (j.schedule, j.timezone, j.interval_ms, j.ttl_ms, j.overlap, j.catch_up)
         is distinct from (excluded.schedule, excluded.timezone, excluded.interval_ms, excluded.ttl_ms, excluded.overlap, excluded.catch_up);
  return query select l.name, l.last_slot, now() from leasehold.leases l where l.name = any (p_names);
end $$;

-- claim_slots: claims the given (job, slot) pairs for p_holder in one call.
--
-- p_modes: 'exclusive' (skip / buffer policies: only a free lease), 'replace' (take it from a
-- running holder: its token changes, so its renewals and fenced writes fail) or 'allow' (no
-- exclusivity: only the slot guard and a new fence). p_buffer_caps: how many skipped slots
-- to keep for later (0 skip, 1 buffer-one, n buffer-all). A job with buffered slots claims its
-- oldest buffered slot first and buffers the new one, so buffered slots run in order.
--
-- Every claim needs slot > last_slot and slot <= now(): each occurrence is claimed at most
-- once across all workers, and a worker whose clock runs ahead cannot claim early.
--
-- Returns one row per input job: claimed or the reason not, the holder that blocked it, and
-- whether this call recorded the skip (exactly one caller does per slot).
create function leasehold.claim_slots(
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
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
begin
  perform leasehold.check_holder(p_holder);
  -- the same bounds as acquire: a caller must not hold a job for a century
  perform leasehold.check_ttl(t) from unnest(p_ttls) as t;
  perform leasehold.pin_synchronous_commit();

  -- 1. Claim. Rows are locked in random order with SKIP LOCKED, so workers claiming the same
  --    tick share the jobs instead of queueing behind one another.
  return query
  with input as materialized (
    select i.job, i.slot, i.ttl, i.mode, i.cap,
           (select min(b.slot) from leasehold.buffered b
             where b.job = i.job
               and b.slot > coalesce((select l.last_slot from leasehold.leases l where l.name = i.job), '-infinity')
           ) as buffered_slot
      from unnest(p_jobs, p_slots, p_ttls, p_modes, p_buffer_caps) as i(job, slot, ttl, mode, cap)
  ),
  wanted as (
    select i.*, least(i.slot, coalesce(i.buffered_slot, i.slot)) as claim_slot from input i
  ),
  candidates as (
    select l.name, l.last_slot as previous_slot, l.token as previous_token, w.claim_slot, w.ttl, w.mode
      from leasehold.leases l
      join wanted w on w.job = l.name
     where w.claim_slot <= now()
       and (l.last_slot is null or w.claim_slot > l.last_slot)
       -- under overlap 'skip' a recorded skip is final: a late tick, a retry or a catch-up
       -- claim must not run the slot after its holder releases
       and not (w.mode = 'exclusive' and w.cap = 0
                and exists (select 1 from leasehold.skips k where k.job = w.job and k.slot = w.claim_slot))
       and (w.mode in ('replace', 'allow') or leasehold.is_free(l))
     order by random()
       for update of l skip locked
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
      from candidates c
     where l.name = c.name
    returning l.name, c.claim_slot, c.mode, c.previous_slot, c.previous_token, l.token, l.fence, l.expires_at
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
    select w.job, w.slot from wanted w join claimed c on c.name = w.job
     where w.claim_slot < w.slot
       and (select count(*) from leasehold.buffered b where b.job = w.job and b.slot > w.claim_slot) < w.cap
    on conflict do nothing
  )
  select c.name, c.claim_slot, true, 'claimed'::text, case when c.mode = 'allow' then null else c.token end,
         c.fence, case when c.mode = 'allow' then null else c.expires_at end, c.previous_slot,
         p_holder, null::bigint, null::timestamptz, null::timestamptz, false, false, now(),
         c.mode <> 'allow' and c.previous_token is not null
    from claimed c;

  -- 2. Everything not claimed above: say why, record a real skip once per slot, buffer it
  --    if the policy says so. Lease rows claimed by step 1 are the ones this transaction
  --    wrote (xmin = our transaction id): an O(1) test per row. (Call claim_slots in a
  --    transaction of its own, as the client does; inside a savepoint the test misses and the
  --    claimed jobs are reported a second time, as slot-taken.)
  return query
  with input as (
    select i.job, i.slot, i.mode, i.cap
      from unnest(p_jobs, p_slots, p_modes, p_buffer_caps) as i(job, slot, mode, cap)
  ),
  pending as (
    select i.*, l.holder as l_holder, l.fence as l_fence, l.last_slot as l_last_slot,
           l.acquired_at as l_acquired_at, l.expires_at as l_expires_at,
           case
             when l.name is null then 'unknown-job'
             when i.slot > now() then 'slot-not-due'
             when l.last_slot is not null and i.slot <= l.last_slot then 'slot-taken'
             when i.mode = 'exclusive' and i.cap = 0
                  and exists (select 1 from leasehold.skips k where k.job = i.job and k.slot = i.slot) then 'slot-skipped'
             -- replace and allow only fail on a row lock: a transient state, not a skip
             when i.mode in ('replace', 'allow') then 'holder-committing'
             when not leasehold.is_free(l) then 'held'
             else 'holder-committing'
           end as why
      from input i
      left join leasehold.leases l on l.name = i.job
     where l.xmin is distinct from xid(pg_current_xact_id_if_assigned())
  ),
  skipped as (
    insert into leasehold.skips (job, slot, holder, holder_fence, holder_slot, held_for, recorded_by)
    select p.job, p.slot, p.l_holder, p.l_fence, p.l_last_slot, now() - p.l_acquired_at, p_holder
      from pending p where p.why = 'held'
    on conflict do nothing
    returning skips.job, skips.slot
  ),
  buffering as (
    insert into leasehold.buffered (job, slot)
    select p.job, p.slot from pending p
     where p.why = 'held' and p.cap > 0
       and (select count(*) from leasehold.buffered b where b.job = p.job) < p.cap
    on conflict do nothing
    returning buffered.job, buffered.slot
  )
  select p.job, p.slot, false, p.why, null::uuid, null::bigint, null::timestamptz, null::timestamptz,
         p.l_holder, p.l_fence, p.l_last_slot, p.l_acquired_at,
         exists (select 1 from skipped s where s.job = p.job and s.slot = p.slot),
         exists (select 1 from buffering b where b.job = p.job and b.slot = p.slot),
         now(), false
    from pending p;
end $$;

-- finish_run: records a run's outcome and, for a leased run, releases the lease (only for the
-- matching token). Returns the oldest buffered slot of the job, which the caller should claim
-- at once (buffer policies start the next slot as soon as the holder releases).
create function leasehold.finish_run(
  p_job text, p_fence bigint, p_token uuid, p_outcome text, p_error text default null, p_attempts integer default 1
) returns table (recorded boolean, released boolean, next_buffered_slot timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v_recorded boolean;
  v_released boolean := false;
begin
  perform leasehold.pin_synchronous_commit();
  if p_outcome not in ('succeeded', 'failed', 'lost', 'aborted') then
    raise exception 'outcome must be succeeded, failed, lost or aborted (got %)', p_outcome using errcode = '22023';
  end if;
  update leasehold.runs r
     set outcome = p_outcome, finished_at = now(), error = left(p_error, 4000), attempts = p_attempts
   where r.job = p_job and r.fence = p_fence and r.outcome = 'running';
  v_recorded := found;
  if p_token is not null then
    v_released := leasehold.release(p_job, p_token);
  end if;
  -- buffered slots at or before the last claimed one can never be claimed: drop them
  delete from leasehold.buffered b
   using leasehold.leases l
   where b.job = p_job and l.name = p_job and b.slot <= l.last_slot;
  return query select v_recorded, v_released,
    (select min(b.slot) from leasehold.buffered b where b.job = p_job);
end $$;

-- finish_runs: finish_run for many runs in one statement (a worker batches the runs that end
-- at about the same moment). Returns, per job, whether the run was recorded and released and
-- the job's oldest buffered slot.
create function leasehold.finish_runs(
  p_jobs text[], p_fences bigint[], p_tokens uuid[], p_outcomes text[], p_errors text[], p_attempts integer[]
) returns table (job text, fence bigint, recorded boolean, released boolean, next_buffered_slot timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
begin
  perform leasehold.pin_synchronous_commit();
  if exists (select 1 from unnest(p_outcomes) o where o not in ('succeeded', 'failed', 'lost', 'aborted')) then
    raise exception 'outcome must be succeeded, failed, lost or aborted' using errcode = '22023';
  end if;
  return query
  with input as materialized (
    select * from unnest(p_jobs, p_fences, p_tokens, p_outcomes, p_errors, p_attempts)
      as i(job, fence, token, outcome, error, attempts)
  ),
  recorded as (
    update leasehold.runs r
       set outcome = i.outcome, finished_at = now(), error = left(i.error, 4000), attempts = i.attempts
      from input i
     where r.job = i.job and r.fence = i.fence and r.outcome = 'running'
    returning r.job, r.fence
  ),
  released as (
    update leasehold.leases l
       set token = null, expires_at = null, holder_key = null, released_at = now()
      from input i
     where i.token is not null and l.name = i.job and l.token = i.token
    returning l.name, l.last_slot
  ),
  stale_buffers as (
    delete from leasehold.buffered b using leasehold.leases l, input i
     where b.job = i.job and l.name = i.job and b.slot <= l.last_slot
    returning b.job, b.slot
  )
  select i.job, i.fence,
         exists (select 1 from recorded r where r.job = i.job and r.fence = i.fence),
         exists (select 1 from released x where x.name = i.job),
         (select min(b.slot) from leasehold.buffered b
           where b.job = i.job
             and b.slot > coalesce((select l.last_slot from leasehold.leases l where l.name = i.job), '-infinity')
             and not exists (select 1 from stale_buffers s where s.job = b.job and s.slot = b.slot))
    from input i;
end $$;

-- enqueue_slots: queues slots to run in order, one at a time, as soon as the lease is free
-- (catch-up policy { all: n }). Slots at or before the last claimed one are ignored.
create function leasehold.enqueue_slots(p_job text, p_slots timestamptz[]) returns integer
language sql volatile as $$
  with inserted as (
    insert into leasehold.buffered (job, slot)
    select p_job, s from unnest(p_slots) as s
     where s > coalesce((select l.last_slot from leasehold.leases l where l.name = p_job), '-infinity')
    on conflict do nothing
    returning 1
  )
  select count(*)::integer from inserted;
$$;

-- record_clock_step: a forward step of the database clock jumped from p_from to p_to (database
-- times, as the caller measured them). Overlapping windows merge into one, so a fleet of
-- workers noticing the same step stores one window. Returns true if a new window was stored.
create function leasehold.record_clock_step(p_from timestamptz, p_to timestamptz, p_holder text)
returns boolean
language plpgsql volatile as $$
begin
  if p_from is null or p_to is null or not isfinite(p_from) or not isfinite(p_to) or p_to <= p_from then
    raise exception 'leasehold: a clock step window needs finite times with from < to (got % .. %)', p_from, p_to
      using errcode = '22023';
  end if;
  perform leasehold.check_holder(p_holder);
  -- one writer at a time, so that concurrent reports of the same step merge instead of racing
  perform pg_advisory_xact_lock(7308604897068083571);
  update leasehold.clock_steps
     set from_time = least(from_time, p_from), to_time = greatest(to_time, p_to)
   where from_time <= p_to and p_from <= to_time;
  if found then
    return false;
  end if;
  insert into leasehold.clock_steps (from_time, to_time, recorded_by) values (p_from, p_to, p_holder);
  -- bounded: the oldest windows go (their slots are long recorded or pruned)
  delete from leasehold.clock_steps
   where id <= (select id from leasehold.clock_steps order by id desc offset 1000 limit 1);
  return true;
end $$;

-- record_missed: slots no worker ran (downtime beyond the catch-up policy), once each.
-- Slots that were skipped (a skip row exists) or ran are not missed, nor are slots inside a
-- window a forward database clock step jumped over (they never existed).
create function leasehold.record_missed(p_job text, p_slots timestamptz[], p_reason text, p_holder text)
returns integer
language sql volatile as $$
  with inserted as (
    insert into leasehold.missed (job, slot, reason, recorded_by)
    select p_job, s, p_reason, p_holder from unnest(p_slots) as s
     where not exists (select 1 from leasehold.skips k where k.job = p_job and k.slot = s)
       and not exists (select 1 from leasehold.runs r where r.job = p_job and r.slot = s)
       and not exists (select 1 from leasehold.clock_steps w where s > w.from_time and s <= w.to_time)
    on conflict do nothing
    returning 1
  )
  select count(*)::integer from inserted;
$$;

-- prune_history: deletes finished runs, skips and missed slots older than p_keep. Returns the
-- number of rows deleted. Safe to call from every worker: only one prunes at a time.
create function leasehold.prune_history(p_keep interval) returns bigint
language plpgsql volatile as $$
declare
  n bigint := 0;
  c bigint;
begin
  if not pg_try_advisory_xact_lock(7308604897068083570) then
    return 0;
  end if;
  delete from leasehold.runs where outcome <> 'running' and finished_at < now() - p_keep;
  get diagnostics c = row_count; n := n + c;
  delete from leasehold.skips where recorded_at < now() - p_keep;
  get diagnostics c = row_count; n := n + c;
  delete from leasehold.missed where recorded_at < now() - p_keep;
  get diagnostics c = row_count; n := n + c;
  delete from leasehold.clock_steps where recorded_at < now() - p_keep;
  get diagnostics c = row_count; n := n + c;
  return n;
end $$;

-- run_history: runs, skips and missed slots of every job in one timeline. A skipped slot that
-- was buffered and ran later has outcome 'buffered' (and a run row of its own).
--   select * from leasehold.run_history where job = 'nightly-report' limit 20;
create view leasehold.run_history as
select job, slot, 'run' as kind, outcome, fence, holder, started_at as at, finished_at,
       extract(epoch from finished_at - started_at)::double precision as duration_seconds, error as detail
  from leasehold.runs
union all
select k.job, k.slot, 'skip', case when ran.fence is null then 'skipped' else 'buffered' end,
       k.holder_fence, k.holder, k.recorded_at, null, null,
       -- a lease taken without a slot (leasehold exec, run(), psql) has none to name
       format('held by %s (fence %s%s) for %ss%s', k.holder, k.holder_fence,
              coalesce(', slot ' || to_char(k.holder_slot at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), ''),
              round(extract(epoch from k.held_for)::numeric, 1),
              case when ran.fence is null then '' else format('; buffered, ran later (fence %s)', ran.fence) end)
  from leasehold.skips k
  left join lateral (select r.fence from leasehold.runs r where r.job = k.job and r.slot = k.slot limit 1) ran on true
union all
select job, slot, 'missed', 'missed', null, null, recorded_at, null, null, reason
  from leasehold.missed;

insert into leasehold.migrations (version, name, breaking) values (2, '0002_scheduler', false);

-- 0003_job_status
-- leasehold migration 0003: job_status, the operator's view of every scheduled job.
--
-- One row per registered job: its schedule, who holds its lease and for how long, the last
-- run and its outcome, run durations over the last 24 hours against the interval (a job whose
-- p95 duration creeps toward its interval is about to start skipping), and skips and missed
-- slots in the last 24 hours.
create view leasehold.job_status as
with recent as (
  select job,
         percentile_cont(0.5) within group (order by extract(epoch from finished_at - started_at)) as p50,
         percentile_cont(0.95) within group (order by extract(epoch from finished_at - started_at)) as p95,
         count(*) as runs,
         count(*) filter (where outcome = 'failed') as failed,
         count(*) filter (where outcome = 'lost') as lost
    from leasehold.runs
   where finished_at is not null and started_at > now() - interval '24 hours'
   group by job
),
last_run as (
  select distinct on (job) job, slot, outcome, started_at, finished_at, error, holder
    from leasehold.runs
   order by job, started_at desc
),
skips as (
  select job, count(*) as n from leasehold.skips where recorded_at > now() - interval '24 hours' group by job
),
missed as (
  select job, count(*) as n from leasehold.missed where recorded_at > now() - interval '24 hours' group by job
)
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
  left join last_run r on r.job = j.name
  left join recent rc on rc.job = j.name
  left join skips s on s.job = j.name
  left join missed m on m.job = j.name;

comment on view leasehold.job_status is
  'One row per scheduled job: lease holder, last run, p50/p95 duration and their ratio to the interval over 24 h, skips and missed slots over 24 h.';

insert into leasehold.migrations (version, name, breaking) values (3, '0003_job_status', false);

-- 0004_exec
-- leasehold migration 0004: history for runs that are not scheduled by a leasehold worker
-- (`leasehold exec` under system cron, a Kubernetes CronJob, a CI schedule; or any client that
-- takes a plain lease and wants it in the history).

-- register_external_job: makes a job visible in job_status without a schedule leasehold runs.
create function leasehold.register_external_job(p_name text, p_interval_ms bigint, p_ttl_ms bigint, p_holder text)
returns void
language sql volatile as $$
  insert into leasehold.jobs as j (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
  values (p_name, 'external', null, p_interval_ms, p_ttl_ms, 'skip', 'none', p_holder)
  on conflict (name) do update
     set interval_ms = coalesce(excluded.interval_ms, j.interval_ms), ttl_ms = excluded.ttl_ms
   where j.schedule = 'external';
$$;

-- start_run: records a run under a lease the caller holds, checked by assert_lease (name, token
-- and fence match an unexpired lease confirmed in the current epoch; LH003 otherwise). The slot
-- is the database's now() unless given.
create function leasehold.start_run(p_name text, p_token uuid, p_fence bigint, p_slot timestamptz default null)
returns timestamptz
language plpgsql volatile as $$
declare
  v_slot timestamptz := coalesce(p_slot, now());
  v_holder text;
begin
  perform leasehold.assert_lease(p_name, p_token, p_fence);
  select l.holder into v_holder from leasehold.leases l where l.name = p_name;
  insert into leasehold.runs (job, slot, fence, holder) values (p_name, v_slot, p_fence, v_holder)
  on conflict (job, fence) do nothing;
  return v_slot;
end $$;

-- record_skip: records that a caller declined to run `p_name` because it was held, naming the
-- holder as leasehold.acquire reported it. One row per (job, slot); returns false if the slot
-- already had one.
create function leasehold.record_skip(p_name text, p_recorded_by text, p_slot timestamptz default null)
returns boolean
language sql volatile as $$
  with inserted as (
    insert into leasehold.skips (job, slot, holder, holder_fence, holder_slot, held_for, recorded_by)
    select l.name, coalesce(p_slot, now()), l.holder, l.fence, l.last_slot, now() - l.acquired_at, p_recorded_by
      from leasehold.leases l where l.name = p_name
    on conflict do nothing
    returning 1
  )
  select exists (select 1 from inserted);
$$;

-- finish_held_run: finish_run for a run started with start_run, checking the lease first. A run
-- whose lease was force-released, expired or taken over before it finished is recorded 'lost'
-- (whatever the caller saw: a command can finish between two heartbeats without noticing),
-- so the history never shows a success that was not exclusive. With p_release (the default) it
-- also releases the lease, as finish_run does. Returns the recorded outcome.
create function leasehold.finish_held_run(
  p_name text, p_fence bigint, p_token uuid, p_outcome text, p_error text default null, p_release boolean default true
)
returns table (outcome text, recorded boolean, released boolean)
language plpgsql volatile
set lock_timeout = '2s'
as $$
declare
  v_held boolean;
  v_outcome text := p_outcome;
  v_error text := p_error;
  f record;
begin
  -- the row lock keeps the lease as it is seen here until finish_run releases it
  select l.token = p_token and l.fence = p_fence and l.expires_at > now() into v_held
    from leasehold.leases l where l.name = p_name for update;
  if not coalesce(v_held, false) and p_outcome in ('succeeded', 'failed') then
    v_outcome := 'lost';
    v_error := concat_ws('; ', 'the lease was no longer held when the run finished (released by force, expired or taken over)', p_error);
  end if;
  select * into f from leasehold.finish_run(p_name, p_fence, case when p_release then p_token end, v_outcome, v_error);
  return query select v_outcome, f.recorded, f.released;
end $$;

insert into leasehold.migrations (version, name, breaking) values (4, '0004_exec', false);

-- 0005_privileges
-- leasehold migration 0005: the privilege model (see docs/security.md).
--
-- Every function of the schema runs with its owner's rights (SECURITY DEFINER) and a pinned
-- search_path (pg_catalog first, then leasehold, pg_temp last), so that
--   * an application role needs no privilege on the tables: it cannot read another holder's
--     token, change a fence or write a lease row except through the functions;
--   * objects that others may create in their own schemas (an operator public.*, a function
--     shadowing a built-in) are never picked up by the protocol.
-- Nothing is executable or readable by PUBLIC. Deployments grant one of three levels to their
-- roles (leasehold.access says which object belongs to which level):
--   reader    dashboards and metrics: the views (no tokens), schema_version()
--   client    reader + taking leases, fenced writes, running scheduled jobs and `leasehold exec`
--   operator  reader + force_release and prune_history
-- secure_schema() applies all of this generically; the migration runner (and the install
-- script) call it after every migration, so a function added later is covered too.

create table leasehold.access (
  object text primary key,
  level  text not null check (level in ('reader', 'client', 'operator', 'owner'))
);
comment on table leasehold.access is
  'Which level may use each function, view or table of the schema (owner: nobody but the schema owner).';

insert into leasehold.access (object, level) values
  ('schema_version', 'reader'), ('breaking_since', 'reader'), ('holder_gone', 'reader'),
  ('check_name', 'reader'), ('check_ttl', 'reader'), ('check_holder', 'reader'),
  ('lease_status', 'reader'), ('job_status', 'reader'), ('run_history', 'reader'),
  -- history tables (no tokens) that the timeline of `leasehold runs` and the dashboard read
  ('runs', 'reader'), ('skips', 'reader'), ('missed', 'reader'), ('clock_steps', 'reader'),
  -- job definitions (schedules, no secrets), for the dashboard's paging and next-run times
  ('jobs', 'reader'), ('check_characters', 'reader'),
  -- lease_status calls incarnation(); a view's function calls are checked against its reader
  ('epoch', 'reader'), ('incarnation', 'reader'),
  ('acquire', 'client'), ('renew', 'client'), ('release', 'client'), ('assert_lease', 'client'),
  ('holds_lease', 'client'), ('register_liveness', 'client'), ('register_jobs', 'client'),
  ('claim_slots', 'client'), ('finish_run', 'client'), ('finish_runs', 'client'),
  ('enqueue_slots', 'client'), ('record_missed', 'client'), ('register_external_job', 'client'),
  ('start_run', 'client'), ('record_skip', 'client'), ('finish_held_run', 'client'),
  ('record_clock_step', 'client'),
  ('force_release', 'operator'), ('prune_history', 'operator'),
  -- internal steps of the protocol functions, never called directly
  ('next_fence', 'owner'), ('is_free', 'owner'), ('confirm', 'owner'), ('pin_synchronous_commit', 'owner'),
  ('liveness_incarnation', 'owner'),
  ('secure_schema', 'owner'), ('grant_statements', 'owner'), ('grant_access', 'owner'),
  ('revoke_access', 'owner');

-- Roles granted a level through grant_access(); secure_schema() grants them what later
-- migrations add, so an upgrade never takes a working role's access away.
create table leasehold.grants (
  role       text not null,
  level      text not null check (level in ('reader', 'client', 'operator')),
  granted_at timestamptz not null default now(),
  primary key (role, level)
);

-- schema_version: the installed version, for every level (clients check it at start without
-- reading leasehold.migrations).
create function leasehold.schema_version() returns integer
language sql stable as $$
  select coalesce(max(version), 0)::integer from leasehold.migrations;
$$;

-- breaking_since: whether a migration newer than p_version changed the SQL contract. A client
-- that knows p_version may run against a newer schema when this is false (rolling deploys).
create function leasehold.breaking_since(p_version integer) returns boolean
language sql stable as $$
  select coalesce(bool_or(breaking), false) from leasehold.migrations where version > p_version;
$$;

-- grant_statements: the exact statements that give p_role the level p_level (client and
-- operator include reader). Changes nothing.
create function leasehold.grant_statements(p_role text, p_level text) returns setof text
language plpgsql stable as $$
begin
  if p_level is null or p_level not in ('reader', 'client', 'operator') then
    raise exception 'level must be reader, client or operator (got %)', coalesce(p_level, 'null')
      using errcode = '22023';
  end if;
  if p_role is null or p_role = '' or lower(p_role) = 'public' then
    raise exception 'name a role (not PUBLIC) to grant leasehold access to' using errcode = '22023';
  end if;
  return next format('grant usage on schema leasehold to %I', p_role);
  return query
    select format('grant execute on function leasehold.%I(%s) to %I',
                  p.proname, pg_get_function_identity_arguments(p.oid), p_role)
      from pg_proc p
      join leasehold.access a on a.object = p.proname
     where p.pronamespace = 'leasehold'::regnamespace and a.level in ('reader', p_level)
     order by a.level desc, p.proname, 1;
  return query
    select format('grant select on table leasehold.%I to %I', c.relname, p_role)
      from pg_class c
      join leasehold.access a on a.object = c.relname
     where c.relnamespace = 'leasehold'::regnamespace and c.relkind in ('r', 'v', 'm')
       and a.level in ('reader', p_level)
     order by c.relname;
end $$;

-- grant_access: applies grant_statements and remembers the role, so that later migrations
-- extend its grants. Returns the statements it ran.
create function leasehold.grant_access(p_role text, p_level text) returns setof text
language plpgsql volatile as $$
declare
  s text;
begin
  if to_regrole(quote_ident(p_role)) is null then
    raise exception 'role "%" does not exist', p_role
      using errcode = '42704', hint = 'Create it first, e.g. create role ... login password ''...''.';
  end if;
  for s in select * from leasehold.grant_statements(p_role, p_level) loop
    execute s;
    return next s;
  end loop;
  insert into leasehold.grants (role, level) values (p_role, p_level) on conflict do nothing;
end $$;

-- revoke_access: takes the level away (and everything else in the schema), then grants the
-- role's remaining levels again. Returns the number of levels left.
create function leasehold.revoke_access(p_role text, p_level text) returns integer
language plpgsql volatile as $$
declare
  s text;
  n integer := 0;
  r record;
begin
  if to_regrole(quote_ident(p_role)) is null then
    raise exception 'role "%" does not exist', p_role using errcode = '42704';
  end if;
  delete from leasehold.grants g where g.role = p_role and g.level = p_level;
  execute format('revoke all on all routines in schema leasehold from %I', p_role);
  execute format('revoke all on all tables in schema leasehold from %I', p_role);
  execute format('revoke all on schema leasehold from %I', p_role);
  for r in select g.level from leasehold.grants g where g.role = p_role loop
    n := n + 1;
    for s in select * from leasehold.grant_statements(p_role, r.level) loop
      execute s;
    end loop;
  end loop;
  return n;
end $$;

-- secure_schema: the generic pass, idempotent. Run after every migration.
create function leasehold.secure_schema() returns void
language plpgsql volatile as $$
declare
  f record;
  r record;
  s text;
begin
  -- Only the owner may create objects in the schema: a function or operator planted here
  -- would be found by every pinned search_path.
  revoke all on schema leasehold from public;
  for r in select a.grantee::regrole::text as grantee
             from pg_namespace n, aclexplode(n.nspacl) a
            where n.nspname = 'leasehold' and a.privilege_type = 'CREATE'
              and a.grantee <> n.nspowner and a.grantee <> 0 loop
    execute format('revoke create on schema leasehold from %s', r.grantee);
  end loop;
  for f in select p.proname, pg_get_function_identity_arguments(p.oid) as args
             from pg_proc p
            where p.pronamespace = 'leasehold'::regnamespace and p.prokind in ('f', 'p') loop
    execute format('alter routine leasehold.%I(%s) security definer set search_path = pg_catalog, leasehold, pg_temp',
                   f.proname, f.args);
  end loop;
  revoke all on all routines in schema leasehold from public;
  revoke all on all tables in schema leasehold from public;
  revoke all on all sequences in schema leasehold from public;
  for r in select g.role, g.level from leasehold.grants g where to_regrole(quote_ident(g.role)) is not null loop
    for s in select * from leasehold.grant_statements(r.role, r.level) loop
      execute s;
    end loop;
  end loop;
end $$;

insert into leasehold.migrations (version, name, breaking) values (5, '0005_privileges', false);

-- 0006_contract
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

insert into leasehold.migrations (version, name, breaking) values (6, '0006_contract', false);

-- 0007_renew_batch
-- leasehold migration 0007: renewing many leases with one statement.
--
-- A client that holds many leases (a worker running thousands of short jobs) renews them all
-- in one round trip per heartbeat instead of one statement per lease. The renewal rule itself
-- stays in leasehold.renew: this function only calls it once per element, in order.

-- lease_renewal: one element of a batch renewal: the lease, our token, the new ttl.
create type leasehold.lease_renewal as (name text, token uuid, ttl interval);

-- renew_leases: leasehold.renew for each element, in one statement (one transaction, one
-- now()). One row per element, in the order given, with the element's name; an element that
-- was not renewed is reported (renewed false, with renew's reason), not raised. Argument
-- errors (LH001, LH002) and a lock timeout (55P03) fail the whole statement: nothing is renewed.
create function leasehold.renew_leases(p_leases leasehold.lease_renewal[])
returns table (name text, renewed boolean, expires_at timestamptz, fence bigint, reason text, database_time timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  e leasehold.lease_renewal;
begin
  if p_leases is null then
    return;
  end if;
  foreach e in array p_leases loop
    return query select e.name, r.renewed, r.expires_at, r.fence, r.reason, r.database_time
                   from leasehold.renew(e.name, e.token, e.ttl) r;
  end loop;
end $$;

insert into leasehold.access (object, level) values ('renew_leases', 'client');

-- grant_statements (0005) printed argument types as they read on its own pinned search_path,
-- which includes this schema: renew_leases' argument came out as a bare lease_renewal[], and
-- that GRANT fails when run elsewhere (`leasehold grant --print`). The same statements, with
-- the argument types of this schema qualified (pg_catalog's types read as before).
create or replace function leasehold.grant_statements(p_role text, p_level text) returns setof text
language plpgsql stable as $$
begin
  if p_level is null or p_level not in ('reader', 'client', 'operator') then
    raise exception 'level must be reader, client or operator (got %)', coalesce(p_level, 'null')
      using errcode = '22023';
  end if;
  if p_role is null or p_role = '' or lower(p_role) = 'public' then
    raise exception 'name a role (not PUBLIC) to grant leasehold access to' using errcode = '22023';
  end if;
  -- local to this call: the function's own search_path comes back when it returns
  perform set_config('search_path', 'pg_catalog, pg_temp', true);
  return next format('grant usage on schema leasehold to %I', p_role);
  return query
    select format('grant execute on function leasehold.%I(%s) to %I',
                  p.proname, pg_get_function_identity_arguments(p.oid), p_role)
      from pg_proc p
      join leasehold.access a on a.object = p.proname
     where p.pronamespace = 'leasehold'::regnamespace and a.level in ('reader', p_level)
     order by a.level desc, p.proname, 1;
  return query
    select format('grant select on table leasehold.%I to %I', c.relname, p_role)
      from pg_class c
      join leasehold.access a on a.object = c.relname
     where c.relnamespace = 'leasehold'::regnamespace and c.relkind in ('r', 'v', 'm')
       and a.level in ('reader', p_level)
     order by c.relname;
end $$;

insert into leasehold.migrations (version, name, breaking) values (7, '0007_renew_batch', false);

-- 0008_reads
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

insert into leasehold.migrations (version, name, breaking) values (8, '0008_reads', false);

-- 0009_tick
-- leasehold migration 0009: a claim that answers only what the caller must act on.
--
-- Additive. claim_due() is claim() with the same arguments, the same decisions (taken by
-- claim() itself, under the lease row locks) and the same row type, but it leaves out the rows
-- that need nothing from the caller: a slot another worker already claimed ('slot-taken'), a
-- slot whose skip is final ('slot-skipped'), and a held job whose skip another caller recorded
-- ('held' with skip_recorded false). Workers that each send every due job therefore get back
-- about their own share of the rows instead of every row, and a second pass over jobs other
-- workers claimed costs almost nothing to transfer. Nothing about exactly-once changes: which
-- worker may run a slot is still decided by claim() alone.
--
-- And claim() itself asks for the epoch and the holder's liveness incarnation once per call
-- instead of once per claimed row: both are the same for the whole call, and per row they cost
-- a WAL position and a read of pg_locks each (about 0.8 ms a row, measured with auto_explain
-- on a 250-job claim: 229 of its 260 ms). The rules stay single-sourced: next_fence() is now
-- fence_after() with the current epoch, and claim() calls fence_after() with the epoch it read.
-- A slot another worker already claimed is passed over before is_free() is asked about it
-- (1,000 such slots: 482 ms before, most of it is_free() reading pg_locks per row).

-- fence_after: the fence that follows p_old in epoch p_epoch (the rule of next_fence).
create function leasehold.fence_after(p_old bigint, p_epoch integer) returns bigint
language sql immutable as $$
  select greatest(coalesce(p_old, 0) + 1, (p_epoch - 1)::bigint << 40);
$$;

create or replace function leasehold.next_fence(p_old bigint) returns bigint
language sql volatile as $$
  select leasehold.fence_after(p_old, leasehold.epoch());
$$;

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
  -- the same for every row of this call: asked once, not once per claimed row (each asks
  -- pg_current_wal_lsn(), and the liveness check reads pg_locks)
  v_epoch integer := leasehold.epoch();
  v_incarnation text := leasehold.liveness_incarnation(p_holder_key);
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
         -- cheap and necessary (a claim slot is never after the slot asked for), so that a
         -- slot a peer already claimed costs no is_free() (a read of pg_locks per row)
         and (l.last_slot is null or (w.claim).slot > l.last_slot)
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

create function leasehold.claim_due(
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
    from leasehold.claim(p_claims, p_holder, p_holder_key) c
   where c.claimed
      or c.reason not in ('slot-taken', 'slot-skipped', 'held')
      or c.skip_recorded
      or c.buffered;
$$;

insert into leasehold.access (object, level) values ('claim_due', 'client'), ('fence_after', 'owner');

insert into leasehold.migrations (version, name, breaking) values (9, '0009_tick', false);

-- 0010_actions
-- leasehold migration 0010: who did what to a job.
--
-- Additive. Schedules defined at run time, pauses and resumes, manual runs and backfills are
-- acts of an application or a person, not steps of the protocol. Each is recorded once, here,
-- by the function that performs it, in the same transaction: with the name the caller gave
-- (p_by: 'alice', 'billing-api') and the login role that called it, which the caller cannot
-- choose (session_user: the functions run as their owner once secure_schema() has run, so
-- current_user would name the owner).

create table leasehold.actions (
  id       bigint generated always as identity primary key,
  at       timestamptz not null default now(),
  action   text not null,
  job      text,
  actor    text not null,
  db_role  text not null default session_user,
  detail   jsonb not null default '{}'::jsonb
);
comment on table leasehold.actions is
  'Acts on jobs by applications and operators (defined, removed, paused, resumed, run now, backfill): who, when, what.';
create index actions_job_at on leasehold.actions (job, at desc);
create index actions_at_brin on leasehold.actions using brin (at) with (pages_per_range = 32);

-- record_action: one row per act. p_by is checked like a holder name (1-200 characters, no
-- control or invisible characters): it ends up in logs and on the dashboard.
create function leasehold.record_action(p_action text, p_job text, p_by text, p_detail jsonb default '{}'::jsonb)
returns bigint
language plpgsql volatile as $$
declare
  v_id bigint;
begin
  perform leasehold.check_holder(p_by);
  insert into leasehold.actions (action, job, actor, detail)
  values (p_action, p_job, p_by, coalesce(p_detail, '{}'::jsonb))
  returning id into v_id;
  return v_id;
end $$;

insert into leasehold.access (object, level) values
  ('actions', 'reader'),
  -- a step of the functions that perform the acts, never called directly
  ('record_action', 'owner');

insert into leasehold.migrations (version, name, breaking) values (10, '0010_actions', false);

-- 0011_schedules
-- leasehold migration 0011: schedules defined at run time, and pause/resume.
--
-- Additive. A job was a row of leasehold.jobs that a worker registered from its code. Now an
-- application may also define jobs as data (define_schedule / remove_schedule: a handler name
-- and a JSON payload next to the schedule) and an operator may pause and resume any job.
--
-- * Every change of a jobs row takes the next value of leasehold.job_revisions (a trigger, so
--   register_jobs' writes count too). schedule_changes(after) is one range of the unique index
--   on revision: a worker asks once per poll for what changed since the last revision it saw.
--   Writers of leasehold.jobs take one transaction-level advisory lock before they draw a
--   revision, so revisions become visible in the order they were drawn: a reader that saw
--   revision n never later finds a committed n-1 it skipped.
-- * Removal leaves a tombstone (removed_at), so that the workers that run the job hear of it.
-- * A name belongs to code or to data. define_schedule refuses a name a worker registered from
--   code; a worker that registers a code job under the name of a data job takes the name over
--   (the row becomes a code job, the feed tells the other workers to drop the data job).
-- * The claim is refused in the database for a paused or removed job: the mark is on the lease
--   row itself (leases.suspended), which claim() locks FOR UPDATE, so a pause that committed
--   before a claim locked the row is seen by it (READ COMMITTED re-checks the locked row's
--   newest version), and a pause waits for a claim that locked the row first.

create sequence leasehold.job_revisions;

alter table leasehold.jobs
  add column source text not null default 'code' check (source in ('code', 'data')),
  add column handler text,
  add column payload jsonb,
  add column defined_by text,
  add column buffer_limit integer,
  add column starting_deadline_ms bigint,
  -- stored for the per-run timeout and jitter options; null: none
  add column timeout_ms bigint check (timeout_ms > 0),
  add column jitter_ms bigint check (jitter_ms > 0),
  add column removed_at timestamptz,
  add column paused_at timestamptz,
  add column paused_by text,
  add column pause_reason text,
  add column revision bigint not null default nextval('leasehold.job_revisions');
create unique index jobs_revision on leasehold.jobs (revision);

-- null: claimable; 'paused' or 'removed': claim() refuses every slot of the job
alter table leasehold.leases add column suspended text check (suspended in ('paused', 'removed'));

-- The writers of this migration say so; any other write of leasehold.jobs is register_jobs (or
-- register_external_job): a code job's registration.
create function leasehold.jobs_revision() returns trigger
language plpgsql volatile as $$
begin
  perform pg_advisory_xact_lock(7308604897068083572);
  if current_setting('leasehold.job_writer', true) is distinct from 'schedules' then
    if tg_op = 'UPDATE' and old.source = 'data' then
      -- a code job takes the name over: it is claimable again unless paused
      update leasehold.leases l set suspended = case when old.paused_at is null then null else 'paused' end
       where l.name = new.name;
    end if;
    new.source := 'code';
    new.handler := null;
    new.payload := null;
    new.defined_by := null;
    new.removed_at := null;
  end if;
  new.revision := nextval('leasehold.job_revisions');
  return new;
end $$;

create trigger jobs_revision before insert or update on leasehold.jobs
  for each row execute function leasehold.jobs_revision();

-- check_schedule_field: raises LH005 naming the field when p_ok is not true.
create function leasehold.check_schedule_field(p_ok boolean, p_field text, p_message text) returns void
language plpgsql immutable as $$
begin
  if p_ok is not true then
    raise exception '%: %', p_field, p_message using errcode = 'LH005',
      hint = 'Define schedules through the client (control.define) or see docs/sql-api.md for the bounds.';
  end if;
end $$;

-- define_schedule: creates or changes a job defined as data. Upsert by name; a definition equal
-- to the stored one changes nothing (no new revision, no action recorded). A changed schedule or
-- timezone applies from the next slot (the slots between never existed), as in register_jobs.
create function leasehold.define_schedule(
  p_name text, p_handler text, p_by text,
  p_cron text default null, p_every interval default null, p_timezone text default null,
  p_payload jsonb default null, p_ttl interval default null,
  p_overlap text default null, p_catch_up text default null, p_buffer_limit integer default 10,
  p_starting_deadline interval default null, p_timeout interval default null, p_jitter interval default null
) returns table (name text, revision bigint, created boolean, changed boolean)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v_old leasehold.jobs;
  -- the defaults of a code job (null: the default), so that a caller may pass null for any
  v_payload jsonb := coalesce(p_payload, '{}'::jsonb);
  v_ttl interval := coalesce(p_ttl, interval '30 seconds');
  v_overlap text := coalesce(p_overlap, 'skip');
  v_catch_up text := coalesce(p_catch_up, 'latest');
  v_cron text := btrim(p_cron);
  v_every_ms bigint := (extract(epoch from p_every) * 1000)::bigint;
  v_schedule text;
  v_interval_ms bigint;
  v_deadline_ms bigint := (extract(epoch from p_starting_deadline) * 1000)::bigint;
  v_row leasehold.jobs;
begin
  perform leasehold.check_name(p_name);
  perform leasehold.check_holder(p_by);
  perform leasehold.check_schedule_field(p_handler is not null and char_length(p_handler) between 1 and 200
    and leasehold.check_characters(p_handler) is null, 'handler', 'must be 1-200 characters without control or invisible characters');
  perform leasehold.check_schedule_field((v_cron is null) <> (p_every is null), 'schedule', 'give exactly one of cron and every');
  if v_cron is not null then
    perform leasehold.check_schedule_field(char_length(v_cron) between 9 and 200
      and array_length(regexp_split_to_array(v_cron, '\s+'), 1) in (5, 6)
      and v_cron ~ '^[0-9A-Za-z*/,?#\-\s]+$', 'cron', format('must be 5 fields (or 6 with seconds first) of digits, names and * / , - ? # L W (got %L)', left(v_cron, 200)));
    if p_timezone is not null then
      perform leasehold.check_schedule_field(p_timezone ~ '^[A-Za-z][A-Za-z0-9_+\-/]{0,63}$', 'timezone', format('must be an IANA timezone name (got %L)', left(p_timezone, 64)));
      begin
        perform now() at time zone p_timezone;
      exception when others then
        perform leasehold.check_schedule_field(false, 'timezone', format('unknown timezone %L', p_timezone));
      end;
    end if;
    v_schedule := v_cron;
    v_interval_ms := null;
  else
    perform leasehold.check_schedule_field(p_timezone is null, 'timezone', 'applies to cron schedules only');
    perform leasehold.check_schedule_field(v_every_ms between 1000 and 366::bigint * 86400000
      and p_every = v_every_ms * interval '1 millisecond', 'every', 'must be a whole number of milliseconds from 1 second to 366 days');
    -- as the client writes it: 1h30m, 90s is 1m30s
    v_schedule := concat(nullif(v_every_ms / 86400000, 0) || 'd', nullif(v_every_ms / 3600000 % 24, 0) || 'h',
                         nullif(v_every_ms / 60000 % 60, 0) || 'm', nullif(v_every_ms / 1000 % 60, 0) || 's',
                         nullif(v_every_ms % 1000, 0) || 'ms');
    v_interval_ms := v_every_ms;
  end if;
  perform leasehold.check_ttl(v_ttl);
  perform leasehold.check_schedule_field(v_ttl >= interval '300 milliseconds', 'ttl', 'must be at least 300ms for a scheduled job: heartbeats run every ttl/3');
  perform leasehold.check_schedule_field(v_overlap in ('skip', 'buffer-one', 'buffer-all', 'replace', 'allow'), 'overlap', 'must be one of skip, buffer-one, buffer-all, replace, allow');
  perform leasehold.check_schedule_field(v_catch_up in ('latest', 'none')
    or (v_catch_up ~ '^all:[0-9]{1,4}$' and substr(v_catch_up, 5)::integer between 1 and 1000), 'catch_up', 'must be latest, none or all:N with N from 1 to 1000');
  perform leasehold.check_schedule_field(p_buffer_limit between 1 and 1000, 'buffer_limit', 'must be from 1 to 1000');
  perform leasehold.check_schedule_field(p_starting_deadline is null or (v_deadline_ms between 1 and 366::bigint * 86400000), 'starting_deadline', 'must be from 1 millisecond to 366 days');
  perform leasehold.check_schedule_field(p_timeout is null or (p_timeout > interval '0' and p_timeout <= interval '366 days'), 'timeout', 'must be a positive interval of at most 366 days');
  perform leasehold.check_schedule_field(p_jitter is null or (p_jitter > interval '0' and p_jitter <= interval '1 day'), 'jitter', 'must be a positive interval of at most 1 day');
  perform leasehold.check_schedule_field(octet_length(v_payload::text) <= 65536, 'payload', format('must be JSON of at most 65536 bytes (got %s)', coalesce(octet_length(v_payload::text), 0)));

  perform set_config('leasehold.job_writer', 'schedules', true);
  insert into leasehold.leases (name) values (p_name) on conflict do nothing;
  select * into v_old from leasehold.jobs j where j.name = p_name for update;
  if found and v_old.source = 'code' then
    perform set_config('leasehold.job_writer', '', true);
    raise exception 'job "%" is defined in code (registered by %): a data schedule cannot take its name', p_name, v_old.registered_by
      using errcode = 'LH006', hint = 'Pick another name, or remove the job from the workers'' code first.';
  end if;
  if found and v_old.removed_at is null
     and (v_old.schedule, v_old.timezone, v_old.interval_ms, v_old.ttl_ms, v_old.overlap, v_old.catch_up, v_old.handler,
          v_old.payload, v_old.buffer_limit, v_old.starting_deadline_ms, v_old.timeout_ms, v_old.jitter_ms)
         is not distinct from
         (v_schedule, p_timezone, v_interval_ms, (extract(epoch from v_ttl) * 1000)::bigint, v_overlap, v_catch_up, p_handler,
          v_payload, p_buffer_limit, v_deadline_ms, (extract(epoch from p_timeout) * 1000)::bigint, (extract(epoch from p_jitter) * 1000)::bigint) then
    perform set_config('leasehold.job_writer', '', true);
    return query select p_name, v_old.revision, false, false;
    return;
  end if;
  -- a new schedule, a changed one, or one defined again after its removal: from the next slot on
  update leasehold.leases l
     set last_slot = greatest(l.last_slot, now()),
         suspended = case when v_old.paused_at is not null and v_old.removed_at is null then 'paused' else null end
   where l.name = p_name
     and (v_old.name is null or v_old.removed_at is not null
          or (v_old.schedule, v_old.timezone) is distinct from (v_schedule, p_timezone)
          or l.suspended = 'removed')
     and (l.last_slot is not null or l.suspended is not null);
  insert into leasehold.jobs as j (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by,
                                   source, handler, payload, defined_by, buffer_limit, starting_deadline_ms, timeout_ms, jitter_ms)
  values (p_name, v_schedule, p_timezone, v_interval_ms, (extract(epoch from v_ttl) * 1000)::bigint, v_overlap, v_catch_up, p_by,
          'data', p_handler, v_payload, p_by, p_buffer_limit, v_deadline_ms,
          (extract(epoch from p_timeout) * 1000)::bigint, (extract(epoch from p_jitter) * 1000)::bigint)
  on conflict on constraint jobs_pkey do update
     set schedule = excluded.schedule, timezone = excluded.timezone, interval_ms = excluded.interval_ms,
         ttl_ms = excluded.ttl_ms, overlap = excluded.overlap, catch_up = excluded.catch_up,
         registered_by = excluded.registered_by, registered_at = now(), handler = excluded.handler,
         payload = excluded.payload, defined_by = excluded.defined_by, buffer_limit = excluded.buffer_limit,
         starting_deadline_ms = excluded.starting_deadline_ms, timeout_ms = excluded.timeout_ms,
         jitter_ms = excluded.jitter_ms,
         -- defined again after removal: a new job, not paused
         paused_at = case when j.removed_at is null then j.paused_at end,
         paused_by = case when j.removed_at is null then j.paused_by end,
         pause_reason = case when j.removed_at is null then j.pause_reason end,
         removed_at = null
  returning j.* into v_row;
  perform set_config('leasehold.job_writer', '', true);
  perform leasehold.record_action(case when v_old.name is null or v_old.removed_at is not null then 'schedule-defined' else 'schedule-changed' end,
    p_name, p_by, jsonb_build_object('schedule', v_schedule, 'timezone', p_timezone, 'handler', p_handler,
      'overlap', v_overlap, 'catch_up', v_catch_up, 'ttl_ms', v_row.ttl_ms, 'revision', v_row.revision));
  return query select p_name, v_row.revision, v_old.name is null or v_old.removed_at is not null, true;
end $$;

-- remove_schedule: removes a data job (a tombstone the workers read). A run in progress is left
-- to finish under its lease. Returns false when there was nothing to remove.
create function leasehold.remove_schedule(p_name text, p_by text) returns boolean
language plpgsql volatile
set lock_timeout = '2s'
as $$
declare
  v_old leasehold.jobs;
begin
  perform leasehold.check_holder(p_by);
  select * into v_old from leasehold.jobs j where j.name = p_name for update;
  if not found or v_old.removed_at is not null then
    return false;
  end if;
  if v_old.source = 'code' then
    raise exception 'job "%" is defined in code (registered by %): remove it from the workers'' code', p_name, v_old.registered_by
      using errcode = 'LH006';
  end if;
  perform set_config('leasehold.job_writer', 'schedules', true);
  update leasehold.leases l set suspended = 'removed' where l.name = p_name;
  update leasehold.jobs j set removed_at = now() where j.name = p_name;
  perform set_config('leasehold.job_writer', '', true);
  delete from leasehold.buffered b where b.job = p_name;
  perform leasehold.record_action('schedule-removed', p_name, p_by, jsonb_build_object('handler', v_old.handler));
  return true;
end $$;

-- schedule_changes: the job rows changed after revision p_after_revision, oldest change first,
-- at most p_limit (1-10000) of them: one range of the index on revision. Code jobs come too
-- (their pause state); payloads only for the handlers named in p_handlers (null: all).
create function leasehold.schedule_changes(p_after_revision bigint, p_handlers text[], p_limit integer default 1000)
returns table (
  revision bigint, name text, source text, handler text, removed boolean,
  schedule text, timezone text, interval_ms bigint, ttl_ms bigint, overlap text, catch_up text,
  buffer_limit integer, starting_deadline_ms bigint, timeout_ms bigint, jitter_ms bigint, payload jsonb,
  paused_at timestamptz, paused_by text, pause_reason text, last_slot timestamptz, database_time timestamptz
)
language sql stable as $$
  select j.revision, j.name, j.source, j.handler, j.removed_at is not null,
         j.schedule, j.timezone, j.interval_ms, j.ttl_ms, j.overlap, j.catch_up,
         j.buffer_limit, j.starting_deadline_ms, j.timeout_ms, j.jitter_ms,
         case when p_handlers is null or j.handler = any (p_handlers) then j.payload end,
         j.paused_at, j.paused_by, j.pause_reason,
         (select l.last_slot from leasehold.leases l where l.name = j.name), now()
    from leasehold.jobs j
   where j.revision > coalesce(p_after_revision, 0)
   order by j.revision
   limit greatest(1, least(coalesce(p_limit, 1000), 10000));
$$;

-- schedule_snapshot: what a starting worker needs of leasehold.jobs before it follows
-- schedule_changes(): the data jobs of the handlers p_handlers and the paused jobs (code jobs
-- that are not paused, other handlers' jobs and tombstones are none of its business: at 100,000
-- jobs a worker of one handler would otherwise read them all), after revision p_after_revision
-- in revision order, at most p_limit. The caller reads the newest revision of the table first
-- and follows schedule_changes() from it: a change made meanwhile is read twice, never missed.
create function leasehold.schedule_snapshot(p_handlers text[], p_after_revision bigint default 0, p_limit integer default 1000)
returns table (
  revision bigint, name text, source text, handler text, removed boolean,
  schedule text, timezone text, interval_ms bigint, ttl_ms bigint, overlap text, catch_up text,
  buffer_limit integer, starting_deadline_ms bigint, timeout_ms bigint, jitter_ms bigint, payload jsonb,
  paused_at timestamptz, paused_by text, pause_reason text, last_slot timestamptz, database_time timestamptz
)
language sql stable as $$
  select j.revision, j.name, j.source, j.handler, false,
         j.schedule, j.timezone, j.interval_ms, j.ttl_ms, j.overlap, j.catch_up,
         j.buffer_limit, j.starting_deadline_ms, j.timeout_ms, j.jitter_ms,
         case when j.handler = any (p_handlers) then j.payload end,
         j.paused_at, j.paused_by, j.pause_reason,
         (select l.last_slot from leasehold.leases l where l.name = j.name), now()
    from leasehold.jobs j
   where j.revision > coalesce(p_after_revision, 0) and j.removed_at is null
     and ((j.source = 'data' and j.handler = any (p_handlers)) or j.paused_at is not null)
   order by j.revision
   limit greatest(1, least(coalesce(p_limit, 1000), 10000));
$$;

-- pause_job: no slot of the job is claimed until resume_job. The lease's last_slot stays where
-- it is, so the pause is downtime on purpose: on resume the workers apply the job's catch-up
-- policy and record the slots that do not run as missed ('paused'). With p_stop_running the run
-- in progress loses its lease (its token no longer holds: heartbeats and fenced writes fail)
-- and is recorded aborted; otherwise it finishes.
create function leasehold.pause_job(p_name text, p_by text, p_reason text default null, p_stop_running boolean default false)
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
    perform from leasehold.force_release(p_name);
    update leasehold.runs r
       set outcome = 'aborted', finished_at = now(), error = left('stopped: paused by ' || p_by || coalesce(' (' || p_reason || ')', ''), 4000)
     where r.job = p_name and r.outcome = 'running';
  end if;
  perform leasehold.record_action('paused', p_name, p_by, jsonb_build_object('reason', p_reason, 'stop_running', p_stop_running,
    'stopped_holder', case when p_stop_running then v_lease.holder end, 'already_paused', v_job.paused_at is not null));
  return query select true, v_job.paused_at is not null,
    case when p_stop_running and v_lease.token is not null then v_lease.holder end,
    case when p_stop_running and v_lease.token is not null then v_lease.fence end;
end $$;

-- resume_job: the job's slots are claimed again; workers apply its catch-up policy.
create function leasehold.resume_job(p_name text, p_by text)
returns table (resumed boolean, paused_at timestamptz, paused_by text)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v_job leasehold.jobs;
begin
  perform leasehold.check_holder(p_by);
  select * into v_job from leasehold.jobs j where j.name = p_name and j.removed_at is null for update;
  if not found then
    raise exception 'no job named "%"', p_name using errcode = 'LH006';
  end if;
  if v_job.paused_at is null then
    return query select false, null::timestamptz, null::text;
    return;
  end if;
  update leasehold.leases l set suspended = null where l.name = p_name and l.suspended = 'paused';
  perform set_config('leasehold.job_writer', 'schedules', true);
  update leasehold.jobs j set paused_at = null, paused_by = null, pause_reason = null where j.name = p_name;
  perform set_config('leasehold.job_writer', '', true);
  perform leasehold.record_action('resumed', p_name, p_by, jsonb_build_object('paused_at', v_job.paused_at, 'paused_by', v_job.paused_by));
  return query select true, v_job.paused_at, v_job.paused_by;
end $$;

-- claim: as in schema 9, and a paused or removed job's slot is never claimed (reason 'paused' or
-- 'removed'). Nothing is recorded for such a slot: last_slot does not move.
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
  -- the same for every row of this call: asked once, not once per claimed row (each asks
  -- pg_current_wal_lsn(), and the liveness check reads pg_locks)
  v_epoch integer := leasehold.epoch();
  v_incarnation text := leasehold.liveness_incarnation(p_holder_key);
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
                       and b.slot > coalesce((select l2.last_slot from leasehold.leases l2 where l2.name = c.job), '-infinity')
                       -- a queued catch-up slot whose skip is final (overlap 'skip') never runs:
                       -- it must not stand in front of the later slots for ever
                       and not (c.mode = 'exclusive' and c.buffer_cap = 0
                                and exists (select 1 from leasehold.skips k where k.job = b.job and k.slot = b.slot))),
                   c.slot)) as claim_slot
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
         and (w.mode in ('replace', 'allow') or leasehold.is_free(l))
         -- paused or removed (schema 11): checked on the locked row's newest version
         and l.suspended is null
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

insert into leasehold.access (object, level) values
  ('job_revisions', 'owner'), ('jobs_revision', 'owner'), ('check_schedule_field', 'owner'),
  ('define_schedule', 'client'), ('remove_schedule', 'client'), ('schedule_changes', 'client'), ('schedule_snapshot', 'client'),
  ('pause_job', 'operator'), ('resume_job', 'operator');

-- job_status: as in schema 8, without removed data jobs, with state 'paused' for a paused job
-- whose lease is not held (a run left running shows 'running'), and six columns at the end:
-- source ('code' or 'data'), handler, who paused the job, when and why, and timed_out_24h (runs
-- that outlived their job's timeout, schema 13: a failure like failed and lost).
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
      from leasehold.runs x
     where x.job = j.name and x.finished_at is not null and x.started_at > now() - interval '24 hours'
  ) rc on true
  left join lateral (
    select count(*) as n from leasehold.skips x where x.job = j.name and x.recorded_at > now() - interval '24 hours'
  ) s on true
  left join lateral (
    select count(*) as n from leasehold.missed x where x.job = j.name and x.recorded_at > now() - interval '24 hours'
  ) m on true
 where j.removed_at is null;

insert into leasehold.migrations (version, name, breaking) values (11, '0011_schedules', false);

-- 0012_manual_runs
-- leasehold migration 0012: run now and backfill.
--
-- Additive. An operator asks for an extra occurrence of a job (run_now) or for the occurrences
-- of a past range (request_backfill); each ask is one row of leasehold.run_requests, and the
-- workers that have a handler for the job take them with claim_requests(), under the lease row
-- lock, by the same rules as a scheduled slot (is_free, fence_after, the takeover bookkeeping of
-- claim()). A request never moves the lease's last_slot: the scheduled slot due at the same
-- moment is still claimed by claim(), which stays as it is.
--
-- What a request does while a run holds the lease follows the job's overlap policy:
--   run now   skip: recorded skipped, naming the holder; buffer-one: the oldest pending run-now
--             waits for the lease, later ones are skipped; buffer-all: every one waits, in
--             order; replace: takes the lease over; allow: runs alongside, without a lease.
--   backfill  always waits for a free lease, one slot at a time in slot order (a backfill is
--             catch-up work: it neither skips nor replaces); under allow (no lease) a job's
--             next backfill slot starts when no backfill run of the job is still running on a
--             live worker.

alter table leasehold.runs
  add column trigger text not null default 'schedule' check (trigger in ('schedule', 'manual', 'backfill')),
  add column requested_by text,
  add column request_id bigint;

create table leasehold.run_requests (
  id            bigint generated always as identity primary key,
  job           text not null,
  kind          text not null check (kind in ('manual', 'backfill')),
  -- backfill: the scheduled slot to run; run now: the moment it was asked for (database time)
  slot          timestamptz not null,
  requested_by  text not null,
  requested_at  timestamptz not null default now(),
  -- pending until a worker decides; claimed: a run started (its outcome is in leasehold.runs,
  -- under (job, fence)); skipped: held under overlap skip (or buffer-one's second)
  state         text not null default 'pending' check (state in ('pending', 'claimed', 'skipped')),
  decided_at    timestamptz,
  decided_by    text,
  holder_key    bigint,
  fence         bigint,
  skip_holder   text,
  skip_fence    bigint
);
comment on table leasehold.run_requests is
  'Run-now and backfill requests: who asked, when, and what became of each (pending, claimed with its fence, skipped naming the holder).';
-- each backfill slot is requested at most once, however many operators ask at the same time
create unique index run_requests_backfill_slot on leasehold.run_requests (job, slot) where kind = 'backfill';
-- the workers' check for work: an index over pending requests only, empty almost always
create index run_requests_pending on leasehold.run_requests (job, id) where state = 'pending';
create index run_requests_job_at on leasehold.run_requests (job, requested_at desc);

-- run_now: asks for one extra occurrence of p_job now; returns the request id. p_by names who
-- asked (checked like a holder name). The job must be defined (leasehold.jobs) and not removed;
-- a paused job may be run now (an operator's explicit act; its schedule stays paused).
create function leasehold.run_now(p_job text, p_by text) returns bigint
language plpgsql volatile as $$
declare
  v_id bigint;
begin
  perform leasehold.check_holder(p_by);
  if not exists (select 1 from leasehold.jobs j where j.name = p_job and j.removed_at is null) then
    raise exception 'no job named "%"', left(p_job, 200)
      using errcode = 'P0002', hint = 'leasehold status lists the jobs; a job exists once a worker registered it.';
  end if;
  insert into leasehold.run_requests (job, kind, slot, requested_by)
  values (p_job, 'manual', now(), p_by)
  returning id into v_id;
  perform leasehold.record_action('run-now', p_job, p_by, jsonb_build_object('request', v_id));
  return v_id;
end $$;

-- request_backfill: one backfill request per slot of p_slots (1 to 1,000 slots, none in the
-- future). A slot already requested by an earlier or concurrent backfill is not requested
-- again (unique index, ON CONFLICT DO NOTHING). Returns the slots this call requested.
create function leasehold.request_backfill(p_job text, p_slots timestamptz[], p_by text)
returns table (request_id bigint, slot timestamptz)
language plpgsql volatile as $$
#variable_conflict use_column
declare
  v_count integer := coalesce(cardinality(p_slots), 0);
  v_created integer;
begin
  perform leasehold.check_holder(p_by);
  if not exists (select 1 from leasehold.jobs j where j.name = p_job and j.removed_at is null) then
    raise exception 'no job named "%"', left(p_job, 200)
      using errcode = 'P0002', hint = 'leasehold status lists the jobs; a job exists once a worker registered it.';
  end if;
  if v_count < 1 or v_count > 1000 then
    raise exception 'a backfill requests 1 to 1000 slots (got %)', v_count using errcode = '22023';
  end if;
  if exists (select 1 from unnest(p_slots) s where s is null or not isfinite(s) or s > now()) then
    raise exception 'backfill slots must be past times (now is %)', now() using errcode = '22023';
  end if;
  return query
  with created as (
    insert into leasehold.run_requests as q (job, kind, slot, requested_by)
    select distinct p_job, 'backfill', s, p_by from unnest(p_slots) s
    on conflict (job, slot) where kind = 'backfill' do nothing
    returning q.id, q.slot
  )
  select c.id, c.slot from created c order by c.slot;
  get diagnostics v_created = row_count;
  perform leasehold.record_action('backfill', p_job, p_by, jsonb_build_object(
    'from', (select min(s) from unnest(p_slots) s), 'to', (select max(s) from unnest(p_slots) s),
    'slots', v_count, 'requested', v_created));
end $$;

-- claim_requests: a worker takes pending requests of the jobs it has handlers for (p_jobs),
-- at most p_limit, at most one per job per call (a job's requests go one at a time: run-now
-- requests first, by id; then backfill slots in slot order). Each is decided under the job's
-- lease row lock (FOR UPDATE SKIP LOCKED: a row another worker is deciding is left for the
-- next call). Rows come back for what this call decided: claimed (run it: token, fence,
-- expires_at as claim() gives them) or skipped (holder and holder_fence name the holder).
-- A call with nothing pending reads one small partial index and writes nothing.
create function leasehold.claim_requests(
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
           holder_incarnation = case when v_mode = 'allow' then x.holder_incarnation else v_incarnation end
     where x.name = v.job
    returning x.token, x.expires_at into v_token, v_expires;
    insert into leasehold.runs (job, slot, fence, holder, trigger, requested_by, request_id)
    values (v.job, v.slot, v_fence, p_holder, v.kind, v.requested_by, v.id);
    -- a run still 'running' under an older fence lost its lease to this one (as in claim())
    if v_mode <> 'allow' then
      update leasehold.runs r
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

-- run_request_status: each request with what became of it. state 'done' once its run ended
-- (outcome, error and times from leasehold.runs).
create view leasehold.run_request_status as
select q.id, q.job, q.kind, q.slot, q.requested_by, q.requested_at,
       case when q.state = 'claimed' and r.outcome is distinct from 'running' then 'done' else q.state end as state,
       q.decided_at, q.decided_by, q.fence, r.outcome, r.started_at, r.finished_at, r.error,
       q.skip_holder, q.skip_fence
  from leasehold.run_requests q
  left join leasehold.runs r on r.job = q.job and r.fence = q.fence;

-- run_history gains what triggered each run and who asked; a skipped run-now is a skip entry.
-- (A skip's "ran later" lookup matches scheduled runs only: a manual run's slot is a moment.)
create or replace view leasehold.run_history as
select job, slot, 'run' as kind, outcome, fence, holder, started_at as at, finished_at,
       extract(epoch from finished_at - started_at)::double precision as duration_seconds, error as detail,
       trigger, requested_by
  from leasehold.runs
union all
select k.job, k.slot, 'skip', case when ran.fence is null then 'skipped' else 'buffered' end,
       k.holder_fence, k.holder, k.recorded_at, null, null,
       -- a lease taken without a slot (leasehold exec, run(), psql) has none to name
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

insert into leasehold.access (object, level) values
  ('run_requests', 'reader'), ('run_request_status', 'reader'),
  ('run_now', 'operator'), ('request_backfill', 'operator'),
  ('claim_requests', 'client');

insert into leasehold.migrations (version, name, breaking) values (12, '0012_manual_runs', false);

-- 0013_run_timeout
-- leasehold migration 0013: per-run timeouts.
--
-- Additive. A job may have a timeout (jobs.timeout_ms): the most a run of it may last, counted
-- from the moment its lease was granted (leases.acquired_at, the claim's now()), retries
-- included. Once it has passed, the run's lease is no longer held for the purpose of fenced
-- writes: holds_lease() is false, so assert_lease() and start_run() refuse with LH003, whatever
-- the holding process does or fails to do (a paused or stuck process cannot commit after its
-- deadline). The lease row itself stays the holder's until the run is finished (or its TTL
-- runs out): no other run of the job starts while the timed-out one might still be writing
-- elsewhere. A run that ended this way is recorded with the new outcome 'timed-out'.
--
-- Code-defined jobs get their timeout into the row with set_job_timeouts(), which workers
-- call right after register_jobs() (whose signature SQL callers depend on, so it is left as
-- it is). A null timeout_ms means no timeout.

alter table leasehold.jobs add column if not exists timeout_ms bigint;

-- set_job_timeouts: sets (or, with null, clears) the timeout of each named job, as its latest
-- registration says. Names that are not registered are ignored. Returns the rows changed.
create function leasehold.set_job_timeouts(p_names text[], p_timeout_ms bigint[]) returns integer
language plpgsql volatile
set lock_timeout = '2s'
as $$
declare
  v_bad bigint;
  v_changed integer;
begin
  if coalesce(cardinality(p_names), 0) <> coalesce(cardinality(p_timeout_ms), 0) then
    raise exception 'set_job_timeouts needs as many timeouts as names (% names, % timeouts)',
      coalesce(cardinality(p_names), 0), coalesce(cardinality(p_timeout_ms), 0)
      using errcode = '22023';
  end if;
  -- the bounds of the client's `timeout` option: 1 ms to 366 days
  select t into v_bad from unnest(p_timeout_ms) t where t < 1 or t > 31622400000 limit 1;
  if found then
    raise exception 'a job timeout must be between 1 ms and 366 days (got % ms)', v_bad using errcode = '22023';
  end if;
  update leasehold.jobs j
     set timeout_ms = i.timeout_ms
    from unnest(p_names, p_timeout_ms) as i(name, timeout_ms)
   where j.name = i.name and j.timeout_ms is distinct from i.timeout_ms;
  get diagnostics v_changed = row_count;
  return v_changed;
end $$;

-- holds_lease: as in 0001, and a lease of a job with a timeout is not held once the timeout
-- has passed since the lease was granted.
create or replace function leasehold.holds_lease(p_name text, p_token uuid, p_fence bigint) returns boolean
language plpgsql volatile as $$
begin
  perform 1 from leasehold.leases l
   where l.name = p_name and l.token = p_token and l.fence = p_fence and l.expires_at > now()
     and l.epoch = leasehold.epoch()
     and not leasehold.run_timed_out(l.name, l.acquired_at)
     for key share of l;
  return found;
end $$;

-- run_timed_out: the deadline rule alone (holds_lease applies it; assert_lease names it in its
-- refusal): a run of job p_job whose lease was granted at p_acquired_at has outlived the job's
-- timeout.
create function leasehold.run_timed_out(p_job text, p_acquired_at timestamptz) returns boolean
language sql stable as $$
  select exists (
    select 1 from leasehold.jobs j
     where j.name = p_job and j.timeout_ms is not null
       and now() >= p_acquired_at + j.timeout_ms * interval '1 millisecond');
$$;

-- assert_lease: as in 0001, with the timeout named in the refusal (otherwise a timed-out lease,
-- unexpired and with a matching token, would be explained as unconfirmed since a failover, and
-- clients would renew it and try again).
create or replace function leasehold.assert_lease(p_name text, p_token uuid, p_fence bigint) returns bigint
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
      when leasehold.run_timed_out(r.name, r.acquired_at) then
        format('the run timed out: its job''s timeout of %s ms passed at %s',
               (select j.timeout_ms from leasehold.jobs j where j.name = r.name),
               r.acquired_at + (select j.timeout_ms from leasehold.jobs j where j.name = r.name) * interval '1 millisecond')
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

-- run_outcomes: as in 0006, with 'timed-out' (the run outlived its job's timeout) appended.
create or replace function leasehold.run_outcomes() returns text[]
language sql immutable as $$
  select array['running', 'succeeded', 'failed', 'lost', 'aborted', 'timed-out'];
$$;

insert into leasehold.access (object, level) values
  ('set_job_timeouts', 'client'),
  -- a step of holds_lease and assert_lease
  ('run_timed_out', 'owner');

insert into leasehold.migrations (version, name, breaking) values (13, '0013_run_timeout', false);

-- 0014_summary
-- leasehold migration 0014: a fleet summary that does not read a day of runs.
--
-- Additive. The dashboard's summary (and the metrics' fleet gauges) showed counts over the last
-- 24 hours: runs, failed and lost runs, and how many jobs' p95 duration creeps towards their
-- interval. At 100,000 jobs every 15 minutes that is ~10 million runs a day, and the summary
-- read all of them (26 s). Two small tables, kept by statement-level triggers on runs (one
-- aggregate per statement over its changed rows, whatever path wrote them: claim, finish,
-- exec, prune), let it answer from bounded reads, with the same numbers:
--   * run_counts: finished runs per minute of started_at, for the last 25 hours, in a ring of
--     1,500 buckets per shard (the shard is the writing backend's pid mod 64, so concurrent
--     finishing workers rarely wait on the same row; rows are taken in bucket order, so two
--     that do wait, never deadlock). runs in 24 h = the buckets wholly inside
--     the window + an exact count of the one partial minute at its old edge.
--   * slow_runs: per job, the latest start of a finished run that took at least half the job's
--     interval (at the time it finished). A job whose p95 over 24 h reaches a ratio >= 0.5 of
--     its interval has such a run in the window, so the summary computes the exact p95 only for
--     these jobs (usually none or few).
-- Failed, lost and timed-out counts use the partial index runs_failing (below; it replaces
-- 0008's runs_failed, which left out the timed-out runs of schema 13). TRUNCATE of runs is not
-- seen by the triggers: refresh_run_counts() rebuilds both tables from runs.

-- runs_failing: every failure outcome (a job whose runs all time out is failing), still a small
-- share of the runs; runs_failed is dropped once the wider index exists.
create index runs_failing on leasehold.runs (started_at desc) where outcome in ('failed', 'lost', 'timed-out');
drop index leasehold.runs_failed;

create table leasehold.run_counts (
  bucket  smallint not null check (bucket >= 0 and bucket < 1500),
  shard   smallint not null check (shard >= 0 and shard < 64),
  minute  bigint not null,   -- minutes since the epoch: floor(extract(epoch from started_at) / 60)
  runs    bigint not null,
  primary key (bucket, shard)
);
comment on table leasehold.run_counts is
  'Finished runs per minute of their start over the last 25 hours (a ring of 1,500 minutes per shard; sum the shards of a minute, ignore minutes outside the window).';

create table leasehold.slow_runs (
  job           text primary key,
  last_started  timestamptz not null
);
comment on table leasehold.slow_runs is
  'Per job, the latest start of a finished run that took at least half its interval: the only jobs whose p95 can creep.';

-- add_run_counts: adds signed per-minute counts to this backend's shard. Minutes older than
-- 25 hours are never read and are dropped; a bucket that still holds a minute 25 hours older
-- is taken over.
create function leasehold.add_run_counts(p_minutes bigint[], p_counts bigint[]) returns void
language sql volatile as $$
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

-- The triggers: one per event (a trigger with transition tables has one event). Each sums the
-- statement's changed rows by minute (added minus removed finished runs) in one aggregate.
create function leasehold.count_runs_inserted() returns trigger
language plpgsql volatile set jit = off as $$
begin
  perform leasehold.add_run_counts(array_agg(minute), array_agg(n))
     from (select floor(extract(epoch from started_at) / 60)::bigint as minute, count(*) as n
             from new_runs where finished_at is not null group by 1) d;
  perform leasehold.mark_slow_runs(array_agg(job), array_agg(started_at), array_agg(finished_at))
     from new_runs where finished_at is not null and finished_at - started_at >= interval '500 milliseconds';
  return null;
end $$;

create function leasehold.count_runs_updated() returns trigger
language plpgsql volatile set jit = off as $$
begin
  perform leasehold.add_run_counts(array_agg(minute), array_agg(n))
     from (select minute, sum(n)::bigint as n
             from (select floor(extract(epoch from started_at) / 60)::bigint as minute, 1 as n from new_runs where finished_at is not null
                   union all
                   select floor(extract(epoch from started_at) / 60)::bigint, -1 from old_runs where finished_at is not null) c
            group by 1) d;
  perform leasehold.mark_slow_runs(array_agg(job), array_agg(started_at), array_agg(finished_at))
     from new_runs where finished_at is not null and finished_at - started_at >= interval '500 milliseconds';
  return null;
end $$;

create function leasehold.count_runs_deleted() returns trigger
language plpgsql volatile set jit = off as $$
begin
  -- prune_history deletes old rows: only those of the last 25 hours change a count
  perform leasehold.add_run_counts(array_agg(minute), array_agg(-n))
     from (select floor(extract(epoch from started_at) / 60)::bigint as minute, count(*) as n
             from old_runs where finished_at is not null and started_at > now() - interval '25 hours' group by 1) d;
  return null;
end $$;

-- mark_slow_runs: the runs (>= 500 ms, the shortest interval's half) that took at least half
-- their job's interval. Nothing when there are none (the usual case: no join at all).
create function leasehold.mark_slow_runs(p_jobs text[], p_started timestamptz[], p_finished timestamptz[]) returns void
language sql volatile as $$
  insert into leasehold.slow_runs as s (job, last_started)
  select r.job, max(r.started_at)
    from unnest(p_jobs, p_started, p_finished) as r (job, started_at, finished_at)
    join leasehold.jobs j on j.name = r.job
   where p_jobs is not null and j.interval_ms > 0
     and extract(epoch from r.finished_at - r.started_at) * 1000 >= 0.5 * j.interval_ms
   group by r.job
  on conflict (job) do update set last_started = greatest(s.last_started, excluded.last_started);
$$;

create trigger runs_count_inserted after insert on leasehold.runs
  referencing new table as new_runs for each statement execute function leasehold.count_runs_inserted();
create trigger runs_count_updated after update on leasehold.runs
  referencing old table as old_runs new table as new_runs for each statement execute function leasehold.count_runs_updated();
create trigger runs_count_deleted after delete on leasehold.runs
  referencing old table as old_runs for each statement execute function leasehold.count_runs_deleted();

-- refresh_run_counts: rebuilds both tables from runs (after a TRUNCATE, or a restore). This
-- migration calls it once for the history already there.
create function leasehold.refresh_run_counts() returns void
language plpgsql volatile set jit = off as $$
begin
  lock table leasehold.run_counts, leasehold.slow_runs in exclusive mode;
  delete from leasehold.run_counts;
  delete from leasehold.slow_runs;
  insert into leasehold.run_counts (bucket, shard, minute, runs)
  select (minute % 1500)::smallint, 0, minute, n
    from (select floor(extract(epoch from started_at) / 60)::bigint as minute, count(*) as n
            from leasehold.runs
           where finished_at is not null and started_at > now() - interval '25 hours'
           group by 1) d;
  insert into leasehold.slow_runs (job, last_started)
  select r.job, max(r.started_at)
    from leasehold.runs r join leasehold.jobs j on j.name = r.job
   where r.finished_at is not null and r.started_at > now() - interval '25 hours' and j.interval_ms > 0
     and extract(epoch from r.finished_at - r.started_at) * 1000 >= 0.5 * j.interval_ms
   group by r.job;
end $$;

select leasehold.refresh_run_counts();

-- fleet_summary: the dashboard's summary counts over the last 24 hours, from the tables above
-- (bounded reads; see the top of this file). p_warn_ratio (>= 0.5): a job creeps when its p95
-- duration is at least that share of its interval, and is over when it is at least the interval.
create function leasehold.fleet_summary(p_warn_ratio double precision default 0.8)
returns table (
  jobs integer, running integer, expired integer, failing integer, creeping integer, over_interval integer,
  runs_24h bigint, failed_24h bigint, lost_24h bigint, skips_24h bigint, missed_24h bigint, timed_out_24h bigint
)
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
    select count(*) filter (where l.state = 'held') as held, count(*) filter (where l.state = 'expired') as expired
      from leasehold.jobs j join leasehold.lease_status l on l.name = j.name
  ),
  failures as (
    select count(distinct r.job) filter (where exists (select 1 from leasehold.jobs j where j.name = r.job)) as jobs,
           count(*) filter (where r.outcome = 'failed') as failed,
           count(*) filter (where r.outcome = 'lost') as lost,
           count(*) filter (where r.outcome = 'timed-out') as timed_out
      from leasehold.runs r
     where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at > v_since and r.finished_at is not null
  ),
  ratios as (
    select (select percentile_cont(0.95) within group (order by extract(epoch from r.finished_at - r.started_at))
              from leasehold.runs r
             where r.job = j.name and r.finished_at is not null and r.started_at > v_since) * 1000 / j.interval_ms as ratio
      from leasehold.slow_runs s join leasehold.jobs j on j.name = s.job
     where s.last_started > v_since and j.interval_ms > 0
  )
  select (select count(*) from leasehold.jobs)::integer,
         (select held from states)::integer,
         (select expired from states)::integer,
         (select f.jobs from failures f)::integer,
         (select count(*) from ratios where ratio >= p_warn_ratio and ratio < 1)::integer,
         (select count(*) from ratios where ratio >= 1)::integer,
         (select coalesce(sum(c.runs), 0) from leasehold.run_counts c where c.minute > v_edge)::bigint
           + (select count(*) from leasehold.runs r
               where r.started_at > v_since and r.started_at < to_timestamp((v_edge + 1) * 60) and r.finished_at is not null)::bigint,
         (select f.failed from failures f)::bigint,
         (select f.lost from failures f)::bigint,
         (select count(*) from leasehold.skips where recorded_at > v_since)::bigint,
         (select count(*) from leasehold.missed where recorded_at > v_since)::bigint,
         (select f.timed_out from failures f)::bigint;
end $$;

insert into leasehold.access (object, level) values
  ('fleet_summary', 'reader'),
  ('run_counts', 'reader'), ('slow_runs', 'reader'),
  ('refresh_run_counts', 'operator'),
  -- steps of the triggers on runs, never called directly
  ('add_run_counts', 'owner'), ('mark_slow_runs', 'owner'),
  ('count_runs_inserted', 'owner'), ('count_runs_updated', 'owner'), ('count_runs_deleted', 'owner');

insert into leasehold.migrations (version, name, breaking) values (14, '0014_summary', false);

-- 0015_claim_at_scale
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

insert into leasehold.migrations (version, name, breaking) values (15, '0015_claim_at_scale', false);

-- 0016_run_start_time
-- leasehold migration 0016: a run's started_at is when its lease was granted.
--
-- Additive; no function changes. Every path that starts a run (claim(), the run-now requests,
-- start_run() of exec) inserts its runs row without a started_at, so the column's
-- default decides it. That default was now(): the start of the claiming transaction, not the
-- moment the lease was granted. A claim that waited on the lease row while the previous holder
-- finished (its statement began first, its lock came after the release), or a claim inside a
-- transaction that began before the release, recorded a start before the previous run's
-- finished_at: history drew two runs of one job overlapping by a few milliseconds, which never
-- happened. clock_timestamp() is read when the row is inserted, after the lease row's lock is
-- held, so after the previous holder's release committed (on the same server clock).
-- Lease expiry keeps the transaction's now(): a lease's expires_at can only be earlier for it,
-- never later.
alter table leasehold.runs alter column started_at set default clock_timestamp();

insert into leasehold.migrations (version, name, breaking) values (16, '0016_run_start_time', false);

-- 0017_history_once
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

insert into leasehold.migrations (version, name, breaking) values (17, '0017_history_once', false);

-- 0018_fleet_status
-- leasehold migration 0018: the fleet's counts and the jobs needing attention first, in one
-- bounded function (what `leasehold status` shows).
--
-- Additive. fleet_status(p_limit) answers what src/observe/fleet-status.ts asked in one
-- statement until now, with the same counts, order and jobs: per reason (expired lease; failed,
-- lost or timed-out run; skipped slot; missed slot, each in the last 24 h) the jobs that have it
-- and that reason's latest time, then at most p_limit jobs, those needing attention first.
-- * Before, every flagged job was found once, and all of them were ranked together (distinct
--   on job, most urgent reason first) to count them and to pick the first p_limit: with every
--   one of 100,000 jobs flagged, a sort of all 200,000 (job, reason) pairs to keep 50 jobs.
-- * Now each reason is counted by its own aggregate (one row per job: the count is its rows),
--   and the page is filled reason by reason, most urgent first: a reason contributes its most
--   recent jobs, at most what is left of p_limit, leaving out the jobs of the more urgent
--   reasons (an anti-join). A reason is only looked at while the page is not full, and then
--   every job of the more urgent reasons is on the page already, so the anti-join is against
--   fewer than p_limit jobs and a job is listed once, under its most urgent reason. Each
--   reason's pick is a top-p_limit of its own rows, not a sort of all flagged jobs.
-- * jit = off: at 100,000 jobs the statement's estimated cost is above jit_above_cost, and
--   compiling the former statement cost 65-110 ms of it. Set on the function, it holds for
--   every caller, whatever the role's settings.
-- The figures of the listed jobs are job_status rows, read by the caller for these jobs only.

-- fleet_status: one row per listed job, in order (place 1, 2, ...): the job, why it is
-- listed first (attention: 'expired', 'failing', 'skipping', 'missing', or null for the jobs
-- that fill the page by name after the flagged ones) and that reason's latest time
-- (attention_at), with the fleet's counts on every row. When nothing is listed (no jobs), one
-- row of counts whose place, job, attention and attention_at are null. As before, a reason
-- counts and lists the names its history has, also those without a job_status row (a removed
-- job's failures): the caller joins job_status and leaves those out.
create function leasehold.fleet_status(p_limit integer)
returns table (
  place         integer,
  job           text,
  attention     text,
  attention_at  timestamptz,
  jobs          integer,
  running       integer,
  expired       integer,
  failing       integer,
  skipping      integer,
  missing       integer,
  leases        integer,
  leases_held   integer
)
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
  -- the leases that are not free or have no job, in one pass over the leases: every lease
  -- count, and the expired leases of jobs
  with leases_seen as materialized (
    select l.name, l.state, l.expires_at, j.name is not null as is_job
      from leasehold.lease_status l left join leasehold.jobs j on j.name = l.name
     where l.state <> 'free' or j.name is null
  ),
  -- each reason: one row per job that has it, with that reason's latest time
  expired_jobs as materialized (
    select l.name as job, l.expires_at as at from leases_seen l where l.is_job and l.state = 'expired'
  ),
  failing_jobs as materialized (
    select r.job, max(r.started_at) as at from leasehold.runs r
     where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at > v_since group by r.job
  ),
  skipping_jobs as materialized (
    select s.job, max(s.recorded_at) as at from leasehold.skips s where s.recorded_at > v_since group by s.job
  ),
  missing_jobs as materialized (
    select m.job, max(m.recorded_at) as at from leasehold.missed m where m.recorded_at > v_since group by m.job
  ),
  -- the page, reason by reason: a reason's most recent jobs (ties by name), as many as are
  -- left, without the jobs listed under a more urgent reason (all of them, when any room is
  -- left); a limit of 0 reads nothing
  page0 as materialized (
    select e.job, 0 as rank, e.at from expired_jobs e order by e.at desc, e.job limit p_limit
  ),
  page1 as materialized (
    select f.job, 1 as rank, f.at from failing_jobs f
     where not exists (select 1 from page0 p where p.job = f.job)
     order by f.at desc, f.job
     limit greatest(p_limit - (select count(*) from page0), 0)
  ),
  page2 as materialized (
    select s.job, 2 as rank, s.at from skipping_jobs s
     where not exists (select 1 from page0 p where p.job = s.job) and not exists (select 1 from page1 p where p.job = s.job)
     order by s.at desc, s.job
     limit greatest(p_limit - (select count(*) from page0) - (select count(*) from page1), 0)
  ),
  page3 as materialized (
    select m.job, 3 as rank, m.at from missing_jobs m
     where not exists (select 1 from page0 p where p.job = m.job) and not exists (select 1 from page1 p where p.job = m.job)
       and not exists (select 1 from page2 p where p.job = m.job)
     order by m.at desc, m.job
     limit greatest(p_limit - (select count(*) from page0) - (select count(*) from page1) - (select count(*) from page2), 0)
  ),
  flagged as materialized (
    select * from page0 union all select * from page1 union all select * from page2 union all select * from page3
  ),
  -- fewer flagged jobs than p_limit (then all of them are listed): the others by name
  unflagged as (
    select j.name as job, null::integer as rank, null::timestamptz as at
      from leasehold.jobs j
     where not exists (select 1 from flagged f where f.job = j.name)
     order by j.name
     limit greatest(p_limit - (select count(*) from flagged), 0)
  ),
  page as (
    select (row_number() over (order by p.rank nulls last, p.at desc nulls last, p.job))::integer as n, p.job, p.rank, p.at
      from (select * from flagged union all select * from unflagged) p
  ),
  lease_counts as (
    select count(*) filter (where l.is_job and l.state = 'held') as running,
           count(*) filter (where not l.is_job) as leases,
           count(*) filter (where not l.is_job and l.state <> 'free') as leases_held
      from leases_seen l
  ),
  counts as (
    select (select count(*) from leasehold.jobs)::integer as jobs,
           c.running::integer as running,
           (select count(*) from expired_jobs)::integer as expired,
           (select count(*) from failing_jobs)::integer as failing,
           (select count(*) from skipping_jobs)::integer as skipping,
           (select count(*) from missing_jobs)::integer as missing,
           c.leases::integer as leases,
           c.leases_held::integer as leases_held
      from lease_counts c
  )
  select p.n, p.job, (array['expired', 'failing', 'skipping', 'missing'])[p.rank + 1], p.at,
         c.jobs, c.running, c.expired, c.failing, c.skipping, c.missing, c.leases, c.leases_held
    from counts c
    left join page p on true
   order by p.n;
end $$;

insert into leasehold.access (object, level) values ('fleet_status', 'reader');

insert into leasehold.migrations (version, name, breaking) values (18, '0018_fleet_status', false);

-- 0019_summary_joins
-- leasehold migration 0019: the fleet summary joins sets instead of probing per row.
--
-- Additive: fleet_summary() keeps its arguments, columns and numbers. Two of its counts did one
-- index probe per row of a large set; at 100,000 jobs that each failed once in the last 24 hours
-- (embedded PostgreSQL 18, 10 million runs) they were most of its time:
-- * failing jobs: count(distinct job) over the day's failed, lost and timed-out runs, with an
--   exists() probe of jobs for each of those runs (215 ms). Now the failing job names are
--   grouped once (a hash aggregate) and joined to jobs as a set (115 ms).
-- * running and expired: every job joined to its lease to classify all 100,000 leases, free ones
--   included (123 ms). Now only the leases that have a holder are read and joined (a held lease
--   has a token), which is the few a fleet holds at a time.
-- The failure counts read run_log, the ended runs (a failed, lost or timed-out run has ended),
-- not the view runs.

create or replace function leasehold.fleet_summary(p_warn_ratio double precision default 0.8)
returns table (
  jobs integer, running integer, expired integer, failing integer, creeping integer, over_interval integer,
  runs_24h bigint, failed_24h bigint, lost_24h bigint, skips_24h bigint, missed_24h bigint, timed_out_24h bigint
)
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
    -- a lease without a token is free: neither running nor expired
    select count(*) filter (where l.expires_at > now()) as held, count(*) filter (where l.expires_at <= now()) as expired
      from leasehold.leases l join leasehold.jobs j on j.name = l.name
     where l.token is not null
  ),
  failed_runs as not materialized (
    select r.job, r.outcome from leasehold.run_log r
     where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at > v_since and r.finished_at is not null
  ),
  failures as (
    select count(*) filter (where r.outcome = 'failed') as failed,
           count(*) filter (where r.outcome = 'lost') as lost,
           count(*) filter (where r.outcome = 'timed-out') as timed_out
      from failed_runs r
  ),
  failing_jobs as (
    select count(*) as jobs
      from (select r.job from failed_runs r group by r.job) f join leasehold.jobs j on j.name = f.job
  ),
  ratios as (
    select (select percentile_cont(0.95) within group (order by extract(epoch from r.finished_at - r.started_at))
              from leasehold.run_log r
             where r.job = j.name and r.finished_at is not null and r.started_at > v_since) * 1000 / j.interval_ms as ratio
      from leasehold.slow_runs s join leasehold.jobs j on j.name = s.job
     where s.last_started > v_since and j.interval_ms > 0
  )
  select (select count(*) from leasehold.jobs)::integer,
         (select held from states)::integer,
         (select expired from states)::integer,
         (select f.jobs from failing_jobs f)::integer,
         (select count(*) from ratios where ratio >= p_warn_ratio and ratio < 1)::integer,
         (select count(*) from ratios where ratio >= 1)::integer,
         (select coalesce(sum(c.runs), 0) from leasehold.run_counts c where c.minute > v_edge)::bigint
           + (select count(*) from leasehold.run_log r
               where r.started_at > v_since and r.started_at < to_timestamp((v_edge + 1) * 60) and r.finished_at is not null)::bigint,
         (select f.failed from failures f)::bigint,
         (select f.lost from failures f)::bigint,
         (select count(*) from leasehold.skips where recorded_at > v_since)::bigint,
         (select count(*) from leasehold.missed where recorded_at > v_since)::bigint,
         (select f.timed_out from failures f)::bigint;
end $$;

insert into leasehold.migrations (version, name, breaking) values (19, '0019_summary_joins', false);

-- 0020_step_clears_missed
-- leasehold migration 0020: a stored clock step window also clears the missed slots inside it.
--
-- Additive: record_clock_step() keeps its arguments and result. Until now the rule "slots a
-- forward step of the database clock jumped over are never recorded missed" held only when the
-- window was stored before anyone asked record_missed() about those slots. A worker that did not
-- see the step itself (started a moment before it, its clock not sampled across it) claims the
-- first slot after the step, finds the job's previous slot minutes back, and records every slot
-- in between as missed; the workers that did see the step store its window a few milliseconds
-- later, at their own next claim. The fault suite's replicated tier found it: 200 slots of a
-- +240 s step recorded missed by a worker spawned 1.5 s before the step.
--
-- Now storing (or widening) a window deletes the missed rows inside it, so the result no longer
-- depends on which worker spoke first: the history ends as if the window had been stored first.
-- Only rows recorded after the window's start are touched (a slot inside the window can only be
-- recorded once the database clock has passed it, that is after the step); rows of earlier
-- downtime stay.

create or replace function leasehold.record_clock_step(p_from timestamptz, p_to timestamptz, p_holder text)
returns boolean
language plpgsql volatile
-- a custom plan per call: a generic one would not know how recent the window is, and read all of missed
set plan_cache_mode = force_custom_plan
as $$
declare
  v_new  boolean;
  v_from timestamptz;
  v_to   timestamptz;
begin
  if p_from is null or p_to is null or not isfinite(p_from) or not isfinite(p_to) or p_to <= p_from then
    raise exception 'leasehold: a clock step window needs finite times with from < to (got % .. %)', p_from, p_to
      using errcode = '22023';
  end if;
  perform leasehold.check_holder(p_holder);
  -- one writer at a time, so that concurrent reports of the same step merge instead of racing
  perform pg_advisory_xact_lock(7308604897068083571);
  update leasehold.clock_steps
     set from_time = least(from_time, p_from), to_time = greatest(to_time, p_to)
   where from_time <= p_to and p_from <= to_time;
  v_new := not found;
  if v_new then
    insert into leasehold.clock_steps (from_time, to_time, recorded_by) values (p_from, p_to, p_holder);
    -- bounded: the oldest windows go (their slots are long recorded or pruned)
    delete from leasehold.clock_steps
     where id <= (select id from leasehold.clock_steps order by id desc offset 1000 limit 1);
  end if;
  -- The slots of the window (as merged with the stored ones it overlaps: one interval) never
  -- existed: delete what record_missed() would have refused had the window been here first.
  -- Bounds as values, so that the BRIN index on recorded_at reads only the rows recorded since
  -- the step began, however long the missed history is.
  select min(w.from_time), max(w.to_time) into v_from, v_to
    from leasehold.clock_steps w
   where w.from_time <= p_to and p_from <= w.to_time;
  delete from leasehold.missed m
   where m.recorded_at >= v_from and m.slot > v_from and m.slot <= v_to;
  return v_new;
end $$;

insert into leasehold.migrations (version, name, breaking) values (20, '0020_step_clears_missed', false);

-- 0021_worker_keys
-- leasehold migration 0021: the live workers' list names scheduler workers only.
--
-- Additive: two new functions; register_liveness() and liveness_locks() are unchanged.
-- A worker claims its hash share of a tick first and the other workers' shares after a short
-- delay; which workers are alive it read from liveness_locks(), that is from every exclusive
-- bigint advisory lock in the database. That list also named sessions that are not workers:
-- plain clients' liveness sessions (a web process that only calls run(), `leasehold exec`), an
-- application's own advisory locks (migration tools hold one while they run), and this
-- schema's own transaction-level locks (register_jobs' revision lock while a worker starts).
-- Each such session took a share no worker claimed first: at 10,000 jobs on 4 workers, a worker
-- that started while a peer was registering split by 5 and left 2,000 slots a tick to the
-- second pass, up to 2 s late; an application's lock held for a deploy did so every tick.
--
-- Now a worker registers with register_worker_liveness(): a liveness key like any other
-- (liveness_locks(), holder_gone() and lease_status see it; leases taken under it are freed at
-- once when its session ends), drawn from the range whose bits 47-62 are worker_key_tag().
-- worker_keys() lists the live keys of that range. Another session lands in it only by taking
-- an advisory lock in that range (1 in 65,536 of random keys); none of this schema's fixed
-- lock keys is in it. Workers of an older library still register with register_liveness():
-- newer workers leave them out of their list, which moves their shares to the second pass
-- while both versions run, never a slot to two workers (the database decides each claim).

-- The tag of worker liveness keys (bits 47-62); 'LH'. Private: the two functions below use it.
create function leasehold.worker_key_tag() returns bigint
language sql immutable as $$
  select 19528::bigint;
$$;

-- register_worker_liveness: register_liveness() for a scheduler worker. Run once on the
-- worker's dedicated session; the key it returns is used as register_liveness()'s is.
create function leasehold.register_worker_liveness() returns bigint
language plpgsql volatile as $$
declare
  k bigint;
begin
  loop
    k := (leasehold.worker_key_tag() << 47) | floor(random() * 140737488355328)::bigint;
    if pg_try_advisory_lock(k) then
      return k;
    end if;
  end loop;
end $$;

-- worker_keys: the liveness keys of the workers alive in this database right now.
create function leasehold.worker_keys() returns table (pid integer, key bigint)
language sql volatile as $$
  select k.pid, k.key from leasehold.liveness_locks() k where k.key >> 47 = leasehold.worker_key_tag();
$$;

insert into leasehold.access (object, level) values
  ('worker_key_tag', 'owner'), ('register_worker_liveness', 'client'), ('worker_keys', 'reader');

insert into leasehold.migrations (version, name, breaking) values (21, '0021_worker_keys', false);

-- 0022_claim_ahead
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

insert into leasehold.migrations (version, name, breaking) values (22, '0022_claim_ahead', false);

-- 0023_fork_epochs
-- leasehold migration 0023: fences that stay unique when two standbys are promoted one after
-- the other, each on its own fork of history.
--
-- Additive for callers: every function keeps its arguments and rows; only the values of the
-- fences granted after a promotion change (they are larger).
--
-- Until now a grant on timeline t started its fences at (t - 1) << 40. The timeline number is
-- unique along one line of history, not across forks: a primary P with two standbys, P dies, S1
-- is promoted (timeline 2) and grants, S1 dies before S2 followed it, S2 is promoted - also
-- timeline 2, since it never saw S1's history - and grants the same fence again.
--
-- Now each fork has a base of its own, fixed by the first grant on it and kept in
-- leasehold.forks: the database clock at that grant, in milliseconds since 2020, times 1024
-- (and never below the old (t - 1) << 40). A fork's rows are replicated with it, so a server
-- finds its own timeline's row exactly when it is on the fork that wrote it: a server promoted
-- from another line of history has no row for its timeline yet and makes one. A later fork's
-- base is above every fence of an earlier one as long as the later fork's first grant reads a
-- later clock than the earlier fork's last grant (a promotion follows the old primary's death
-- by seconds; the servers' clocks agree to milliseconds) and no name was granted more than
-- 1,024 times a millisecond. Along one line of history greatest(old + 1, base) keeps every
-- name's fences growing whatever the clocks say. Timeline 1 has no fork and keeps 1, 2, 3, ...
-- Fences stay below 2^53 until 2298.

create table leasehold.forks (
  timeline   integer primary key,
  base       bigint not null,
  first_grant timestamptz not null default now()
);
comment on table leasehold.forks is
  'The fence base of each timeline this line of history has granted on: fixed at its first grant (see sql/0023_fork_epochs.sql).';

-- fork_base: the fence base of timeline p_timeline on this server's line of history, made at
-- the first grant on it. 0 on timeline 1.
create function leasehold.fork_base(p_timeline integer) returns bigint
language plpgsql volatile as $$
declare
  v_base bigint;
begin
  if p_timeline <= 1 then
    return 0;
  end if;
  select f.base into v_base from leasehold.forks f where f.timeline = p_timeline;
  if found then
    return v_base;
  end if;
  -- concurrent first grants: one row wins, and both read it (do update returns the existing row)
  insert into leasehold.forks as f (timeline, base)
  values (p_timeline,
          greatest((p_timeline - 1)::bigint << 40,
                   ((extract(epoch from now()) * 1000)::bigint - 1577836800000) * 1024))
  on conflict (timeline) do update set base = f.base
  returning f.base into v_base;
  return v_base;
end $$;

-- fences_after: the one rule for every new fence (next_fence, fence_after, every claim).
create or replace function leasehold.fences_after(p_old bigint[], p_epoch integer) returns bigint[]
language sql volatile as $$
  select coalesce(array_agg(greatest(coalesce(o.old, 0) + 1, b.base) order by o.n), '{}')
    from (select leasehold.fork_base(p_epoch) as base) b, unnest(p_old) with ordinality as o(old, n);
$$;

create or replace function leasehold.fence_after(p_old bigint, p_epoch integer) returns bigint
language sql volatile as $$
  select (leasehold.fences_after(array[p_old], p_epoch))[1];
$$;

insert into leasehold.access (object, level) values ('forks', 'owner'), ('fork_base', 'owner');

insert into leasehold.migrations (version, name, breaking) values (23, '0023_fork_epochs', false);

-- 0024_define_checks
-- leasehold migration 0024: define_schedule refuses definitions no worker can run, or that
-- break the readers of leasehold.jobs.
--
-- Additive for callers: every function keeps its arguments and rows; define_schedule refuses
-- more input, with the codes it used for the same fields (LH001 name, LH005 the others).
-- Definitions stored before are left as they are.
--
-- * timezone: PostgreSQL knows names the workers' Node.js (croner, Intl) refuses: 'posixrules'
--   (New York time), 'Factory', 'localtime', POSIX specifications such as 'UTC+5' (five hours
--   west), 'posix/Europe/Berlin', abbreviations such as 'PST'. Such a schedule was stored and
--   then skipped by every worker. Now only 'UTC' and the Area/Location names of the tz
--   database (Europe/Berlin, America/Argentina/Buenos_Aires, Etc/GMT+5) that this server knows
--   pass: timezone_problem() below, the rule the client applies too (src/validate/timezone.ts).
--   Legacy single names (EST, CET, GMT, Japan) are refused: America/Panama, Europe/Paris, UTC
--   and Asia/Tokyo say the same today.
-- * name: a name blank or with whitespace at either end (' nightly') passed check_name and then
--   looked like another job in every list. Lease names elsewhere keep their rules (acquire,
--   code jobs): refusing them there would stop workers that run such names today.
-- * payload: a payload nested 6,000 deep was stored, and JSON.stringify then overflowed the
--   stack of every `leasehold schedule list --json`. At most 32 levels of arrays and objects
--   now. A payload nested deeper than PostgreSQL's own jsonb parser goes (12,000 to 15,000
--   levels with the default max_stack_depth of 2MB) fails with PostgreSQL's 54001 while the
--   caller's statement parses it, before this function runs; the client refuses it before
--   sending.

-- timezone_problem: why p_timezone is not a name both PostgreSQL and the workers' Intl accept,
-- or null. 'UTC', or Area/Location[/Sub] with an area of the tz database (the backward-compatible
-- US, Canada, Brazil, Chile and Mexico included; not posix/ or right/, the copies of the database
-- that PostgreSQL also finds in a system zoneinfo directory), known to this server. Both engines
-- look names up ignoring case, so only the area's spelling and the initials are checked. Every
-- name of Intl.supportedValuesOf('timeZone') has this form (test/schedule-definition-checks.test.ts).
create function leasehold.timezone_problem(p_timezone text) returns text
language plpgsql stable as $$
begin
  if p_timezone is null or char_length(p_timezone) > 64
     or p_timezone !~ '^(UTC|(Africa|America|Antarctica|Arctic|Asia|Atlantic|Australia|Europe|Indian|Pacific|Etc|US|Canada|Brazil|Chile|Mexico)/[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z][A-Za-z0-9_+-]*)?)$' then
    return format('must be an IANA name such as Europe/Berlin, America/Argentina/Buenos_Aires, Etc/GMT+5 or UTC (got %s)',
                  coalesce(quote_literal(left(p_timezone, 64)), 'null'));
  end if;
  begin
    perform now() at time zone p_timezone;
  exception when others then
    return format('unknown timezone %L', p_timezone);
  end;
  return null;
end $$;

-- define_schedule: as in schema 11, and refuses a name with whitespace at either end (LH001), a
-- timezone timezone_problem() describes and a payload nested more than 32 levels deep (LH005).
create or replace function leasehold.define_schedule(
  p_name text, p_handler text, p_by text,
  p_cron text default null, p_every interval default null, p_timezone text default null,
  p_payload jsonb default null, p_ttl interval default null,
  p_overlap text default null, p_catch_up text default null, p_buffer_limit integer default 10,
  p_starting_deadline interval default null, p_timeout interval default null, p_jitter interval default null
) returns table (name text, revision bigint, created boolean, changed boolean)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v_old leasehold.jobs;
  -- the defaults of a code job (null: the default), so that a caller may pass null for any
  v_payload jsonb := coalesce(p_payload, '{}'::jsonb);
  v_ttl interval := coalesce(p_ttl, interval '30 seconds');
  v_overlap text := coalesce(p_overlap, 'skip');
  v_catch_up text := coalesce(p_catch_up, 'latest');
  v_cron text := btrim(p_cron);
  v_every_ms bigint := (extract(epoch from p_every) * 1000)::bigint;
  v_schedule text;
  v_interval_ms bigint;
  v_deadline_ms bigint := (extract(epoch from p_starting_deadline) * 1000)::bigint;
  v_row leasehold.jobs;
  v_problem text;
begin
  perform leasehold.check_name(p_name);
  -- the name is the job's in every list and log: ' nightly' must not pass for 'nightly'
  if p_name ~ '^[ \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]|[ \u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]$' then
    raise exception 'lease name must not begin or end with whitespace (got %)', quote_literal(p_name)
      using errcode = 'LH001', hint = 'Trim the name: a schedule name is shown in lists and logs, where edge spaces do not show.';
  end if;
  perform leasehold.check_holder(p_by);
  perform leasehold.check_schedule_field(p_handler is not null and char_length(p_handler) between 1 and 200
    and leasehold.check_characters(p_handler) is null, 'handler', 'must be 1-200 characters without control or invisible characters');
  perform leasehold.check_schedule_field((v_cron is null) <> (p_every is null), 'schedule', 'give exactly one of cron and every');
  if v_cron is not null then
    perform leasehold.check_schedule_field(char_length(v_cron) between 9 and 200
      and array_length(regexp_split_to_array(v_cron, '\s+'), 1) in (5, 6)
      and v_cron ~ '^[0-9A-Za-z*/,?#\-\s]+$', 'cron', format('must be 5 fields (or 6 with seconds first) of digits, names and * / , - ? # L W (got %L)', left(v_cron, 200)));
    if p_timezone is not null then
      v_problem := leasehold.timezone_problem(p_timezone);
      perform leasehold.check_schedule_field(v_problem is null, 'timezone', v_problem);
    end if;
    v_schedule := v_cron;
    v_interval_ms := null;
  else
    perform leasehold.check_schedule_field(p_timezone is null, 'timezone', 'applies to cron schedules only');
    perform leasehold.check_schedule_field(v_every_ms between 1000 and 366::bigint * 86400000
      and p_every = v_every_ms * interval '1 millisecond', 'every', 'must be a whole number of milliseconds from 1 second to 366 days');
    -- as the client writes it: 1h30m, 90s is 1m30s
    v_schedule := concat(nullif(v_every_ms / 86400000, 0) || 'd', nullif(v_every_ms / 3600000 % 24, 0) || 'h',
                         nullif(v_every_ms / 60000 % 60, 0) || 'm', nullif(v_every_ms / 1000 % 60, 0) || 's',
                         nullif(v_every_ms % 1000, 0) || 'ms');
    v_interval_ms := v_every_ms;
  end if;
  perform leasehold.check_ttl(v_ttl);
  perform leasehold.check_schedule_field(v_ttl >= interval '300 milliseconds', 'ttl', 'must be at least 300ms for a scheduled job: heartbeats run every ttl/3');
  perform leasehold.check_schedule_field(v_overlap in ('skip', 'buffer-one', 'buffer-all', 'replace', 'allow'), 'overlap', 'must be one of skip, buffer-one, buffer-all, replace, allow');
  perform leasehold.check_schedule_field(v_catch_up in ('latest', 'none')
    or (v_catch_up ~ '^all:[0-9]{1,4}$' and substr(v_catch_up, 5)::integer between 1 and 1000), 'catch_up', 'must be latest, none or all:N with N from 1 to 1000');
  perform leasehold.check_schedule_field(p_buffer_limit between 1 and 1000, 'buffer_limit', 'must be from 1 to 1000');
  perform leasehold.check_schedule_field(p_starting_deadline is null or (v_deadline_ms between 1 and 366::bigint * 86400000), 'starting_deadline', 'must be from 1 millisecond to 366 days');
  perform leasehold.check_schedule_field(p_timeout is null or (p_timeout > interval '0' and p_timeout <= interval '366 days'), 'timeout', 'must be a positive interval of at most 366 days');
  perform leasehold.check_schedule_field(p_jitter is null or (p_jitter > interval '0' and p_jitter <= interval '1 day'), 'jitter', 'must be a positive interval of at most 1 day');
  perform leasehold.check_schedule_field(octet_length(v_payload::text) <= 65536, 'payload', format('must be JSON of at most 65536 bytes (got %s)', coalesce(octet_length(v_payload::text), 0)));
  -- within the size: the walk stops 32 levels down, whatever the nesting below
  perform leasehold.check_schedule_field(not jsonb_path_exists(v_payload, 'strict $.**{32} ? (@.type() == "array" || @.type() == "object")'),
    'payload', 'must nest arrays and objects at most 32 levels deep');

  perform set_config('leasehold.job_writer', 'schedules', true);
  insert into leasehold.leases (name) values (p_name) on conflict do nothing;
  select * into v_old from leasehold.jobs j where j.name = p_name for update;
  if found and v_old.source = 'code' then
    perform set_config('leasehold.job_writer', '', true);
    raise exception 'job "%" is defined in code (registered by %): a data schedule cannot take its name', p_name, v_old.registered_by
      using errcode = 'LH006', hint = 'Pick another name, or remove the job from the workers'' code first.';
  end if;
  if found and v_old.removed_at is null
     and (v_old.schedule, v_old.timezone, v_old.interval_ms, v_old.ttl_ms, v_old.overlap, v_old.catch_up, v_old.handler,
          v_old.payload, v_old.buffer_limit, v_old.starting_deadline_ms, v_old.timeout_ms, v_old.jitter_ms)
         is not distinct from
         (v_schedule, p_timezone, v_interval_ms, (extract(epoch from v_ttl) * 1000)::bigint, v_overlap, v_catch_up, p_handler,
          v_payload, p_buffer_limit, v_deadline_ms, (extract(epoch from p_timeout) * 1000)::bigint, (extract(epoch from p_jitter) * 1000)::bigint) then
    perform set_config('leasehold.job_writer', '', true);
    return query select p_name, v_old.revision, false, false;
    return;
  end if;
  -- a new schedule, a changed one, or one defined again after its removal: from the next slot on
  update leasehold.leases l
     set last_slot = greatest(l.last_slot, now()),
         suspended = case when v_old.paused_at is not null and v_old.removed_at is null then 'paused' else null end
   where l.name = p_name
     and (v_old.name is null or v_old.removed_at is not null
          or (v_old.schedule, v_old.timezone) is distinct from (v_schedule, p_timezone)
          or l.suspended = 'removed')
     and (l.last_slot is not null or l.suspended is not null);
  insert into leasehold.jobs as j (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by,
                                   source, handler, payload, defined_by, buffer_limit, starting_deadline_ms, timeout_ms, jitter_ms)
  values (p_name, v_schedule, p_timezone, v_interval_ms, (extract(epoch from v_ttl) * 1000)::bigint, v_overlap, v_catch_up, p_by,
          'data', p_handler, v_payload, p_by, p_buffer_limit, v_deadline_ms,
          (extract(epoch from p_timeout) * 1000)::bigint, (extract(epoch from p_jitter) * 1000)::bigint)
  on conflict on constraint jobs_pkey do update
     set schedule = excluded.schedule, timezone = excluded.timezone, interval_ms = excluded.interval_ms,
         ttl_ms = excluded.ttl_ms, overlap = excluded.overlap, catch_up = excluded.catch_up,
         registered_by = excluded.registered_by, registered_at = now(), handler = excluded.handler,
         payload = excluded.payload, defined_by = excluded.defined_by, buffer_limit = excluded.buffer_limit,
         starting_deadline_ms = excluded.starting_deadline_ms, timeout_ms = excluded.timeout_ms,
         jitter_ms = excluded.jitter_ms,
         -- defined again after removal: a new job, not paused
         paused_at = case when j.removed_at is null then j.paused_at end,
         paused_by = case when j.removed_at is null then j.paused_by end,
         pause_reason = case when j.removed_at is null then j.pause_reason end,
         removed_at = null
  returning j.* into v_row;
  perform set_config('leasehold.job_writer', '', true);
  perform leasehold.record_action(case when v_old.name is null or v_old.removed_at is not null then 'schedule-defined' else 'schedule-changed' end,
    p_name, p_by, jsonb_build_object('schedule', v_schedule, 'timezone', p_timezone, 'handler', p_handler,
      'overlap', v_overlap, 'catch_up', v_catch_up, 'ttl_ms', v_row.ttl_ms, 'revision', v_row.revision));
  return query select p_name, v_row.revision, v_old.name is null or v_old.removed_at is not null, true;
end $$;

insert into leasehold.access (object, level) values ('timezone_problem', 'owner');

insert into leasehold.migrations (version, name, breaking) values (24, '0024_define_checks', false);

-- 0025_worker_handlers
-- leasehold migration 0025: which handlers the live workers have, so that a schedule no worker
-- can run is seen instead of staying idle forever.
--
-- Additive: one table and three functions.
--
-- A job defined as data names a handler; only a worker that registered a handler of that name
-- (startWorker({ handlers })) loads and runs it. A schedule whose handler no worker has stayed
-- idle, with nothing recorded: status showed it idle without attention and the dashboard
-- promised its next run. Now each worker registers its handler names on its liveness session
-- (register_worker_handlers), live_handlers() counts the live workers per handler, and
-- unhandled_schedules() lists the data jobs no live worker can run. One worker records their
-- slots as missed, naming the handler, so they show wherever a missed slot shows (status
-- attention, `leasehold runs`, the dashboard's timeline, the missed-slots metric and alert).
-- A row belongs to a worker's liveness key: it counts while that key's session lives
-- (worker_keys()), and rows of dead keys are pruned at the next registration.

create table leasehold.worker_handlers (
  worker_key    bigint primary key,
  holder        text not null,
  handlers      text[] not null,
  registered_at timestamptz not null default now()
);
comment on table leasehold.worker_handlers is
  'The handler names each scheduler worker registered, by its liveness key (live while worker_keys() lists it).';

-- register_worker_handlers: called by a worker on its liveness session, right after
-- register_worker_liveness(). Only the session that holds p_key may register under it.
create function leasehold.register_worker_handlers(p_key bigint, p_holder text, p_handlers text[]) returns void
language plpgsql volatile as $$
begin
  perform leasehold.check_holder(p_holder);
  if not exists (select 1 from leasehold.worker_keys() k where k.key = p_key and k.pid = pg_backend_pid()) then
    raise exception 'register_worker_handlers: this session does not hold worker key %', p_key
      using errcode = '42501', hint = 'Call it on the session that called register_worker_liveness().';
  end if;
  if cardinality(p_handlers) > 10000 then
    raise exception 'register_worker_handlers: at most 10000 handlers (got %)', cardinality(p_handlers) using errcode = '22023';
  end if;
  delete from leasehold.worker_handlers w
   where w.worker_key = p_key
      or not exists (select 1 from leasehold.worker_keys() k where k.key = w.worker_key);
  insert into leasehold.worker_handlers (worker_key, holder, handlers)
  values (p_key, p_holder, coalesce(p_handlers, '{}'));
end $$;

-- live_handlers: each handler name the live workers registered, with how many of them have it.
create function leasehold.live_handlers() returns table (handler text, workers integer)
language sql stable as $$
  select h.handler, count(*)::integer
    from leasehold.worker_handlers w
    join leasehold.worker_keys() k on k.key = w.worker_key
    cross join lateral unnest(w.handlers) as h(handler)
   group by h.handler;
$$;

-- unhandled_schedules: the data jobs (not removed, not paused) whose handler no live worker
-- registered, with what the recording worker needs to compute their slots. `since`: the
-- latest of the definition's last change and the job's last claimed slot.
create function leasehold.unhandled_schedules()
returns table (
  job text, handler text, schedule text, timezone text, interval_ms bigint,
  starting_deadline_ms bigint, since timestamptz, database_time timestamptz
)
language sql stable as $$
  select j.name, j.handler, j.schedule, j.timezone, j.interval_ms, j.starting_deadline_ms,
         greatest(j.registered_at, (select l.last_slot from leasehold.leases l where l.name = j.name)), now()
    from leasehold.jobs j
   where j.source = 'data' and j.removed_at is null and j.paused_at is null
     and not exists (select 1 from leasehold.live_handlers() h where h.handler = j.handler)
   order by j.name
   limit 10000;
$$;

insert into leasehold.access (object, level) values
  ('worker_handlers', 'owner'), ('register_worker_handlers', 'client'), ('live_handlers', 'reader'), ('unhandled_schedules', 'reader');

insert into leasehold.migrations (version, name, breaking) values (25, '0025_worker_handlers', false);

-- 0026_run_start
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

insert into leasehold.migrations (version, name, breaking) values (26, '0026_run_start', false);

-- 0027_acquire_names_winner
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

insert into leasehold.migrations (version, name, breaking) values (27, '0027_acquire_names_winner', false);

-- 0028_reconfirm_after_restart
-- leasehold migration 0028: a holder keeps its leases across a server restart or failover, and
-- the epoch survives servers that refuse the WAL functions.
--
-- Additive: two new functions (reconfirm_leases, epoch_source); epoch() keeps its signature and
-- its answer wherever the WAL functions work.
--
-- 1. reconfirm_leases. A restart ends every session, so every holder's liveness lock goes and
-- every client used to count all its leases lost, while the server kept the rows until they
-- expired (the vanished locks belong to an earlier incarnation, which proves nothing): nobody
-- worked for up to a ttl. Now a holder whose liveness session the server ended registers a new
-- one and, on it, takes back the leases that are still its own in one statement: same token and
-- fence, unexpired by the database clock, and liveness evidence from an EARLIER incarnation
-- (holder_incarnation is not this server run's). Only then could no peer have taken the lease
-- since the old lock went: is_free asks for the lock only on the incarnation that recorded it,
-- and the row's token shows that nobody acquired it. On the same incarnation (the server did not
-- restart: the holder's session alone was ended) the lock's loss made the lease free for anyone
-- at once, and the lease is not taken back. The statement records the new key and incarnation,
-- so a holder that dies afterwards is freed by liveness at once again.
--
-- 2. epoch() reads the timeline from pg_walfile_name(pg_current_wal_lsn()) (or, in recovery,
-- pg_control_checkpoint()). Managed services refuse some of these (Aurora: 'WAL control
-- functions cannot be executed when wal_level < logical', or 'not supported'), and a role can
-- lose EXECUTE on them: then every lease function failed. Now epoch() falls back to the last
-- checkpoint's timeline, and to 1 when that is refused too; epoch_source() says which one this
-- server gives and why (the client reports it at start: docs/high-availability.md).

create or replace function leasehold.epoch() returns integer
language plpgsql volatile as $$
begin
  begin
    if pg_is_in_recovery() then
      return (pg_control_checkpoint()).timeline_id;
    end if;
    return ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer;
  exception when others then
    null; -- refused or unsupported here: the next source
  end;
  begin
    return (pg_control_checkpoint()).timeline_id;
  exception when others then
    return 1; -- no timeline at all: one line of history as far as leasehold can tell
  end;
end $$;

-- epoch_source: where epoch() reads the timeline on this server, with the errors of the sources
-- it could not use. 'wal': the current WAL file (a promotion shows at once); 'checkpoint': the
-- last checkpoint (a promotion shows only after its end-of-recovery checkpoint); 'none': no
-- timeline (epoch() is 1: forks of history cannot be told apart).
create function leasehold.epoch_source() returns table (source text, timeline integer, detail text)
language plpgsql volatile as $$
declare
  v_detail text;
begin
  begin
    if not pg_is_in_recovery() then
      return query select 'wal'::text, ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer, null::text;
      return;
    end if;
  exception when others then
    v_detail := format('pg_walfile_name(pg_current_wal_lsn()): %s (SQLSTATE %s)', sqlerrm, sqlstate);
  end;
  begin
    return query select 'checkpoint'::text, (pg_control_checkpoint()).timeline_id, v_detail;
    return;
  exception when others then
    v_detail := concat_ws('; ', v_detail, format('pg_control_checkpoint(): %s (SQLSTATE %s)', sqlerrm, sqlstate));
  end;
  return query select 'none'::text, 1, v_detail;
end $$;

-- reconfirm_leases: see 1. above. Called on the session that holds liveness key p_key (just
-- registered); one element per lease, in the order given: whether it was taken back, its
-- expiry, and why not ('unknown', 'released', 'taken-over', 'expired', 'same-incarnation').
create function leasehold.reconfirm_leases(p_key bigint, p_names text[], p_tokens uuid[], p_fences bigint[], p_ttls interval[])
returns table (name text, reconfirmed boolean, expires_at timestamptz, reason text, database_time timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
set plan_cache_mode = force_custom_plan
set jit = off
as $$
#variable_conflict use_column
declare
  v_incarnation text := leasehold.incarnation();
  v_names text[];
  v_expires timestamptz[];
begin
  if p_key is null or not exists (select 1 from leasehold.liveness_locks() k where k.key = p_key and k.pid = pg_backend_pid()) then
    raise exception 'reconfirm_leases: this session does not hold liveness key %', p_key
      using errcode = '42501', hint = 'Call it on the session that called register_liveness() or register_worker_liveness().';
  end if;
  if cardinality(p_names) is distinct from cardinality(p_tokens) or cardinality(p_names) is distinct from cardinality(p_fences)
     or cardinality(p_names) is distinct from cardinality(p_ttls) then
    raise exception 'reconfirm_leases: names, tokens, fences and ttls must have one element per lease' using errcode = '22023';
  end if;
  perform leasehold.check_ttl(d.ttl) from (select distinct t as ttl from unnest(p_ttls) t) d;
  perform leasehold.pin_synchronous_commit();
  -- rows locked in name order, as confirm_leases and end_runs lock them
  perform 1 from leasehold.leases l join unnest(p_names, p_tokens) as i(name, token) on l.name = i.name and l.token = i.token
   where l.name = any (p_names)
   order by l.name
     for no key update of l;
  with taken as (
    update leasehold.leases l
       set expires_at = now() + i.ttl, ttl = i.ttl, epoch = leasehold.epoch(),
           holder_key = p_key, holder_incarnation = v_incarnation
      from unnest(p_names, p_tokens, p_fences, p_ttls) as i(name, token, fence, ttl)
     where l.name = any (p_names) and l.name = i.name and l.token = i.token and l.fence = i.fence
       and l.expires_at > now()
       and l.holder_incarnation is distinct from v_incarnation
    returning l.name, l.expires_at)
  select coalesce(array_agg(t.name), '{}'), coalesce(array_agg(t.expires_at), '{}') into v_names, v_expires from taken t;
  return query
  select e.name, c.name is not null, coalesce(c.expires_at, l.expires_at),
         case
           when c.name is not null then 'reconfirmed'
           when l.name is null then 'unknown'
           when l.token is null then 'released'
           when l.token <> e.token or l.fence <> e.fence then 'taken-over'
           when l.expires_at <= now() then 'expired'
           else 'same-incarnation'
         end,
         now()
    from unnest(p_names, p_tokens, p_fences) with ordinality as e(name, token, fence, n)
    left join unnest(v_names, v_expires) as c(name, expires_at) on c.name = e.name
    left join leasehold.leases l on l.name = e.name and c.name is null
   order by e.n;
end $$;

insert into leasehold.access (object, level) values ('reconfirm_leases', 'client'), ('epoch_source', 'reader');

insert into leasehold.migrations (version, name, breaking) values (28, '0028_reconfirm_after_restart', false);

do $$ begin
  if to_regprocedure('leasehold.secure_schema()') is not null then perform leasehold.secure_schema(); end if;
end $$;
