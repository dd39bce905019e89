-- leasehold migration 0001: the lease protocol.
--
-- Glossary
--   lease   one row per job name: who may run the job now, and until when.
--   token   random secret of one acquisition; renew, release and fenced writes present it.
--   fence   bigint that grows by one on every acquisition of a name and never goes back;
--           a write checked against it cannot come from an older holder.
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

-- acquire: one call, one round trip, never waits for a row lock.
--
-- Takes the lease where it is free: never held, released, expired by now(), or held by a
-- holder whose liveness lock is gone. Sets a fresh token, fence + 1 and now() + ttl.
-- With p_slot, the claim also needs p_slot newer than the last claimed slot and not in
-- the future, so each scheduled occurrence is claimed once across a fleet.
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
  p_slot       timestamptz default null
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
begin
  perform leasehold.check_name(p_name);
  perform leasehold.check_ttl(p_ttl);
  perform leasehold.check_holder(p_holder);

  select l.name, l.token into candidate, previous_token
    from leasehold.leases l
   where l.name = p_name
     and (l.token is null
          or l.expires_at <= now()
          -- true only when nobody holds the holder's session lock any more
          or leasehold.holder_gone(l.holder_key))
     and (p_slot is null or ((l.last_slot is null or p_slot > l.last_slot) and p_slot <= now()))
     for update skip locked;

  if found then
    update leasehold.leases l
       set token = gen_random_uuid(), fence = l.fence + 1, holder = p_holder,
           holder_key = p_holder_key, acquired_at = now(), expires_at = now() + p_ttl,
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
    insert into leasehold.leases as l (name, token, fence, holder, holder_key, acquired_at, expires_at, last_slot)
    values (p_name, gen_random_uuid(), 1, p_holder, p_holder_key, now(), now() + p_ttl, p_slot)
    on conflict (name) do nothing
    returning l.* into r;
    if found then
      return query select true, r.token, r.fence, r.expires_at, r.holder, r.acquired_at,
                          r.last_slot, 'acquired'::text, now(), false;
      return;
    end if;
    select * into r from leasehold.leases l where l.name = p_name;
  end if;

  return query select false, null::uuid, r.fence, r.expires_at, r.holder, r.acquired_at, r.last_slot,
    case
      when p_slot is not null and p_slot > now() then 'slot-not-due'
      when p_slot is not null and r.last_slot is not null and p_slot <= r.last_slot then 'slot-taken'
      when r.token is not null and r.expires_at > now() then 'held'
      -- free by the clock but locked: its holder is committing a fenced transaction, or
      -- another acquirer is taking it right now
      else 'holder-committing'
    end, now(), false;
end $$;

-- renew: extends the lease while the token matches and it has not expired.
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
  update leasehold.leases l
     set expires_at = now() + p_ttl
   where l.name = p_name and l.token = p_token and l.expires_at > now()
  returning l.* into r;
  if found then
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
  with released as (
    update leasehold.leases l
       set token = null, expires_at = null, holder_key = null, released_at = now()
     where l.name = p_name and l.token = p_token
    returning 1
  )
  select exists (select 1 from released);
$$;

-- assert_lease: the fence check for the caller's own transaction. Locks the lease row
-- FOR KEY SHARE where name, token and fence match and the lease is unexpired, so no
-- takeover (which needs FOR UPDATE) can happen before this transaction ends, while the
-- holder's own renewals (plain UPDATEs of non-key columns) still go through. Raises LH003
-- otherwise. Returns the fence.
create function leasehold.assert_lease(p_name text, p_token uuid, p_fence bigint) returns bigint
language plpgsql volatile as $$
declare
  r leasehold.leases;
begin
  perform 1 from leasehold.leases l
   where l.name = p_name and l.token = p_token and l.fence = p_fence and l.expires_at > now()
     for key share;
  if found then
    return p_fence;
  end if;
  select * into r from leasehold.leases l where l.name = p_name;
  raise exception 'lease "%" (fence %) is no longer held', p_name, p_fence
    using errcode = 'LH003',
          detail = case
            when r.name is null then 'no such lease'
            when r.fence <> p_fence and r.token is null then format('the lease was force-released (fence is now %s, held by nobody)', r.fence)
            when r.fence <> p_fence then format('fence is now %s, held by %s', r.fence, r.holder)
            when r.token is null then 'the lease was released'
            else 'the lease expired'
          end,
          hint = 'Roll back: another holder may be running. Do not retry the write under this lease.';
end $$;

-- holds_lease: the same check as a boolean, for WHERE clauses and triggers:
--   update results set ... where id = $1 and leasehold.holds_lease('job', $token, $fence);
create function leasehold.holds_lease(p_name text, p_token uuid, p_fence bigint) returns boolean
language plpgsql volatile as $$
begin
  perform 1 from leasehold.leases l
   where l.name = p_name and l.token = p_token and l.fence = p_fence and l.expires_at > now()
     for key share;
  return found;
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
  select * into old from leasehold.leases l where l.name = p_name for update;
  if not found then
    return query select false, null::text, null::bigint, null::bigint;
    return;
  end if;
  update leasehold.leases l
     set token = null, expires_at = null, holder_key = null, released_at = now(), fence = l.fence + 1
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
       case when l.token is null or l.holder_key is null then null
            else exists (
              select 1 from pg_locks k
               where k.locktype = 'advisory' and k.objsubid = 1 and k.granted
                 and k.database = (select oid from pg_database where datname = current_database())
                 and k.mode = 'ExclusiveLock'
                 and ((k.classid::bigint << 32) | k.objid::bigint) = l.holder_key)
       end as holder_alive,
       l.last_slot,
       l.released_at,
       -- the liveness session's advisory lock key (visible in pg_locks anyway), so a dashboard
       -- can group leases by worker without reading the table
       l.holder_key
  from leasehold.leases l;
