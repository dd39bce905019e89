-- leasehold schema version 28: complete install script.
-- Generated from sql/baseline/ and sql/migrations/ (leasehold migrate --dry-run prints it for a database).
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
  applied_at timestamptz not null default now(),
  checksum   text
);

do $$ begin
  if (select coalesce(max(version), 0) from leasehold.migrations) <> 0 then
    raise exception 'this script upgrades the leasehold schema from version 0 to 28, but the database is at version %',
      (select coalesce(max(version), 0) from leasehold.migrations);
  end if;
end $$;

-- baseline (breaking)
set local check_function_bodies = off;
-- sql/baseline/1_leases.sql
-- leasehold schema, part 1 of 6: the lease protocol, and what every caller of acquire() may
-- write besides (liveness sessions, skips, clock steps). docs/sql-api.md is the contract.
--   token  secret of one acquisition; renewals, the release and fenced writes present it.
--   fence  grows on every acquisition of a name, never goes back, even across a failover (the
--          epoch is folded in): a write checked against it cannot come from an older holder.
--   epoch  the fork of history (leasehold.forks: a base fixed at the first grant on each WAL
--          timeline); incarnation: epoch and postmaster start, where advisory locks live.
--   holder_key  the key of the holder's liveness session lock: when it is gone, the lease is free.
--   slot   a scheduled occurrence, claimed at most once.
-- Every decision uses the database clock. Errors: LH001 name, LH002 ttl, LH003 lease lost, LH004 holder.

create type leasehold.lease_renewal as (name text, token uuid, ttl interval);

-- Windows (from_time, to_time] a forward step of the database clock jumped over: their slots
-- never existed (not recorded missed). Kept as long as the history, at most 1,000.
create table leasehold.clock_steps (
  id bigint generated always as identity primary key,
  from_time timestamp with time zone not null, to_time timestamp with time zone not null,
  recorded_by text not null, recorded_at timestamp with time zone not null default now(),
  constraint clock_steps_check CHECK ((to_time > from_time)));

create table leasehold.forks (
  timeline integer primary key, base bigint not null, first_grant timestamp with time zone not null default now()
);
comment on table leasehold.forks is
  'The fence base of each timeline this line of history has granted on, fixed at its first grant (fork_base()).';

-- bad_characters: what a name, holder or operator's text must not contain (one regex class):
-- controls, bidirectional controls ('invoice\u202Egnp.exe' shows as 'invoiceexe.png') and
-- invisible characters ('pay\u200Bments' looks like 'payments'). Immutable: a constant.
create function leasehold.bad_characters() returns text
language sql immutable as $$
  select '[\u0001-\u001f\u007f-\u009f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufeff\uffa0\ufff9-\ufffb\U000e0000-\U000e007f]'::text;
$$;

-- check_characters: the first bad character of p_text, or null (code point position from 0, as in TypeScript).
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
    from (select substring(p_text from leasehold.bad_characters()) as c) m
   where m.c is not null;
$$;

-- Columns in the order they change (rarely, at a grant, also at a release): an update's WAL record
-- holds only the bytes between the prefix and suffix old and new rows share.
create table leasehold.leases (
  name text primary key, created_at timestamp with time zone not null default now(), suspended text, ttl interval,
  epoch integer, -- the epoch in which the grant or its latest renewal was confirmed
  holder_incarnation text, -- the incarnation whose advisory lock table holds holder_key's lock
  holder text, run_holder text, -- change only when another holder takes the lease (a worker claims its own share each slot)
  fence bigint not null default 0, run_fence bigint, last_slot timestamp with time zone, acquired_at timestamp with time zone,
  released_at timestamp with time zone, token uuid, expires_at timestamp with time zone, holder_key bigint,
  -- the scheduled run in flight (claim()), until finish_runs() writes its history row (and run_fence, run_holder)
  run_slot timestamp with time zone, run_started_at timestamp with time zone,
  constraint leases_suspended_check CHECK ((suspended = ANY (ARRAY['paused'::text, 'removed'::text]))),
  constraint leases_token_has_expiry CHECK (((token IS NULL) = (expires_at IS NULL))),
  -- the name rule (check_name()'s), for a row written by any path; bad_characters() is inlined as
  -- a constant, so an update pays one short regex match (a trigger on update of name locked
  -- every row an update changed first: one more WAL record, 54 bytes, per release)
  constraint leases_name_valid CHECK ((char_length(name) between 1 and 200 and name !~ leasehold.bad_characters()))
) with (fillfactor=50);
comment on table leasehold.leases is
  'One row per lease name. Write it only through the leasehold.* functions.';

create table leasehold.skips (
  job text not null, slot timestamp with time zone not null,
  holder text, holder_fence bigint, holder_slot timestamp with time zone, held_for interval, -- the holder, as the skip saw it
  recorded_by text not null, recorded_at timestamp with time zone not null default now(),
  constraint skips_pkey PRIMARY KEY (job, slot));
create index skips_recorded_brin on leasehold.skips using brin (recorded_at) WITH (pages_per_range='32');

-- Argument checks shared by every entry point (one answer, one SQLSTATE for every client). SQL,
-- inlined into their callers' expressions (a plpgsql check was a call of its own on every
-- acquire): a short test, and only when it fails a plpgsql call that says why (the messages in
-- the inlined expression were set up again in every transaction: 4 us of a declined acquire).
-- refuse() raises, volatile so that planning never evaluates a branch not taken.
create function leasehold.refuse(p_code text, p_message text, p_hint text) returns boolean
language plpgsql volatile as $$ begin raise exception using errcode = p_code, message = p_message, hint = p_hint; end $$;

create function leasehold.refuse_name(p_name text) returns boolean
language plpgsql volatile as $$
begin
  if p_name is null or char_length(p_name) = 0 then
    return leasehold.refuse('LH001', 'lease name must not be empty', 'Name the job, e.g. ''nightly-report''.');
  elsif char_length(p_name) > 200 then
    return leasehold.refuse('LH001', format('lease name must be 1-200 characters (got %s)', char_length(p_name)), 'Use a shorter name.');
  end if;
  return leasehold.refuse('LH001', format('lease name must not contain control, bidirectional or invisible characters (found %s)',
                                          leasehold.check_characters(p_name)),
                          'Remove the character: names are shown to operators and must read as they are.');
end $$;

create function leasehold.check_name(p_name text) returns boolean
language sql volatile as $$
  select case when char_length(p_name) between 1 and 200 and p_name !~ leasehold.bad_characters() then true
              else leasehold.refuse_name(p_name) end;
$$;

create function leasehold.refuse_holder(p_holder text) returns boolean
language plpgsql volatile as $$
begin
  if p_holder is null or char_length(p_holder) = 0 or char_length(p_holder) > 200 then
    return leasehold.refuse('LH004', format('holder must be 1-200 characters (got %s)', coalesce(char_length(p_holder), 0)), 'Use something like host:pid.');
  end if;
  return leasehold.refuse('LH004', format('holder must not contain control, bidirectional or invisible characters (found %s)',
                                          leasehold.check_characters(p_holder)), 'Use something like host:pid.');
end $$;

create function leasehold.check_holder(p_holder text) returns boolean
language sql volatile as $$
  select case when char_length(p_holder) between 1 and 200 and p_holder !~ leasehold.bad_characters() then true
              else leasehold.refuse_holder(p_holder) end;
$$;

create function leasehold.refuse_ttl(p_ttl interval) returns boolean
language plpgsql volatile as $$
begin
  if p_ttl is null or p_ttl <= interval '0' then
    return leasehold.refuse('LH002', format('ttl must be positive (got %s)', coalesce(p_ttl::text, 'null')), 'Pass an interval such as ''30 seconds''.');
  end if;
  return leasehold.refuse('LH002', format('ttl must be between 100 milliseconds and 7 days (got %s)', p_ttl),
                          'The ttl bounds how long a stalled holder blocks others; heartbeats renew it while the job runs.');
end $$;

create function leasehold.check_ttl(p_ttl interval) returns boolean
language sql volatile as $$
  select case when p_ttl between interval '100 milliseconds' and interval '7 days' then true else leasehold.refuse_ttl(p_ttl) end;
$$;

-- epoch: the current WAL timeline: the WAL file name moves at promotion, the checkpoint's only
-- after the end-of-recovery checkpoint; where refused (managed services): the checkpoint's, else 1.
create function leasehold.epoch() returns integer
language plpgsql volatile as $$
begin
  begin
    if pg_is_in_recovery() then return (pg_control_checkpoint()).timeline_id; end if;
    return ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer;
  exception when others then
    null;
  end;
  begin
    return (pg_control_checkpoint()).timeline_id;
  exception when others then
    return 1;
  end;
end $$;

-- epoch_source: where epoch() reads the timeline here ('wal', 'checkpoint', or 'none': epoch 1),
-- the errors of the sources it could not use, and the server's incarnation.
create function leasehold.epoch_source() returns table (source text, timeline integer, detail text, incarnation text)
language plpgsql volatile as $$
declare
  v_source text := 'none'; v_timeline integer := 1; v_detail text;
begin
  begin
    if not pg_is_in_recovery() then
      v_timeline := ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::integer;
      v_source := 'wal';
    end if;
  exception when others then
    v_detail := format('pg_walfile_name(pg_current_wal_lsn()): %s (SQLSTATE %s)', sqlerrm, sqlstate);
  end;
  if v_source = 'none' then
    begin
      v_timeline := (pg_control_checkpoint()).timeline_id;
      v_source := 'checkpoint';
    exception when others then
      v_detail := concat_ws('; ', v_detail, format('pg_control_checkpoint(): %s (SQLSTATE %s)', sqlerrm, sqlstate));
    end;
  end if;
  return query select v_source, v_timeline, v_detail, leasehold.server_incarnation();
end $$;

-- fork_base: the fence base of a timeline, fixed at its first grant (0 on timeline 1; of two
-- concurrent first grants one row wins and both read it).
create function leasehold.fork_base(p_timeline integer) returns bigint
language plpgsql volatile as $$
declare
  v_base bigint;
begin
  if p_timeline <= 1 then return 0; end if;
  select f.base into v_base from leasehold.forks f where f.timeline = p_timeline;
  if not found then
    insert into leasehold.forks as f (timeline, base)
    values (p_timeline, greatest((p_timeline - 1)::bigint << 40, ((extract(epoch from now()) * 1000)::bigint - 1577836800000) * 1024))
    on conflict (timeline) do update set base = f.base
    returning f.base into v_base;
  end if;
  return v_base;
end $$;

-- server_incarnation: one run of one server. A restart changes the start time, a promotion the
-- timeline; session advisory locks survive neither.
create function leasehold.server_incarnation() returns text
language sql volatile as $$
  select leasehold.epoch() || '@' || to_char(pg_postmaster_start_time() at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US');
$$;

-- liveness_incarnation: the incarnation to record with a grant under key p_key: the current one
-- if the key's lock is held here, else null (the TTL governs: a session lost with an old primary
-- must not look "holder gone" at once).
create function leasehold.liveness_incarnation(p_key bigint) returns text
language sql volatile as $$
  select case when p_key is null or leasehold.holder_gone(p_key) then null else leasehold.server_incarnation() end;
$$;

-- The tag of worker liveness keys (bits 47-62); 'LH'.
create function leasehold.worker_key_tag() returns bigint
language sql immutable as $$
  select 19528::bigint;
$$;

-- liveness_locks: the session advisory locks on one bigint key held in this database now, with
-- their backend; worker: a key in the workers' range.
create function leasehold.liveness_locks() returns table (pid integer, key bigint, worker boolean)
language sql volatile as $$
  select x.pid, x.key, x.key >> 47 = leasehold.worker_key_tag()
    from (select k.pid, (k.classid::bigint << 32) | k.objid::bigint as key
            from pg_locks k
           where k.locktype = 'advisory' and k.objsubid = 1 and k.granted and k.mode = 'ExclusiveLock'
             and k.database = (select d.oid from pg_database d where d.datname = current_database())) x;
$$;

create function leasehold.holder_gone(p_key bigint) returns boolean
language plpgsql volatile as $$
begin
  -- plpgsql: plans cached per session (a sql body is planned again on every declined acquire)
  if p_key is null or not pg_try_advisory_xact_lock_shared(p_key) then return false; end if;
  return not exists (select 1 from leasehold.liveness_locks() k where k.pid = pg_backend_pid() and k.key = p_key);
end $$;

create function leasehold.next_fence(p_old bigint) returns bigint
language sql volatile as $$
  select (leasehold.fences_after(array[p_old], leasehold.epoch()))[1];
$$;

-- fences_after: the one rule for every new fence (plpgsql: a sql body is planned on every grant).
create function leasehold.fences_after(p_old bigint[], p_epoch integer) returns bigint[]
language plpgsql volatile as $$
declare
  v_base bigint := leasehold.fork_base(p_epoch);
begin
  return (select coalesce(array_agg(greatest(coalesce(o.old, 0) + 1, v_base) order by o.n), '{}')
            from unnest(p_old) with ordinality as o(old, n));
end $$;

-- is_free: the one rule for "anyone may take this lease now": released; expired (confirmed
-- before a failover: one more ttl, its last renewals may be lost with the old primary); or its
-- holder's liveness lock gone, asked only on the incarnation that took it (elsewhere none exists).
-- An unexpired lease reads no epoch (AND stops at the expiry), and a live holder's lock answers
-- with one failed try-lock.
create function leasehold.is_free(l leasehold.leases) returns boolean
language sql volatile as $$
  select case
    when l.token is null then true
    when l.expires_at <= now() and (l.epoch is not distinct from leasehold.epoch() or l.expires_at + coalesce(l.ttl, interval '0') <= now()) then true
    else l.holder_key is not null and leasehold.holder_gone(l.holder_key) and l.holder_incarnation is not distinct from leasehold.server_incarnation()
  end;
$$;

-- pin_synchronous_commit: no grant is acknowledged before a synchronous standby has it, whatever
-- the session's setting. Transaction-local: still set at COMMIT (a SET clause ends on return).
create function leasehold.pin_synchronous_commit() returns void
language plpgsql volatile as $$
begin
  if current_setting('synchronous_commit') not in ('on', 'remote_write', 'remote_apply') then
    perform set_config('synchronous_commit', 'on', true);
  end if;
end $$;

-- register_liveness: on the holder's dedicated session, a session advisory lock on a fresh
-- non-negative key; when the session ends, every lease held with the key is free. p_worker: a key
-- in the workers' range (peers share a tick's jobs); p_handlers: counted while the key is live.
create function leasehold.register_liveness(p_worker boolean default false, p_holder text default null, p_handlers text[] default null) returns bigint
language plpgsql volatile as $$
declare
  k bigint;
begin
  if p_handlers is not null then
    perform leasehold.check_holder(p_holder);
    if p_worker is not true or cardinality(p_handlers) > 10000 then
      raise exception 'register_liveness: handlers are registered by a worker (p_worker true), at most 10000 (got %)',
        cardinality(p_handlers) using errcode = '22023';
    end if;
  end if;
  loop
    k := case when p_worker then (leasehold.worker_key_tag() << 47) | floor(random() * 140737488355328)::bigint
              else floor(random() * 9.2e18)::bigint end;
    exit when pg_try_advisory_lock(k);
  end loop;
  if p_handlers is not null then
    -- the rows of keys no longer live go (and any row of this key, drawn again)
    delete from leasehold.worker_handlers w
     where w.worker_key = k or not exists (select 1 from leasehold.liveness_locks() l where l.key = w.worker_key);
    insert into leasehold.worker_handlers (worker_key, holder, handlers) values (k, p_holder, p_handlers);
  end if;
  return k;
end $$;

-- acquisition: acquire()'s answer, one row (a composite, built in one expression on every path).
create type leasehold.acquisition as (
  acquired boolean, token uuid, fence bigint, expires_at timestamptz, holder text, acquired_at timestamptz,
  last_slot timestamptz, reason text, database_time timestamptz, took_over boolean);

-- acquire: takes the lease where it is free (is_free) in one round trip, never waiting for a
-- row lock. p_slot: only a slot after last_slot and not in the future (each slot once per fleet).
-- p_token: the caller's token; a retry of a lost answer passes it again and adopts its own grant.
-- The losing path writes nothing (docs/design.md): a FOR UPDATE whose WHERE is false takes no
-- lock, no xid, no WAL, where ON CONFLICT DO UPDATE would lock the row on every losing call.
-- A declined call's cost is the statements and expressions it runs (each set up again in every
-- transaction), so the held path is one read and three expressions.
create function leasehold.acquire(
  p_name text, p_ttl interval, p_holder text, p_holder_key bigint default null, p_slot timestamptz default null, p_token uuid default null
) returns leasehold.acquisition
language plpgsql volatile
set lock_timeout = '2s'
as $$
declare
  v record; r leasehold.leases; candidate text; previous_token uuid; key_share_free boolean; acquiring boolean; held boolean; why text;
  previous_run_slot timestamptz; previous_run_fence bigint; -- a scheduled run in flight on the row, lost to this acquisition
  saved_lock_timeout text; generation bigint; turn integer;
begin
  if not (leasehold.check_name(p_name) and leasehold.check_ttl(p_ttl) and leasehold.check_holder(p_holder)) then return null; end if; -- or raises
  -- the row and whether any namespace exists, in one read; nothing is told outside the caller's namespace
  select l as lease, exists (select 1 from leasehold.namespaces) as namespaced into v from leasehold.leases l where l.name = p_name;
  -- (a join for the missing row cost 4 us of every declined acquire)
  if not found then select null::leasehold.leases as lease, exists (select 1 from leasehold.namespaces) as namespaced into v; end if;
  if v.namespaced then perform leasehold.check_namespace(array[p_name]); end if;
  r := v.lease;
  -- a paused job runs no slot by any path
  if p_slot is not null then
    if exists (select 1 from leasehold.jobs j where j.name = p_name and j.paused_at is not null) then
      return (false, null, coalesce(r.fence, 0), null, null, null, r.last_slot, 'paused', now(), false)::leasehold.acquisition;
    end if;
  end if;
  -- Held (most calls of a contested name): no lock, no write. A retry (p_token) reads on.
  if p_token is null and r.token is not null and not leasehold.is_free(r) then
    return (false, null, r.fence, r.expires_at, r.holder, r.acquired_at, r.last_slot,
            case when p_slot > now() then 'slot-not-due' when p_slot <= r.last_slot then 'slot-taken' else 'held' end,
            now(), false)::leasehold.acquisition;
  end if;
  if p_token is not null then
    -- a retry whose answer was lost: still ours, so hand it back renewed, with its fence
    perform leasehold.pin_synchronous_commit();
    r := leasehold.confirm(p_name, p_token, p_ttl);
    if r.name is not null then
      return (true, r.token, r.fence, r.expires_at, r.holder, r.acquired_at, r.last_slot, 'acquired', now(), false)::leasehold.acquisition;
    end if;
  end if;

  -- A turn per generation of the row (its fence): the acquirers that read fence f try the advisory
  -- lock (19528, a hash of name and f; apart from liveness keys). One gets it and goes on; the others
  -- wait for its end together, sharing the lock, at most 50 ms, without an xid or a write (a wait on
  -- the row would lock the winner's new version), and read the row again: held, they name the winner;
  -- released at once, they try the next generation's turn (three at most: then 'being-acquired');
  -- unchanged (the turn ended without a grant), the row lock decides among them (a row still
  -- missing: 'being-acquired'). (One lock for all
  -- generations was a convoy: each waiter in turn, and sharers of it kept the next try failing.)
  generation := coalesce((v.lease).fence, 0);
  for attempt in 1..3 loop
    turn := (hashtextextended(p_name, generation) >> 32)::integer;
    acquiring := pg_try_advisory_xact_lock(19528, turn);
    if not acquiring then
      begin
        saved_lock_timeout := current_setting('lock_timeout');
        perform set_config('lock_timeout', '50ms', true), pg_advisory_xact_lock_shared(19528, turn);
        saved_lock_timeout := set_config('lock_timeout', saved_lock_timeout, true);
      exception when lock_not_available then
        exit;
      end;
    end if;
    -- most turns come after another acquirer's commit: its row, held, is the answer (no row lock)
    select * into r from leasehold.leases l where l.name = p_name;
    held := found and not leasehold.is_free(r) and r.token is distinct from p_token;
    exit when acquiring or held or p_slot > now() or p_slot <= r.last_slot;
    -- (a missing row is created by the turn's own holder only: waiters inserting it together
    -- would wait on each other's insert, up to the function's lock_timeout)
    if coalesce(r.fence, 0) = generation then acquiring := r.name is not null; exit; end if;
    generation := coalesce(r.fence, 0);
  end loop;
  acquiring := coalesce(acquiring, false);
  if acquiring and not held then
    perform leasehold.pin_synchronous_commit();
    -- the row lock decides: free by the rules and not locked
    select l.name, l.token, l.run_slot, l.run_fence into candidate, previous_token, previous_run_slot, previous_run_fence
      from leasehold.leases l
     where l.name = p_name and leasehold.is_free(l)
       and (p_slot is null or ((l.last_slot is null or p_slot > l.last_slot) and p_slot <= now()))
       for update skip locked;
    if not found and r.name is null then
      if p_slot is not null and p_slot > now() then
        return (false, null, 0, null, null, null, null, 'slot-not-due', now(), false)::leasehold.acquisition;
      end if;
      -- first use of the name (a creator without the advisory lock loses on the primary key)
      insert into leasehold.leases as l (name, token, fence, holder, holder_key, acquired_at, expires_at, last_slot, ttl, epoch, holder_incarnation)
      values (p_name, coalesce(p_token, gen_random_uuid()), leasehold.next_fence(0), p_holder, p_holder_key,
              now(), now() + p_ttl, p_slot, p_ttl, leasehold.epoch(), leasehold.liveness_incarnation(p_holder_key))
      on conflict (name) do nothing
      returning l.* into r;
      if found then
        return (true, r.token, r.fence, r.expires_at, r.holder, r.acquired_at, r.last_slot, 'acquired', now(), false)::leasehold.acquisition;
      end if;
    end if;
  end if;
  if candidate is not null then
    if previous_run_slot is not null then
      perform leasehold.end_runs(array[p_name], null, array[previous_run_fence], array['lost'], array['lease taken over by ' || p_holder], null);
    end if;
    update leasehold.leases l
       set token = coalesce(p_token, gen_random_uuid()), fence = leasehold.next_fence(l.fence), holder = p_holder,
           holder_key = p_holder_key, acquired_at = now(), expires_at = now() + p_ttl, ttl = p_ttl, epoch = leasehold.epoch(),
           holder_incarnation = leasehold.liveness_incarnation(p_holder_key), released_at = null, last_slot = coalesce(p_slot, l.last_slot)
     where l.name = p_name
    returning l.* into r;
    -- took_over: the previous holder never released
    return (true, r.token, r.fence, r.expires_at, r.holder, r.acquired_at, r.last_slot, 'acquired', now(),
            previous_token is not null)::leasehold.acquisition;
  end if;

  -- Lost: held (the turn's read, still current: nobody else had the turn), or free yet locked, under
  -- the acquirers' lock. A KEY SHARE probe passes a holder's fenced transaction (FOR KEY SHARE),
  -- not a claim, renewal or release (FOR UPDATE). Rare: it locks.
  if not coalesce(held, false) then
    select * into r from leasehold.leases l where l.name = p_name;
    if acquiring and found and leasehold.is_free(r) and (p_slot is null or r.last_slot is null or p_slot > r.last_slot) then
      perform 1 from leasehold.leases l where l.name = p_name for key share skip locked;
      key_share_free := found;
      select * into r from leasehold.leases l where l.name = p_name;
    end if;
    -- our own first attempt may have committed since the check at the top: adopt it
    if p_token is not null and r.token = p_token then
      r := leasehold.confirm(p_name, p_token, p_ttl);
      if r.name is not null then
        return (true, r.token, r.fence, r.expires_at, r.holder, r.acquired_at, r.last_slot, 'acquired', now(), false)::leasehold.acquisition;
      end if;
      select * into r from leasehold.leases l where l.name = p_name;
    end if;
  end if;

  why := case
      when p_slot > now() then 'slot-not-due'
      when p_slot <= r.last_slot then 'slot-taken'
      when not leasehold.is_free(r) then 'held'
      when key_share_free then 'holder-committing'
      -- being taken by another acquirer: the row still names the previous holder, not to be reported
      else 'being-acquired'
    end;
  if why = 'being-acquired' then r.fence := coalesce(r.fence, 0); r.expires_at := null; r.holder := null; r.acquired_at := null; end if;
  return (false, null, r.fence, r.expires_at, r.holder, r.acquired_at, r.last_slot, why, now(), false)::leasehold.acquisition;
end $$;

-- confirm: confirm_leases() of one lease: the row, or nulls when it is not the caller's.
create function leasehold.confirm(p_name text, p_token uuid, p_ttl interval) returns leasehold.leases
language plpgsql volatile as $$
declare
  r leasehold.leases;
begin
  select * into r from leasehold.confirm_leases(array[p_name], array[p_token], array[p_ttl]);
  return r;
end $$;

-- confirm_leases: the one rule by which a holder keeps its leases (token matches, not expired):
-- extended and confirmed in this epoch. No nested loop: on an estimate of one unexpired row it
-- compared every lease with every element (1,000 leases: 220 ms, not 10). Rows locked in name
-- order, as end_runs() locks them (else a renewal and a finish of the same leases deadlock).
create function leasehold.confirm_leases(p_names text[], p_tokens uuid[], p_ttls interval[]) returns setof leasehold.leases
language plpgsql volatile
set plan_cache_mode = force_custom_plan
set enable_nestloop = off
set jit = off
as $$
begin
  perform 1 from leasehold.leases l join unnest(p_names, p_tokens) as i(name, token) on l.name = i.name and l.token = i.token
   where l.name = any (p_names) and l.expires_at > now() order by l.name
     for no key update of l;
  return query
  update leasehold.leases l
     set expires_at = now() + i.ttl, ttl = i.ttl, epoch = (select leasehold.epoch())
    from unnest(p_names, p_tokens, p_ttls) as i(name, token, ttl)
   where l.name = any (p_names) and l.name = i.name and l.token = i.token and l.expires_at > now()
  returning l.*;
end $$;

-- reconfirm_leases: after a restart or failover (which end every liveness lock), a holder's new
-- liveness session (p_key) takes back its leases recorded on an EARLIER incarnation (no peer could
-- take them since: is_free asks for the lock only on its own incarnation; on the same one the loss
-- freed them). The new key and incarnation are recorded, so liveness frees them again.
create function leasehold.reconfirm_leases(p_key bigint, p_names text[], p_tokens uuid[], p_fences bigint[], p_ttls interval[])
returns table (name text, reconfirmed boolean, expires_at timestamptz, reason text, database_time timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
set plan_cache_mode = force_custom_plan
set jit = off
as $$
#variable_conflict use_column
declare
  v_incarnation text := leasehold.server_incarnation(); v_names text[]; v_expires timestamptz[];
begin
  if p_key is null or not exists (select 1 from leasehold.liveness_locks() k where k.key = p_key and k.pid = pg_backend_pid()) then
    raise exception 'reconfirm_leases: this session does not hold liveness key %', p_key
      using errcode = '42501', hint = 'Call it on the session that called register_liveness().';
  end if;
  if array[cardinality(p_tokens), cardinality(p_fences), cardinality(p_ttls)] is distinct from array_fill(cardinality(p_names), array[3]) then
    raise exception 'reconfirm_leases: names, tokens, fences and ttls must have one element per lease' using errcode = '22023';
  end if;
  perform leasehold.check_ttl(d.ttl) from (select distinct t as ttl from unnest(p_ttls) t) d;
  perform leasehold.pin_synchronous_commit();
  perform 1 from leasehold.leases l join unnest(p_names, p_tokens) as i(name, token) on l.name = i.name and l.token = i.token
   where l.name = any (p_names) order by l.name
     for no key update of l;
  with taken as (
    update leasehold.leases l
       set expires_at = now() + i.ttl, ttl = i.ttl, epoch = leasehold.epoch(), holder_key = p_key, holder_incarnation = v_incarnation
      from unnest(p_names, p_tokens, p_fences, p_ttls) as i(name, token, fence, ttl)
     where l.name = any (p_names) and l.name = i.name and l.token = i.token and l.fence = i.fence
       and l.expires_at > now() and l.holder_incarnation is distinct from v_incarnation
    returning l.name, l.expires_at)
  select coalesce(array_agg(t.name), '{}'), coalesce(array_agg(t.expires_at), '{}') into v_names, v_expires from taken t;
  return query
  select e.name, c.name is not null, coalesce(c.expires_at, l.expires_at),
         case when c.name is not null then 'reconfirmed' when l.name is null then 'unknown' when l.token is null then 'released'
              when l.token <> e.token or l.fence <> e.fence then 'taken-over' when l.expires_at <= now() then 'expired'
              else 'same-incarnation' end,
         now()
    from unnest(p_names, p_tokens, p_fences) with ordinality as e(name, token, fence, n)
    left join unnest(v_names, v_expires) as c(name, expires_at) on c.name = e.name
    left join leasehold.leases l on l.name = e.name and c.name is null order by e.n;
end $$;

-- renew_leases: confirm_leases() saying, in the order given, why a lease was not renewed.
-- Variadic: renew_leases(('job', token, '30 seconds')).
create function leasehold.renew_leases(variadic p_leases leasehold.lease_renewal[])
returns table (name text, renewed boolean, expires_at timestamptz, fence bigint, reason text, database_time timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
set plan_cache_mode = force_custom_plan
set jit = off
as $$
#variable_conflict use_column
declare
  v_names text[]; v_expires timestamptz[]; v_fences bigint[];
begin
  if p_leases is null then return; end if;
  -- a name with a row passed the name rule; a bad one is refused (LH001), not 'unknown'
  perform leasehold.check_name(e.name) from unnest(p_leases) e where not exists (select 1 from leasehold.leases x where x.name = e.name);
  perform leasehold.check_ttl(d.ttl) from (select distinct e.ttl from unnest(p_leases) e) d;
  perform leasehold.pin_synchronous_commit();
  select coalesce(array_agg(c.name), '{}'), coalesce(array_agg(c.expires_at), '{}'), coalesce(array_agg(c.fence), '{}')
    into v_names, v_expires, v_fences
    from leasehold.confirm_leases(array(select e.name from unnest(p_leases) e), array(select e.token from unnest(p_leases) e),
                                  array(select e.ttl from unnest(p_leases) e)) c;
  -- not renewed: as a new snapshot has it (a release or takeover the update waited for is the reason)
  return query
  select e.name, c.name is not null, coalesce(c.expires_at, l.expires_at), coalesce(c.fence, l.fence),
         case when c.name is not null then 'renewed' when l.name is null then 'unknown' when l.token = e.token then 'expired'
              when l.token is null then 'released' else 'taken-over' end,
         now()
    from unnest(p_leases) with ordinality as e(name, token, ttl, n)
    left join unnest(v_names, v_expires, v_fences) as c(name, expires_at, fence) on c.name = e.name
    left join leasehold.leases l on l.name = e.name and c.name is null order by e.n;
end $$;

-- release: frees the lease only for its current token: a late release of an old holder changes nothing.
create function leasehold.release(p_name text, p_token uuid) returns boolean
language plpgsql volatile
set lock_timeout = '2s'
as $$
begin
  perform leasehold.pin_synchronous_commit();
  -- no scheduled run in flight: one update clearing end_runs' columns, without its planning and triggers
  update leasehold.leases l
     set token = null, expires_at = null, holder_key = null, released_at = now()
   where l.name = p_name and l.token = p_token and l.run_slot is null;
  if found then return true; end if;
  return exists (select 1 from leasehold.end_runs(array[p_name], array[p_token], null, null, null, null) e where e.released);
end $$;

-- holds_lease: the fence check, for WHERE clauses and triggers. FOR KEY SHARE: no takeover until
-- the transaction ends, while the holder's renewals still go through.
create function leasehold.holds_lease(p_name text, p_token uuid, p_fence bigint) returns boolean
language plpgsql volatile as $$
begin
  perform 1 from leasehold.leases l
   where l.name = p_name and l.token = p_token and l.fence = p_fence and l.expires_at > now()
     and l.epoch = leasehold.epoch() and not leasehold.run_timed_out(l.name, l.acquired_at)
     for key share of l;
  return found;
end $$;

-- assert_lease: holds_lease() raising LH003 with the reason; returns the fence. A lease confirmed
-- before a failover is refused (a release or takeover lost with it must not let the old token write).
create function leasehold.assert_lease(p_name text, p_token uuid, p_fence bigint) returns bigint
language plpgsql volatile as $$
declare
  r leasehold.leases; v_detail text; v_timeout bigint;
begin
  if leasehold.holds_lease(p_name, p_token, p_fence) then return p_fence; end if;
  select * into r from leasehold.leases l where l.name = p_name;
  select j.timeout_ms into v_timeout from leasehold.jobs j where j.name = p_name;
  v_detail := case
      when r.name is null then 'no such lease'
      when r.fence <> p_fence and r.token is null then format('the lease was force-released (fence is now %s, held by nobody)', r.fence)
      when r.fence <> p_fence then format('fence is now %s, held by %s', r.fence, r.holder)
      when r.token is null then 'the lease was released'
      when r.expires_at <= now() then 'the lease expired'
      when r.token <> p_token then 'the token does not match the lease'
      -- (else a timed-out run would pass for a lease unconfirmed since a failover)
      when leasehold.run_timed_out(r.name, r.acquired_at) then
        format('the run timed out: its job''s timeout of %s ms passed at %s', v_timeout, r.acquired_at + v_timeout * interval '1 millisecond')
    end;
  if v_detail is not null then
    raise exception 'lease "%" (fence %) is no longer held', p_name, p_fence
      using errcode = 'LH003', detail = v_detail, hint = 'Roll back: another holder may be running. Do not retry the write under this lease.';
  end if;
  -- unconfirmed since a failover: clients recognise the DETAIL's first words, renew and retry
  raise exception 'lease "%" (fence %) is no longer held', p_name, p_fence
    using errcode = 'LH003',
          detail = format('a database failover happened since the lease was last confirmed (epoch %s, now %s): '
                          'renew it, or roll back if it is lost', r.epoch, leasehold.epoch()),
          hint = 'Roll back, renew the lease (leasehold.renew_leases) and run the transaction again; if the renewal fails, the lease is lost.';
end $$;

-- force_release: frees a lease whatever its holder and takes the next fence, so the old holder's
-- writes are refused. With p_by the act is recorded and the run holding the lease ends lost.
create function leasehold.force_release(p_name text, p_by text default null)
returns table (released boolean, previous_holder text, previous_fence bigint, fence bigint)
language plpgsql volatile as $$
#variable_conflict use_column
declare
  old leasehold.leases; r leasehold.leases;
  v_why text := coalesce('the lease was force-released by ' || p_by, 'the lease was released by force (leasehold.force_release)');
begin
  perform leasehold.check_namespace(array[p_name]);
  if p_by is not null then
    perform leasehold.check_holder(p_by);
  end if;
  perform leasehold.pin_synchronous_commit();
  select * into old from leasehold.leases l where l.name = p_name for update;
  if not found then
    return query select false, null::text, null::bigint, null::bigint;
    return;
  end if;
  if old.run_slot is not null then
    perform leasehold.end_runs(array[p_name], null, array[old.run_fence], array['lost'], array[v_why], null);
  end if;
  if p_by is not null and old.token is not null then
    update leasehold.run_log x set outcome = 'lost', finished_at = now(), error = v_why
     where x.job = p_name and x.fence = old.fence and x.outcome = 'running';
  end if;
  update leasehold.leases l set token = null, expires_at = null, holder_key = null, released_at = now(), fence = leasehold.next_fence(l.fence)
   where l.name = p_name returning l.* into r;
  perform leasehold.record_action('force-released', p_name, coalesce(p_by, session_user::text), -- without by: the login role
    jsonb_build_object('released', old.token is not null, 'previous_holder', old.holder, 'previous_fence', old.fence, 'fence', r.fence));
  return query select old.token is not null, old.holder, old.fence, r.fence;
end $$;

-- record_skip: the caller did not run p_name, held by the holder acquire() named; one row per
-- (job, slot), false when the slot had one.
create function leasehold.record_skip(p_name text, p_recorded_by text, p_slot timestamptz default null)
returns boolean
language sql volatile as $$
  select leasehold.check_namespace(array[p_name]);
  select leasehold.check_job_owner(array[p_name]);
  select leasehold.check_holder(p_recorded_by);
  with inserted as (
    insert into leasehold.skips (job, slot, holder, holder_fence, holder_slot, held_for, recorded_by)
    select l.name, coalesce(p_slot, now()), l.holder, l.fence, l.last_slot, now() - l.acquired_at, p_recorded_by
      from leasehold.leases l where l.name = p_name
    on conflict do nothing returning 1)
  select exists (select 1 from inserted);
$$;

-- record_clock_step: stores a clock step's window, merged with those it overlaps; true when new.
create function leasehold.record_clock_step(p_from timestamptz, p_to timestamptz, p_holder text) returns boolean
language plpgsql volatile
set plan_cache_mode = force_custom_plan -- a generic plan would not know the window is recent and read all of missed
as $$
declare
  v_new boolean; v_from timestamptz; v_to timestamptz; v_prefixes text[];
begin
  if p_from is null or p_to is null or not isfinite(p_from) or not isfinite(p_to) or p_to <= p_from then
    raise exception 'leasehold: a clock step window needs finite times with from < to (got % .. %)', p_from, p_to using errcode = '22023';
  end if;
  perform leasehold.check_holder(p_holder);
  -- one writer at a time: concurrent reports of a step merge
  perform pg_advisory_xact_lock(7308604897068083571);
  update leasehold.clock_steps
     set from_time = least(from_time, p_from), to_time = greatest(to_time, p_to)
   where from_time <= p_to and p_from <= to_time;
  v_new := not found;
  if v_new then
    insert into leasehold.clock_steps (from_time, to_time, recorded_by) values (p_from, p_to, p_holder);
    delete from leasehold.clock_steps where id <= (select id from leasehold.clock_steps order by id desc offset 1000 limit 1);
    perform leasehold.record_action('clock-step', null, p_holder, jsonb_build_object('from', p_from, 'to', p_to));
  end if;
  -- the window's slots never existed: their missed rows go (bounds as values: the BRIN index applies)
  select min(w.from_time), max(w.to_time) into v_from, v_to from leasehold.clock_steps w where w.from_time <= p_to and p_from <= w.to_time;
  -- only of jobs the caller may act for: a service's report cannot clear another's history
  v_prefixes := leasehold.namespace_prefixes();
  delete from leasehold.missed m where m.recorded_at >= v_from and m.slot > v_from and m.slot <= v_to and leasehold.in_namespace(m.job, v_prefixes)
     and not exists (select 1 from leasehold.jobs j where j.name = m.job and not leasehold.may_act_as(j.owner_role));
  return v_new;
end $$;

-- sql/baseline/2_scheduler.sql
-- leasehold schema, part 2 of 6: scheduled jobs and slot claims. A job's lease row carries
-- last_slot, the newest slot anyone claimed.

create sequence leasehold.job_revisions;

-- Slots waiting for the running one to finish (overlap buffer-one and buffer-all, catch-up).
create table leasehold.buffered (
  job text not null, slot timestamp with time zone not null, buffered_at timestamp with time zone not null default now(),
  constraint buffered_pkey PRIMARY KEY (job, slot)
);

create table leasehold.worker_starts (
  holder_key bigint primary key, started_through timestamptz not null, taken_through timestamptz, updated_at timestamptz not null default now()
);
comment on table leasehold.worker_starts is
  'Per worker liveness key: through when its runs claimed ahead are started (start_tick), and the latest planned start of one a peer claimed again.';

-- A worker's share of its latest tick, once every slot of it is decided (report_share): a peer
-- whose own view of that share has the same digest leaves it out of its second pass.
create table leasehold.share_reports (
  holder_key bigint primary key, jobs integer not null, sum_a bigint not null, sum_b bigint not null,
  reported_by text not null, reported_at timestamptz not null default now()
);
comment on table leasehold.share_reports is
  'Per worker liveness key: the digest of the (job, slot) pairs its latest share claim decided (report_share), read by the peers'' second pass (reported_shares).';

create table leasehold.jobs (
  name text primary key,
  schedule text not null, timezone text, interval_ms bigint, ttl_ms bigint not null, overlap text not null, catch_up text not null,
  registered_by text not null, registered_at timestamp with time zone not null default now(),
  source text not null default 'code'::text, handler text, payload jsonb, defined_by text, -- jobs defined as data
  buffer_limit integer, starting_deadline_ms bigint, timeout_ms bigint, jitter_ms bigint, -- null: the default (or none)
  removed_at timestamp with time zone, paused_at timestamp with time zone, paused_by text, pause_reason text,
  revision bigint not null default nextval('leasehold.job_revisions'::regclass),
  owner_role text, -- who registered or defined it (null: owner or superuser): only it changes it, its workers run it
  constraint jobs_jitter_ms_check CHECK ((jitter_ms > 0)),
  constraint jobs_source_check CHECK ((source = ANY (ARRAY['code'::text, 'data'::text]))),
  constraint jobs_timeout_ms_check CHECK ((timeout_ms > 0))
);
comment on table leasehold.jobs is
  'The latest definition of each scheduled job, as registered by a worker.';
create unique index jobs_revision on leasehold.jobs (revision);

create table leasehold.missed (
  job text not null, slot timestamp with time zone not null, reason text not null, recorded_by text not null,
  recorded_at timestamp with time zone not null default now(),
  constraint missed_pkey PRIMARY KEY (job, slot)
);
create index missed_recorded_brin on leasehold.missed using brin (recorded_at) WITH (pages_per_range='32');

create table leasehold.worker_handlers (
  worker_key bigint primary key, holder text not null, handlers text[] not null, registered_at timestamp with time zone not null default now(),
  role text not null default SESSION_USER -- the worker's login role: which jobs its feed shows (may_run)
);
comment on table leasehold.worker_handlers is
  'The handler names each scheduler worker registered, by its liveness key (live while liveness_locks() lists it).';

-- jobs_revision: every write of a jobs row takes the next revision, one writer at a time. A write
-- not marked by leasehold.job_writer is a code job's registration, which takes a data job's name over.
create function leasehold.jobs_revision() returns trigger
language plpgsql volatile as $$
begin
  perform pg_advisory_xact_lock(7308604897068083572);
  if current_setting('leasehold.job_writer', true) is distinct from 'schedules' then
    if tg_op = 'UPDATE' and old.source = 'data' then
      update leasehold.leases l set suspended = case when old.paused_at is null then null else 'paused' end where l.name = new.name;
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

-- notify_changes: the table's name on channel leasehold_changes (no data: any role may listen).
create function leasehold.notify_changes() returns trigger
language plpgsql volatile as $$
begin
  perform pg_notify('leasehold_changes', tg_argv[0]);
  return null;
end $$;

-- timezone_problem: why p_timezone is not a name both PostgreSQL and the workers' Intl accept, or
-- null (both ignore case, so only the area and the initials are checked).
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

-- register_jobs: upserts job definitions and their lease rows; returns each last_slot (catch-up).
-- A changed schedule or timezone moves last_slot to now(): the old schedule's slots never existed.
create function leasehold.register_jobs(
  p_names text[], p_schedules text[], p_timezones text[], p_interval_ms bigint[], p_ttl_ms bigint[],
  p_overlaps text[], p_catch_ups text[], p_holder text, p_timeout_ms bigint[] default null
) returns table (name text, last_slot timestamptz, database_time timestamptz, last_slot_unstarted boolean)
language plpgsql volatile
set plan_cache_mode = force_custom_plan
set jit = off
as $$
#variable_conflict use_column
declare
  v_bad bigint;
begin
  perform leasehold.check_namespace(p_names);
  perform leasehold.check_job_owner(p_names);
  perform leasehold.check_name(n) from unnest(p_names) as n;
  if p_timeout_ms is not null and cardinality(p_timeout_ms) is distinct from cardinality(p_names) then
    raise exception 'register_jobs needs as many timeouts as names (% names, % timeouts)',
      coalesce(cardinality(p_names), 0), cardinality(p_timeout_ms) using errcode = '22023';
  end if;
  select t into v_bad from unnest(p_timeout_ms) t where t < 1 or t > 31622400000 limit 1;
  if found then
    raise exception 'a job timeout must be between 1 ms and 366 days (got % ms)', v_bad using errcode = '22023';
  end if;
  insert into leasehold.leases (name) select n from unnest(p_names) as n on conflict do nothing;
  update leasehold.leases l set last_slot = greatest(l.last_slot, now())
    from unnest(p_names, p_schedules, p_timezones) as i(name, schedule, timezone) join leasehold.jobs j on j.name = i.name
   where l.name = i.name and l.last_slot is not null and (j.schedule, j.timezone) is distinct from (i.schedule, i.timezone);
  -- a changed definition is an act on the job: recorded
  with written as (
    insert into leasehold.jobs as j (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, timeout_ms, registered_by, owner_role)
    select i.*, p_holder, leasehold.acting_role()
      from unnest(p_names, p_schedules, p_timezones, p_interval_ms, p_ttl_ms, p_overlaps, p_catch_ups, p_timeout_ms) as i
    on conflict (name) do update
       set schedule = excluded.schedule, timezone = excluded.timezone, interval_ms = excluded.interval_ms,
           ttl_ms = excluded.ttl_ms, overlap = excluded.overlap, catch_up = excluded.catch_up, timeout_ms = excluded.timeout_ms,
           registered_by = excluded.registered_by, registered_at = now(), owner_role = coalesce(j.owner_role, excluded.owner_role)
     where (j.schedule, j.timezone, j.interval_ms, j.ttl_ms, j.overlap, j.catch_up, j.timeout_ms)
           is distinct from (excluded.schedule, excluded.timezone, excluded.interval_ms, excluded.ttl_ms, excluded.overlap,
                             excluded.catch_up, excluded.timeout_ms)
    returning j.name, j.schedule, j.ttl_ms, j.overlap, j.timeout_ms, xmax <> 0 as updated
  )
  insert into leasehold.actions (action, job, actor, detail)
  select 'job-changed', w.name, p_holder,
         jsonb_build_object('schedule', w.schedule, 'ttl_ms', w.ttl_ms, 'overlap', w.overlap, 'timeout_ms', w.timeout_ms)
    from written w where w.updated;
  -- last_slot_unstarted: claimed ahead by a holder gone before its start (killed in the lead); the
  -- starting worker's catch-up claims it again (a sole worker's slot ran nowhere otherwise)
  return query
  select l.name, l.last_slot, now(),
         leasehold.unstarted_ahead(l, (select s.started_through from leasehold.worker_starts s where s.holder_key = l.holder_key))
           and leasehold.is_free(l)
    from unnest(p_names) n(name) join leasehold.leases l on l.name = n.name;
end $$;

-- may_run: whether schedule_changes shows job j to a worker of role p_role: j is nobody's, p_role's,
-- a role's it is a member of (or p_role owns the schema or is a superuser); inside p_role's namespaces.
create function leasehold.may_run(p_role text, j leasehold.jobs) returns boolean
language sql stable as $$
  select to_regrole(quote_ident(p_role)) is not null and leasehold.may_act_as(j.owner_role, p_role)
     and leasehold.in_namespace(j.name, leasehold.namespace_prefixes(p_role));
$$;

-- live_runners: the live workers with j's handler that are shown j (not another service's namesake).
create function leasehold.live_runners(j leasehold.jobs) returns integer
language sql stable as $$
  select count(*)::integer from leasehold.worker_handlers w join leasehold.liveness_locks() k on k.key = w.worker_key
   where j.handler = any (w.handlers) and leasehold.may_run(w.role, j);
$$;

-- unhandled_schedules: the caller's live data jobs that no live runner has (each role's first worker records them missed).
create function leasehold.unhandled_schedules()
returns table (job text, handler text, schedule text, timezone text, interval_ms bigint, starting_deadline_ms bigint, since timestamptz, database_time timestamptz)
language sql stable as $$
  select j.name, j.handler, j.schedule, j.timezone, j.interval_ms, j.starting_deadline_ms,
         greatest(j.registered_at, (select l.last_slot from leasehold.leases l where l.name = j.name)), now()
    from leasehold.jobs j
   where j.source = 'data' and j.removed_at is null and j.paused_at is null
     and leasehold.may_act_as(j.owner_role) and leasehold.in_namespace(j.name, leasehold.namespace_prefixes())
     and leasehold.live_runners(j) = 0
   order by j.name limit 10000;
$$;

-- slot_to_answer: whether claim() has more to say of slot p_slot of lease l than "claimed already":
-- the job unknown (l null: a left join) or suspended, the slot not claimed yet, or claimed ahead
-- and never marked started (p_started_through: its holder's mark). SQL, inlined where it is used.
create function leasehold.slot_to_answer(l leasehold.leases, p_slot timestamptz, p_started_through timestamptz) returns boolean
language sql immutable as $$
  select l.name is null or l.suspended is not null or l.last_slot is null or p_slot > l.last_slot
      or (p_slot = l.last_slot and l.token is not null and l.run_slot = l.last_slot and l.acquired_at < l.run_slot
          and l.run_started_at > coalesce(p_started_through, '-infinity'));
$$;

-- unstarted_ahead: whether lease l's last slot was claimed ahead under a liveness key and never
-- marked started (p_started_through: its holder's mark, start_tick()): claim() takes such a slot
-- back at its slot once the lease is free, and register_jobs() and schedule_changes() tell a
-- starting worker so. SQL, inlined where it is used; never null.
create function leasehold.unstarted_ahead(l leasehold.leases, p_started_through timestamptz) returns boolean
language sql immutable as $$
  select coalesce(l.token is not null and l.holder_key is not null and l.run_slot = l.last_slot and l.run_fence = l.fence
                  and l.acquired_at < l.run_slot and l.run_started_at > coalesce(p_started_through, '-infinity'), false);
$$;

-- batch_token: the token of the p_n-th row of one claim() call: 16 bytes of SHA-256 over a seed of
-- 16 random bytes drawn once per call, and p_n. Unguessable without the seed, as a random uuid is;
-- one draw per call, not one per row (each gen_random_uuid() makes a system call: 3.5 us a row measured).
create function leasehold.batch_token(p_seed bytea, p_n bigint) returns uuid
language sql immutable as $$
  select encode(substr(sha256(p_seed || int8send(p_n)), 1, 16), 'hex')::uuid;
$$;

-- claim: the scheduler's claim (docs/sql-api.md): parallel arrays, a fixed number of set-based
-- statements for any number of jobs. Each slot is claimed at most once; a held lease records one
-- skip per (job, slot). A slot claimed ahead whose holder never marked its start (start_tick) is
-- claimed again at its slot once the lease is free: the holder's run is recorded aborted.
create function leasehold.claim(
  p_jobs text[], p_slots timestamptz[], p_ttl_ms bigint[], p_modes text[], p_caps integer[], p_holder text,
  p_holder_key bigint default null, p_every boolean default false, p_ahead_ms bigint default null, p_starts timestamptz[] default null
) returns table (
  job text, slot timestamptz, claimed boolean, reason text, token uuid, fence bigint, expires_at timestamptz,
  previous_slot timestamptz, holder text, holder_fence bigint, holder_slot timestamptz, holder_since timestamptz,
  skip_recorded boolean, buffered boolean, database_time timestamptz, took_over boolean
)
language plpgsql volatile
set lock_timeout = '2s'
set plan_cache_mode = force_custom_plan
set jit = off
-- lease rows are hot: by default 2,500 jobs were hashed against all 27,500 leases (24 ms, probes: 7)
set random_page_cost = 1.1
as $$
#variable_conflict use_column
declare
  v_asked_ttls interval[] := array(select t * interval '1 millisecond' from unnest(p_ttl_ms) t);
  v_ahead interval := p_ahead_ms * interval '1 millisecond';
  v_n integer := coalesce(cardinality(p_jobs), 0);
  -- what step 1 locked (v_slots: the slot claimed, a buffered one may come first; v_wanted: asked for)
  v_at integer[]; v_jobs text[]; v_slots timestamptz[]; v_wanted timestamptz[]; v_ttls interval[]; v_modes text[];
  v_caps integer[]; v_previous timestamptz[]; v_held boolean[]; v_fences bigint[]; v_new_fences bigint[];
  -- takeovers of a run in flight; grants not claim()'s (a run_log row may run); re-claims, refused ones
  v_taken_names text[]; v_taken_fences bigint[]; v_older text[];
  v_re_names text[]; v_re_fences bigint[]; v_re_keys bigint[]; v_re_starts timestamptz[]; v_refused text[];
  -- what step 3 claimed
  c_at integer[]; c_jobs text[]; c_slots timestamptz[]; c_tokens uuid[]; c_fences bigint[]; c_expires timestamptz[];
  c_previous timestamptz[]; c_held boolean[]; c_modes text[];
  v_epoch integer := leasehold.epoch();
  v_incarnation text := leasehold.liveness_incarnation(p_holder_key);
  v_queued boolean;
  v_seed bytea := uuid_send(gen_random_uuid()); -- the tokens of this call (batch_token)
begin
  perform leasehold.check_namespace(p_jobs);
  perform leasehold.check_job_owner(p_jobs); -- another service's jobs are not ours to run (a probe a job)
  perform leasehold.check_holder(p_holder);
  if p_ahead_ms is not null and (p_ahead_ms < 0 or p_ahead_ms > 10000) then
    raise exception 'claim: ahead_ms must be between 0 and 10000 (got %)', p_ahead_ms using errcode = '22023';
  end if;
  if p_starts is not null and cardinality(p_starts) <> v_n then
    raise exception 'claim: as many starts as jobs are needed (% jobs)', v_n using errcode = '22023';
  end if;
  perform leasehold.check_claim_requests(p_jobs, p_slots, v_asked_ttls, p_modes, p_caps);
  if v_n = 0 then return; end if;
  -- A second pass over the slots its peers claimed already (almost always every one): nothing to
  -- claim or report, found with one read of each lease instead of steps 1 and 4's two. The test
  -- is step 4's (slot_to_answer); step 1 claims no slot it leaves out.
  if not p_every and p_ahead_ms is null and not exists (
    select 1 from unnest(p_jobs, p_slots) i(job, slot) left join leasehold.leases l on l.name = i.job
     where leasehold.slot_to_answer(l, i.slot, (select s.started_through from leasehold.worker_starts s where s.holder_key = l.holder_key))) then
    return;
  end if;
  -- queued slots (buffered, catch-up): almost never; an empty table answers without a probe per job
  -- (and, in a statement of its own, without planning `= any (p_jobs)`: 3 ms for 10,000 jobs)
  v_queued := exists (select 1 from leasehold.buffered);
  if v_queued then v_queued := exists (select 1 from leasehold.buffered b where b.job = any (p_jobs)); end if;
  perform leasehold.pin_synchronous_commit();

  -- 1. Lock the rows this call may claim (SKIP LOCKED: workers share a tick's jobs; calls over the
  --    same jobs at once split them where their scans meet. No `order by random()`: it sorted
  --    every locked row, 1-2 us a job, for an order nothing needs).
  select coalesce(array_agg(x.at), '{}'), coalesce(array_agg(x.job), '{}'), coalesce(array_agg(x.claim_slot), '{}'),
         coalesce(array_agg(x.slot), '{}'), coalesce(array_agg(x.ttl), '{}'), coalesce(array_agg(x.mode), '{}'), coalesce(array_agg(x.cap), '{}'),
         coalesce(array_agg(x.last_slot), '{}'), coalesce(array_agg(x.held), '{}'), coalesce(array_agg(x.fence), '{}'),
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
        left join leasehold.worker_starts s on s.holder_key = l.holder_key
        join (
          select i.at, i.job, i.slot, i.ttl, i.mode, i.cap,
                 case when not v_queued then i.slot else least(i.slot, coalesce(
                   (select min(b.slot) from leasehold.buffered b
                     where b.job = i.job
                       and b.slot > coalesce((select l2.last_slot from leasehold.leases l2 where l2.name = i.job), '-infinity')
                       -- a queued slot whose skip is final never runs: not in front of later ones
                       and not (i.mode = 'exclusive' and i.cap = 0
                                and exists (select 1 from leasehold.skips k where k.job = b.job and k.slot = b.slot))),
                   i.slot)) end as claim_slot
            from unnest(p_jobs, p_slots, v_asked_ttls, p_modes, p_caps) with ordinality as i(job, slot, ttl, mode, cap, at)
        ) w on w.job = l.name
       where case when v_ahead is null then w.claim_slot <= now()
                  -- ahead: due within v_ahead, from a lease free in the plainest sense
                  else w.claim_slot <= now() + v_ahead and w.claim_slot = w.slot and w.mode in ('exclusive', 'replace')
                       and l.token is null and l.run_slot is null and (l.run_fence = l.fence or l.fence = 0) end
         and l.suspended is null
         -- one CASE: the slot guard first, is_free() last (a slot claimed already asks nothing more)
         and case
               when l.last_slot is null or (w.slot > l.last_slot and w.claim_slot > l.last_slot)
                 then w.mode in ('replace', 'allow') or l.token is null or leasehold.is_free(l)
               -- the slot itself again: claimed ahead under a liveness key, never marked started,
               -- and the lease free (a re-claim is never a claim ahead)
               when v_ahead is not null or w.slot is distinct from l.last_slot or w.claim_slot <> w.slot or w.mode = 'allow'
                    or not leasehold.unstarted_ahead(l, s.started_through) then false
               else leasehold.is_free(l)
             end
         for update of l skip locked
    ) x;

  -- A re-claim, under the lock of the holder's worker_starts row (start_tick takes it too): a run
  -- marked started meanwhile is left to it; the others are taken (the latest planned start kept in
  -- taken_through for the holder's next mark) and their runs recorded aborted.
  if v_re_names is not null then
    insert into leasehold.worker_starts (holder_key, started_through)
    select distinct k, '-infinity'::timestamptz from unnest(v_re_keys) k order by 1
    on conflict do nothing;
    perform 1 from leasehold.worker_starts s where s.holder_key = any (v_re_keys) order by s.holder_key for update;
    select array_agg(r.name) into v_refused
      from unnest(v_re_names, v_re_keys, v_re_starts) r(name, key, planned)
      join leasehold.worker_starts s on s.holder_key = r.key
     where r.planned <= s.started_through;
  end if;

  -- 2. Leave out the refused re-claims, and before a takeover the slots with a final skip (a
  --    statement after the lock sees it; step 3 checks too, but the run recorded lost must be
  --    one of a row step 3 claims).
  if v_refused is not null or v_taken_names is not null or v_older is not null then
    select coalesce(array_agg(k.at), '{}'), coalesce(array_agg(k.job), '{}'), coalesce(array_agg(k.claim_slot), '{}'),
           coalesce(array_agg(k.wanted), '{}'), coalesce(array_agg(k.ttl), '{}'), coalesce(array_agg(k.mode), '{}'), coalesce(array_agg(k.cap), '{}'),
           coalesce(array_agg(k.previous_slot), '{}'), coalesce(array_agg(k.held), '{}'), coalesce(array_agg(k.fence), '{}')
      into v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_fences
      from unnest(v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_fences)
             k(at, job, claim_slot, wanted, ttl, mode, cap, previous_slot, held, fence)
     where not (k.job = any (coalesce(v_refused, '{}')))
       and not ((v_taken_names is not null or v_older is not null) and k.mode = 'exclusive' and k.cap = 0
                and exists (select 1 from leasehold.skips s where s.job = k.job and s.slot = k.claim_slot));
  end if;
  if v_refused is not null then
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
    perform leasehold.end_runs(v_re_names, null, v_re_fences, array_fill('aborted'::text, array[cardinality(v_re_names)]), array_fill(
      'not started: its lease was free (expired, or its holder gone) before the start; run by ' || p_holder, array[cardinality(v_re_names)]), null);
  end if;

  -- A takeover: the run in flight, and a run_log row still running under an older grant, end lost.
  if v_taken_names is not null then
    perform leasehold.end_runs(
      array(select t.name from unnest(v_taken_names, v_taken_fences) t(name, fence) where t.name = any (v_jobs)), null,
      array(select t.fence from unnest(v_taken_names, v_taken_fences) t(name, fence) where t.name = any (v_jobs)),
      array_fill('lost'::text, array[cardinality(v_taken_names)]), array_fill('lease taken over by ' || p_holder, array[cardinality(v_taken_names)]), null);
  end if;
  if v_older is not null then
    update leasehold.run_log r set outcome = 'lost', finished_at = now(), error = 'lease taken over by ' || p_holder
     where r.job = any (v_older) and r.job = any (v_jobs) and r.outcome = 'running';
  end if;

  -- 3. Claim what is locked and still claimable. A skip recorded under overlap 'skip' is final:
  --    this snapshot, after the locks, sees every skip a peer committed before step 1's lock.
  v_new_fences := leasehold.fences_after(v_fences, v_epoch);
  with claiming as (
    select k.at, k.job as name, k.claim_slot, k.wanted as wanted_slot, k.ttl, k.mode, k.cap, k.previous_slot, k.held, k.new_fence
      from unnest(v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_new_fences)
             k(at, job, claim_slot, wanted, ttl, mode, cap, previous_slot, held, new_fence)
     where not (k.mode = 'exclusive' and k.cap = 0 and exists (select 1 from leasehold.skips s where s.job = k.job and s.slot = k.claim_slot))
  ),
  -- under overlap 'allow' only the fence and the slot change; every other claim takes the lease
  claimed_lease as (
    update leasehold.leases l
       set fence = c.new_fence, last_slot = c.claim_slot, token = leasehold.batch_token(v_seed, c.at), holder = p_holder,
           holder_key = p_holder_key, acquired_at = now(), expires_at = now() + c.ttl, released_at = null, ttl = c.ttl,
           epoch = v_epoch, holder_incarnation = v_incarnation,
           -- the run, until finish_runs() writes its history row; it starts now, or ahead at its plan
           run_slot = c.claim_slot, run_fence = c.new_fence, run_holder = p_holder,
           run_started_at = case when v_ahead is null then clock_timestamp()
                                 else greatest(clock_timestamp(), coalesce(p_starts[c.at], c.claim_slot), c.claim_slot) end
      from claiming c
     where l.name = c.name and c.mode <> 'allow'
    returning c.at, l.name, c.claim_slot, c.wanted_slot, c.cap, c.mode, l.token, l.fence, l.expires_at, c.previous_slot, c.held
  ),
  claimed_allow as (
    update leasehold.leases l set fence = c.new_fence, last_slot = c.claim_slot
      from claiming c where l.name = c.name and c.mode = 'allow'
    returning c.at, l.name, c.claim_slot, c.wanted_slot, c.cap, c.mode, l.token, l.fence, l.expires_at, c.previous_slot, c.held
  ),
  claimed as (select * from claimed_lease union all select * from claimed_allow),
  unbuffered as (
    delete from leasehold.buffered b using claimed c where v_queued and b.job = c.name and b.slot <= c.claim_slot
  ),
  rebuffered as (
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

  -- overlap 'allow': a run_log row from the start (own statement: no run_log trigger otherwise)
  if 'allow' = any (c_modes) then
    insert into leasehold.run_log (job, slot, fence, holder)
    select k.job, k.slot, k.fence, p_holder from unnest(c_jobs, c_slots, c_fences, c_modes) k(job, slot, fence, mode) where k.mode = 'allow';
  end if;

  return query
  select k.job, k.slot, true, 'claimed'::text, case when k.mode <> 'allow' then k.token end, k.fence,
         case when k.mode <> 'allow' then k.expires end, k.previous_slot, p_holder, null::bigint, null::timestamptz,
         null::timestamptz, false, false, now(), k.mode <> 'allow' and k.held
    from unnest(c_jobs, c_slots, c_tokens, c_fences, c_expires, c_previous, c_held, c_modes) k(job, slot, token, fence, expires, previous_slot, held, mode);
  if v_ahead is not null then return; end if; -- the rest is the claim at the slot's

  -- 4. Everything not claimed: say why, record a skip once per slot, buffer it if the policy says
  --    so. Without p_every, a slot already claimed is passed over before anything is asked.
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
             -- claimed ahead, not started: ask again when the lease expires
             when i.slot = l.last_slot and i.mode <> 'allow' and leasehold.unstarted_ahead(l, s.started_through)
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
       and (p_every or leasehold.slot_to_answer(l, i.slot, s.started_through))
  ),
  -- held, as the newest row version says under a lock no claim passes (a row locked or changed
  -- meanwhile: holder-committing); a slot whose skip is recorded takes no lock, no xid
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
    select h.job, h.slot, h.holder, h.fence, h.holder_slot, now() - h.acquired_at, p_holder from held h
    on conflict do nothing
    returning skips.job, skips.slot
  ),
  buffering as (
    insert into leasehold.buffered (job, slot)
    select h.job, h.slot from held h where h.cap > 0 and (select count(*) from leasehold.buffered b where b.job = h.job) < h.cap
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
  select a.job, a.slot, false, a.why, null::uuid, null::bigint, case when a.why = 'held-ahead' then a.l_expires_at end,
         null::timestamptz, a.l_holder, a.l_fence, a.l_holder_slot, a.l_acquired_at, a.skip_recorded, a.buffered, now(), false
    from answered a
   where p_every or a.why not in ('slot-taken', 'slot-skipped', 'held') or a.skip_recorded or a.buffered;
end $$;

-- start_tick: before starting them, a worker marks the runs it claimed ahead planned by p_through
-- as started. False: a peer may have claimed one again.
create function leasehold.start_tick(p_holder_key bigint, p_through timestamptz) returns boolean
language plpgsql volatile
set lock_timeout = '2s'
as $$
declare
  v_old timestamptz; v_taken timestamptz; v_n integer;
begin
  if p_holder_key is null or p_through is null then
    raise exception 'start_tick: holder_key and through must not be null' using errcode = '22023';
  end if;
  perform leasehold.pin_synchronous_commit();
  insert into leasehold.worker_starts (holder_key, started_through) values (p_holder_key, '-infinity') on conflict do nothing;
  get diagnostics v_n = row_count;
  select w.started_through, w.taken_through into v_old, v_taken from leasehold.worker_starts w where w.holder_key = p_holder_key for update;
  update leasehold.worker_starts w set started_through = greatest(w.started_through, p_through, clock_timestamp()), updated_at = now()
   where w.holder_key = p_holder_key;
  -- once per key: rows of dead keys unchanged for a week go
  if v_n > 0 then
    delete from leasehold.worker_starts w
     where w.updated_at < now() - interval '7 days' and not exists (select 1 from leasehold.liveness_locks() k where k.key = w.holder_key);
  end if;
  return v_taken is null or v_taken <= v_old;
end $$;

-- report_share: the worker of p_holder_key decided every slot of its share of a tick (claimed,
-- held, taken: nothing left to retry); the share's digest is p_jobs (job, slot) pairs and two sums
-- of a hash of each pair (docs/sql-api.md). Replaces the key's previous report.
create function leasehold.report_share(p_holder_key bigint, p_jobs integer, p_sum_a bigint, p_sum_b bigint) returns void
language plpgsql volatile as $$
declare
  v_first boolean;
begin
  if p_holder_key is null or p_jobs is null or p_jobs < 1 or p_sum_a is null or p_sum_b is null then
    raise exception 'report_share: holder_key, jobs (1 or more) and both sums are needed' using errcode = '22023';
  end if;
  insert into leasehold.share_reports as r (holder_key, jobs, sum_a, sum_b, reported_by)
  values (p_holder_key, p_jobs, p_sum_a, p_sum_b, session_user)
  on conflict (holder_key) do update
     set jobs = excluded.jobs, sum_a = excluded.sum_a, sum_b = excluded.sum_b, reported_by = excluded.reported_by, reported_at = now()
  returning r.xmax = 0 into v_first;
  -- once per key: the reports of keys no longer live go
  if v_first then
    delete from leasehold.share_reports r
     where r.holder_key <> p_holder_key and not exists (select 1 from leasehold.liveness_locks() k where k.key = r.holder_key);
  end if;
end $$;

-- reported_shares: which of p_holder_keys reported (report_share) exactly the share the caller
-- expects of it (element i: p_jobs pairs, the two sums), from a live key and the caller's own login
-- role. Another role's report, or a dead worker's, never spares a peer its second pass.
create function leasehold.reported_shares(p_holder_keys bigint[], p_jobs integer[], p_sums_a bigint[], p_sums_b bigint[]) returns table (holder_key bigint)
language sql stable as $$
  select r.holder_key
    from unnest(p_holder_keys, p_jobs, p_sums_a, p_sums_b) as e(key, jobs, a, b)
    join leasehold.share_reports r on r.holder_key = e.key and r.jobs = e.jobs and r.sum_a = e.a and r.sum_b = e.b
   where r.reported_by = session_user::text and r.holder_key in (select k.key from leasehold.liveness_locks() k);
$$;

-- enqueue_slots: queues slots after last_slot, run in order as the lease is free (catch-up all).
create function leasehold.enqueue_slots(p_job text, p_slots timestamptz[]) returns integer
language sql volatile as $$
  select leasehold.check_namespace(array[p_job]);
  select leasehold.check_job_owner(array[p_job]);
  select leasehold.check_name(p_job);
  with inserted as (
    insert into leasehold.buffered (job, slot)
    select p_job, s from unnest(p_slots) as s where s > coalesce((select l.last_slot from leasehold.leases l where l.name = p_job), '-infinity')
    on conflict do nothing
    returning 1)
  select count(*)::integer from inserted;
$$;

-- record_missed_slots: in one statement (after a downtime every job has some); not the slots that
-- ran, were skipped or lie in a clock step.
create function leasehold.record_missed_slots(p_jobs text[], p_slots timestamptz[], p_reason text, p_holder text)
returns table (job text, slot timestamptz)
language sql volatile
set plan_cache_mode = force_custom_plan
set jit = off
as $$
  select leasehold.check_namespace(p_jobs);
  select leasehold.check_job_owner(p_jobs);
  select leasehold.check_holder(p_holder), leasehold.check_holder(p_reason);
  select leasehold.check_name(j) from unnest(p_jobs) j where j is not null;
  insert into leasehold.missed as m (job, slot, reason, recorded_by)
  select i.job, i.slot, p_reason, p_holder from unnest(p_jobs, p_slots) as i(job, slot)
   where i.job is not null and i.slot is not null
     and not exists (select 1 from leasehold.skips k where k.job = i.job and k.slot = i.slot)
     and not exists (select 1 from leasehold.runs r where r.job = i.job and r.slot = i.slot)
     and not exists (select 1 from leasehold.clock_steps w where i.slot > w.from_time and i.slot <= w.to_time)
  on conflict do nothing
  returning m.job, m.slot;
$$;

-- run_timed_out: the deadline rule of holds_lease: the run granted at p_acquired_at outlived the job's timeout.
create function leasehold.run_timed_out(p_job text, p_acquired_at timestamptz) returns boolean
language sql stable as $$
  select exists (select 1 from leasehold.jobs j
                  where j.name = p_job and j.timeout_ms is not null and now() >= p_acquired_at + j.timeout_ms * interval '1 millisecond');
$$;

create trigger jobs_revision BEFORE INSERT OR UPDATE ON leasehold.jobs FOR EACH ROW EXECUTE FUNCTION leasehold.jobs_revision();
create trigger jobs_notify AFTER INSERT OR UPDATE ON leasehold.jobs FOR EACH STATEMENT EXECUTE FUNCTION leasehold.notify_changes('jobs');

-- sql/baseline/3_history.sql
-- leasehold schema, part 3 of 6: run history. run_counts and slow_runs (kept by triggers) spare
-- the summaries a scan of run_log.

-- run_outcomes: the values of runs.outcome. run_log's check spells them out (a function there would
-- run with the reader's rights); test/sql/contract.test.ts holds the two lists together.
create function leasehold.run_outcomes() returns text[]
language sql immutable as $$
  select array['running', 'succeeded', 'failed', 'lost', 'aborted', 'timed-out'];
$$;

create table leasehold.run_counts (
  bucket smallint not null, shard smallint not null, minute bigint not null, runs bigint not null,
  constraint run_counts_pkey PRIMARY KEY (bucket, shard),
  constraint run_counts_bucket_check CHECK (((bucket >= 0) AND (bucket < 1500))),
  constraint run_counts_shard_check CHECK (((shard >= 0) AND (shard < 64)))
);
comment on table leasehold.run_counts is
  'Finished runs per minute of their start over the last 25 hours (a ring of 1,500 minutes per shard; sum the shards of a minute, ignore minutes outside the window).';

create table leasehold.run_log (
  id bigserial,
  job text not null, slot timestamp with time zone not null, fence bigint not null, holder text not null,
  started_at timestamp with time zone not null default clock_timestamp(), finished_at timestamp with time zone,
  outcome text not null default 'running'::text, error text, attempts integer not null default 1,
  trigger text not null default 'schedule'::text, requested_by text, request_id bigint, -- what started it
  constraint runs_pkey PRIMARY KEY (job, fence), -- a run is its job's fence; id is for readers (no index: one b-tree less per run)
  constraint runs_outcome_known CHECK ((outcome = ANY (ARRAY['running', 'succeeded', 'failed', 'lost', 'aborted', 'timed-out']))),
  constraint runs_trigger_check CHECK ((trigger = ANY (ARRAY['schedule'::text, 'manual'::text, 'backfill'::text])))
);
comment on table leasehold.run_log is
  'History rows of runs: one per run, written when it ends (or when it starts, for runs of run now, backfill, start_run and overlap allow). Read leasehold.runs, which adds the runs in flight.';
create index runs_failing on leasehold.run_log (started_at DESC) WHERE (outcome = ANY (ARRAY['failed'::text, 'lost'::text, 'timed-out'::text]));
create index runs_finished_brin on leasehold.run_log using brin (finished_at) WITH (pages_per_range='32');
create index runs_job_started on leasehold.run_log (job, started_at DESC);
create index runs_running on leasehold.run_log (job) WHERE (outcome = 'running'::text);
create index runs_started_brin on leasehold.run_log using brin (started_at) WITH (pages_per_range='32');

create table leasehold.slow_runs (job text primary key, last_started timestamp with time zone not null);
comment on table leasehold.slow_runs is
  'Per job, the latest start of a finished run that took at least half its interval: the only jobs whose p95 can creep.';

-- run_start: the handler's start (the worker's estimate of the database clock), kept between the claim and now.
create function leasehold.run_start(p_claimed timestamptz, p_started_ms double precision) returns timestamptz
language sql stable as $$
  select case when p_started_ms is null then p_claimed else least(greatest(p_claimed, to_timestamp(p_started_ms / 1000.0)), now()) end;
$$;

-- start_run: records a run under a held lease (LH003 otherwise), once per fence, and shows the name
-- as a job (schedule 'external') unless a job of that name is scheduled.
create function leasehold.start_run(p_name text, p_token uuid, p_fence bigint, p_slot timestamptz default null, p_interval_ms bigint default null)
returns timestamptz
language plpgsql volatile as $$
declare
  v_slot timestamptz := coalesce(p_slot, now());
  l leasehold.leases;
begin
  perform leasehold.check_namespace(array[p_name]);
  perform leasehold.check_schedule_field(p_interval_ms is null or p_interval_ms between 1 and 366::bigint * 86400000, 'interval_ms',
    'must be from 1 millisecond to 366 days');
  perform leasehold.assert_lease(p_name, p_token, p_fence);
  select * into l from leasehold.leases x where x.name = p_name;
  insert into leasehold.jobs as j (name, schedule, interval_ms, ttl_ms, overlap, catch_up, registered_by)
  values (p_name, 'external', p_interval_ms, (extract(epoch from l.ttl) * 1000)::bigint, 'skip', 'none', l.holder)
  on conflict (name) do update set interval_ms = coalesce(excluded.interval_ms, j.interval_ms), ttl_ms = excluded.ttl_ms
   where j.schedule = 'external' and (coalesce(excluded.interval_ms, j.interval_ms), excluded.ttl_ms) is distinct from (j.interval_ms, j.ttl_ms);
  insert into leasehold.run_log (job, slot, fence, holder) values (p_name, v_slot, p_fence, l.holder) on conflict (job, fence) do nothing;
  return v_slot;
end $$;

-- finish_runs: ends runs (a run in flight on its lease row through end_runs, a run_log row in place)
-- and releases the leases given with their tokens.
create function leasehold.finish_runs(
  p_jobs text[], p_fences bigint[], p_tokens uuid[], p_outcomes text[], p_errors text[], p_attempts integer[], p_started_ms double precision[] default null
) returns table (job text, fence bigint, recorded boolean, released boolean, next_buffered_slot timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
set plan_cache_mode = force_custom_plan
set jit = off
as $$
#variable_conflict use_column
declare
  v_n integer := coalesce(cardinality(p_jobs), 0);
  v_bad text; v_released text[]; v_queued boolean;
  v_recorded text[]; -- the runs recorded from their lease rows, as 'job#fence'
begin
  perform leasehold.check_namespace(p_jobs);
  perform leasehold.pin_synchronous_commit();
  if array[coalesce(cardinality(p_fences), 0), coalesce(cardinality(p_tokens), 0), coalesce(cardinality(p_outcomes), 0),
           coalesce(cardinality(p_errors), v_n), coalesce(cardinality(p_attempts), v_n), coalesce(cardinality(p_started_ms), v_n)]
     <> array_fill(v_n, array[6]) then
    raise exception 'finish_runs: as many fences, tokens, outcomes, errors, attempts and start times as jobs are needed (% jobs)', v_n
      using errcode = '22023';
  end if;
  select o into v_bad from unnest(p_outcomes) o where o is null or o = 'running' or not (o = any (leasehold.run_outcomes())) limit 1;
  if found then
    raise exception 'outcome must be one of % (got %)', array_to_string(array_remove(leasehold.run_outcomes(), 'running'), ', '),
      coalesce(v_bad, 'null') using errcode = '22023';
  end if;
  select coalesce(array_agg(e.name || '#' || e.fence) filter (where e.recorded), '{}'), coalesce(array_agg(e.name) filter (where e.released), '{}')
    into v_recorded, v_released
    from leasehold.end_runs(p_jobs, p_tokens, p_fences, p_outcomes, p_errors, p_attempts, p_started_ms) e;
  -- the others: runs with a run_log row from their start (run now, backfill, start_run, allow);
  -- a statement of its own, only when there are some (its run_log triggers run even for no row)
  if cardinality(v_recorded) < v_n then
    with recorded as (
      update leasehold.run_log r
         set outcome = i.outcome, finished_at = now(), error = left(i.error, 4000), attempts = coalesce(i.attempts, 1),
             started_at = leasehold.run_start(r.started_at, i.started_ms)
        from unnest(p_jobs, p_fences, p_outcomes, p_errors, p_attempts, p_started_ms) as i(job, fence, outcome, error, attempts, started_ms)
       where r.job = i.job and r.fence = i.fence and r.outcome = 'running' and not ((i.job || '#' || i.fence) = any (v_recorded))
      returning r.job || '#' || r.fence as run
    )
    select v_recorded || coalesce(array_agg(x.run), '{}') into v_recorded from recorded x;
  end if;
  -- queued slots (buffered, catch-up): almost never; an empty table answers without a probe per job
  -- (and, in a statement of its own, without planning `= any (p_jobs)`: 3 ms for 10,000 jobs)
  v_queued := exists (select 1 from leasehold.buffered);
  if v_queued then v_queued := exists (select 1 from leasehold.buffered b where b.job = any (p_jobs)); end if;
  return query
  with input as materialized (
    select * from unnest(p_jobs, p_fences) as i(job, fence)
  ),
  stale_buffers as (
    delete from leasehold.buffered b using leasehold.leases l, input i
     where v_queued and b.job = i.job and l.name = i.job and b.slot <= l.last_slot
    returning b.job, b.slot
  )
  select i.job, i.fence,
         (i.job || '#' || i.fence) = any (v_recorded),
         i.job in (select unnest(v_released)),
         case when v_queued then (select min(b.slot) from leasehold.buffered b
           where b.job = i.job and b.slot > coalesce((select l.last_slot from leasehold.leases l where l.name = i.job), '-infinity')
             and not exists (select 1 from stale_buffers s where s.job = b.job and s.slot = b.slot)) end
    from input i;
end $$;

-- end_runs: the one rule by which a lease row lets go of its lease (only for its current token) and
-- of the run of fence p_fences[i] in flight on it (history row written), in one update; rows locked
-- in name order. FOR NO KEY UPDATE: the holder's fenced transactions do not block it.
create function leasehold.end_runs(
  p_names text[], p_tokens uuid[], p_fences bigint[], p_outcomes text[], p_errors text[], p_attempts integer[], p_started_ms double precision[] default null
) returns table (name text, fence bigint, released boolean, recorded boolean)
language plpgsql volatile
set plan_cache_mode = force_custom_plan
set jit = off
set random_page_cost = 1.1 -- primary-key probes, not a scan of every lease (see claim)
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
  -- one change per row: released if any element has its token, recorded with the element that ends it
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
      from changed c
     -- not `on conflict do nothing`: its speculative insertion logs a confirmation per row (48 bytes)
     where c.ending and not exists (select 1 from leasehold.run_log x where x.job = c.name and x.fence = c.run_fence)
    returning r.job
  )
  select c.name, c.fence, c.releasing, c.ending and c.name in (select r.job from recorded r) from changed c;
end $$;

-- finish_held_run: finish_runs() of a start_run run; one no longer held is recorded 'lost' (a run
-- may end between two heartbeats), so the history never shows a success that was not exclusive.
create function leasehold.finish_held_run(p_name text, p_fence bigint, p_token uuid, p_outcome text, p_error text default null, p_release boolean default true)
returns table (outcome text, recorded boolean, released boolean)
language plpgsql volatile
set lock_timeout = '2s'
as $$
declare
  v_held boolean; v_outcome text := p_outcome; v_error text := p_error; f record;
begin
  perform leasehold.check_namespace(array[p_name]);
  -- the row lock keeps the lease as it is seen here until finish_runs() releases it
  select l.token = p_token and l.fence = p_fence and l.expires_at > now() into v_held
    from leasehold.leases l where l.name = p_name for update;
  if not coalesce(v_held, false) and p_outcome in ('succeeded', 'failed') then
    v_outcome := 'lost';
    v_error := concat_ws('; ', 'the lease was no longer held when the run finished (released by force, expired or taken over)', p_error);
  end if;
  select * into f from leasehold.finish_runs(array[p_name], array[p_fence], array[case when p_release then p_token end],
                                             array[v_outcome], array[v_error], array[1]);
  return query select v_outcome, f.recorded, f.released;
end $$;

-- The run counts: one trigger per event (transition tables allow one), each summing by minute.
create function leasehold.count_runs_inserted() returns trigger
language plpgsql volatile set jit = off as $$
begin
  perform leasehold.add_run_counts(array_agg(minute), array_agg(n))
     from (select floor(extract(epoch from started_at) / 60)::bigint as minute, count(*) as n
             from new_runs where finished_at is not null group by 1) d;
  if exists (select 1 from new_runs where finished_at is not null and finished_at - started_at >= interval '500 milliseconds') then
    perform leasehold.mark_slow_runs(array_agg(job), array_agg(started_at), array_agg(finished_at))
       from new_runs where finished_at is not null and finished_at - started_at >= interval '500 milliseconds';
  end if;
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
  if exists (select 1 from new_runs where finished_at is not null and finished_at - started_at >= interval '500 milliseconds') then
    perform leasehold.mark_slow_runs(array_agg(job), array_agg(started_at), array_agg(finished_at))
       from new_runs where finished_at is not null and finished_at - started_at >= interval '500 milliseconds';
  end if;
  return null;
end $$;

-- prune_history deletes old rows: only those of the last 25 hours change a count
create function leasehold.count_runs_deleted() returns trigger
language plpgsql volatile set jit = off as $$
begin
  perform leasehold.add_run_counts(array_agg(minute), array_agg(-n))
     from (select floor(extract(epoch from started_at) / 60)::bigint as minute, count(*) as n
             from old_runs where finished_at is not null and started_at > now() - interval '25 hours' group by 1) d;
  return null;
end $$;

-- add_run_counts: signed per-minute counts into this backend's shard (minutes older than 25 hours
-- dropped, their buckets taken over). The shard's advisory lock first: a transaction counting twice
-- (insert and update triggers) locks buckets in order within a call, not across calls: deadlock.
create function leasehold.add_run_counts(p_minutes bigint[], p_counts bigint[]) returns void
language sql volatile as $$
  select pg_advisory_xact_lock(1819042147, (pg_backend_pid() % 64)::integer);
  insert into leasehold.run_counts as c (bucket, shard, minute, runs)
  select (d.minute % 1500)::smallint, (pg_backend_pid() % 64)::smallint, d.minute, d.n
    from unnest(p_minutes, p_counts) as d (minute, n)
   where d.n <> 0 and d.minute > floor(extract(epoch from now()) / 60)::bigint - 1500
   order by 1 -- rows locked in bucket order: two sessions on one shard wait, never deadlock
  on conflict (bucket, shard) do update
     set minute = excluded.minute, runs = case when c.minute = excluded.minute then c.runs + excluded.runs else excluded.runs end
   where c.minute <= excluded.minute;
$$;

-- refresh_run_counts: rebuilds both tables from run_log (after a TRUNCATE or a restore of it alone).
create function leasehold.refresh_run_counts() returns void
language plpgsql volatile set jit = off as $$
begin
  lock table leasehold.run_counts, leasehold.slow_runs in exclusive mode;
  delete from leasehold.run_counts;
  delete from leasehold.slow_runs;
  insert into leasehold.run_counts (bucket, shard, minute, runs)
  select (minute % 1500)::smallint, 0, minute, n
    from (select floor(extract(epoch from started_at) / 60)::bigint as minute, count(*) as n from leasehold.run_log
           where finished_at is not null and started_at > now() - interval '25 hours' group by 1) d;
  insert into leasehold.slow_runs (job, last_started)
  select r.job, max(r.started_at) from leasehold.run_log r join leasehold.jobs j on j.name = r.job
   where r.finished_at is not null and r.started_at > now() - interval '25 hours' and j.interval_ms > 0
     and extract(epoch from r.finished_at - r.started_at) * 1000 >= 0.5 * j.interval_ms
   group by r.job;
end $$;

-- mark_slow_runs: runs that took half their interval (the triggers pass only those of 500 ms or more).
create function leasehold.mark_slow_runs(p_jobs text[], p_started timestamptz[], p_finished timestamptz[]) returns void
language sql volatile as $$
  insert into leasehold.slow_runs as s (job, last_started)
  select r.job, max(r.started_at)
    from unnest(p_jobs, p_started, p_finished) as r (job, started_at, finished_at)
    join leasehold.jobs j on j.name = r.job
   where p_jobs is not null and j.interval_ms > 0 and extract(epoch from r.finished_at - r.started_at) * 1000 >= 0.5 * j.interval_ms
   group by r.job
  on conflict (job) do update set last_started = greatest(s.last_started, excluded.last_started);
$$;

-- prune_history: deletes ended runs, skips, missed slots and clock steps older than p_keep; with
-- p_batch, at most p_batch of each per call.
create function leasehold.prune_history(p_keep interval, p_batch integer default null) returns bigint
language plpgsql volatile as $$
declare
  n bigint := 0; c bigint;
  v_before timestamptz := now() - p_keep;
  v_batch integer := coalesce(p_batch, 10000);
begin
  if v_batch < 1 then
    raise exception 'prune_history: p_batch must be at least 1 (got %)', p_batch using errcode = '22023';
  end if;
  if not pg_try_advisory_xact_lock(7308604897068083570) then return 0; end if;
  loop
    with d as (delete from leasehold.run_log where ctid in (
                 select ctid from leasehold.run_log where finished_at < v_before and outcome <> 'running' limit v_batch) returning 1),
         k as (delete from leasehold.skips where ctid in (select ctid from leasehold.skips where recorded_at < v_before limit v_batch) returning 1),
         m as (delete from leasehold.missed where ctid in (select ctid from leasehold.missed where recorded_at < v_before limit v_batch) returning 1)
    select (select count(*) from d) + (select count(*) from k) + (select count(*) from m) into c;
    n := n + c;
    exit when p_batch is not null or c = 0;
  end loop;
  delete from leasehold.clock_steps where recorded_at < v_before;
  get diagnostics c = row_count;
  return n + c;
end $$;

create trigger runs_count_deleted AFTER DELETE ON leasehold.run_log REFERENCING OLD TABLE AS old_runs FOR EACH STATEMENT EXECUTE FUNCTION leasehold.count_runs_deleted();
create trigger runs_count_inserted AFTER INSERT ON leasehold.run_log REFERENCING NEW TABLE AS new_runs FOR EACH STATEMENT EXECUTE FUNCTION leasehold.count_runs_inserted();
create trigger runs_count_updated AFTER UPDATE ON leasehold.run_log REFERENCING OLD TABLE AS old_runs NEW TABLE AS new_runs FOR EACH STATEMENT EXECUTE FUNCTION leasehold.count_runs_updated();

-- sql/baseline/4_control.sql
-- leasehold schema, part 4 of 6: control. Schedules defined as data (handler and JSON payload),
-- pause and resume, run-now and backfill requests, and the audit of every act (actions).

create table leasehold.actions (
  id bigint generated always as identity primary key,
  at timestamp with time zone not null default now(),
  action text not null, job text, actor text not null, db_role text not null default SESSION_USER,
  detail jsonb not null default '{}'::jsonb
);
comment on table leasehold.actions is
  'Acts on jobs by applications and operators (defined, removed, paused, resumed, run now, backfill): who, when, what.';
create index actions_at_brin on leasehold.actions using brin (at) WITH (pages_per_range='32');
create index actions_job_at on leasehold.actions (job, at DESC);

create table leasehold.run_requests (
  id bigint generated always as identity primary key, job text not null, kind text not null,
  slot timestamp with time zone not null, -- backfill: the slot to run; run now: when it was asked for
  requested_by text not null, requested_at timestamp with time zone not null default now(),
  -- claimed: its run started (runs, under (job, fence)); skipped: held under overlap skip (or buffer-one's second)
  state text not null default 'pending'::text,
  decided_at timestamp with time zone, decided_by text, holder_key bigint, fence bigint, skip_holder text, skip_fence bigint,
  constraint run_requests_kind_check CHECK ((kind = ANY (ARRAY['manual'::text, 'backfill'::text]))),
  constraint run_requests_state_check CHECK ((state = ANY (ARRAY['pending'::text, 'claimed'::text, 'skipped'::text])))
);
comment on table leasehold.run_requests is
  'Run-now and backfill requests: who asked, when, and what became of each (pending, claimed with its fence, skipped naming the holder).';
create unique index run_requests_backfill_slot on leasehold.run_requests (job, slot) WHERE (kind = 'backfill'::text);
create index run_requests_job_at on leasehold.run_requests (job, requested_at DESC);
create index run_requests_pending on leasehold.run_requests (job, id) WHERE (state = 'pending'::text);
create trigger run_requests_notify AFTER INSERT ON leasehold.run_requests FOR EACH STATEMENT EXECUTE FUNCTION leasehold.notify_changes('requests');

-- record_action: one row per act, by p_by (checked like a holder: it is shown in logs).
create function leasehold.record_action(p_action text, p_job text, p_by text, p_detail jsonb default '{}'::jsonb) returns void
language sql volatile as $$
  select leasehold.check_holder(p_by);
  insert into leasehold.actions (action, job, actor, detail) values (p_action, p_job, p_by, coalesce(p_detail, '{}'::jsonb));
$$;

create function leasehold.check_schedule_field(p_ok boolean, p_field text, p_message text) returns void
language plpgsql immutable as $$
begin
  if p_ok is not true then
    raise exception '%: %', p_field, p_message using errcode = 'LH005',
      hint = 'Define schedules through the client (control.define) or see docs/sql-api.md for the bounds.';
  end if;
end $$;

-- live_job: the job p_name, locked, unless removed; else "no job named" with SQLSTATE p_code.
create function leasehold.live_job(p_name text, p_code text) returns leasehold.jobs
language plpgsql volatile as $$
declare
  j leasehold.jobs;
begin
  select * into j from leasehold.jobs x where x.name = p_name and x.removed_at is null for update;
  if not found then
    raise exception 'no job named "%"', left(p_name, 200)
      using errcode = p_code, hint = 'leasehold status lists the jobs; a job exists once a worker registered it.';
  end if;
  return j;
end $$;

-- define_schedule: creates or changes a data job; an unchanged definition writes nothing, a changed
-- schedule or timezone applies from the next slot. live_workers: the live workers with the handler.
create function leasehold.define_schedule(
  p_name text, p_handler text, p_by text, p_cron text default null, p_every interval default null, p_timezone text default null,
  p_payload jsonb default null, p_ttl interval default null, p_overlap text default null, p_catch_up text default null,
  p_buffer_limit integer default 10, p_starting_deadline interval default null, p_timeout interval default null, p_jitter interval default null
) returns table (name text, revision bigint, created boolean, changed boolean, live_workers integer)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v_old leasehold.jobs;
  v_payload jsonb := coalesce(p_payload, '{}'::jsonb); -- null: a code job's default
  v_ttl interval := coalesce(p_ttl, interval '30 seconds');
  v_overlap text := coalesce(p_overlap, 'skip'); v_catch_up text := coalesce(p_catch_up, 'latest');
  v_cron text := btrim(p_cron);
  v_every_ms bigint := (extract(epoch from p_every) * 1000)::bigint;
  v_schedule text; v_interval_ms bigint;
  v_deadline_ms bigint := (extract(epoch from p_starting_deadline) * 1000)::bigint;
  v_ttl_ms bigint := (extract(epoch from v_ttl) * 1000)::bigint;
  v_timeout_ms bigint := (extract(epoch from p_timeout) * 1000)::bigint;
  v_jitter_ms bigint := (extract(epoch from p_jitter) * 1000)::bigint;
  v_row leasehold.jobs; v_problem text;
begin
  perform leasehold.check_namespace(array[p_name]);
  perform leasehold.check_job_owner(array[p_name]);
  perform leasehold.check_name(p_name);
  -- ' nightly' must not pass for 'nightly' in lists and logs
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
    raise exception 'job "%" is defined in code (registered by %): a data schedule cannot take its name', p_name, v_old.registered_by
      using errcode = 'LH006', hint = 'Pick another name, or remove the job from the workers'' code first.';
  end if;
  if found and v_old.removed_at is null
     and (v_old.schedule, v_old.timezone, v_old.interval_ms, v_old.ttl_ms, v_old.overlap, v_old.catch_up, v_old.handler,
          v_old.payload, v_old.buffer_limit, v_old.starting_deadline_ms, v_old.timeout_ms, v_old.jitter_ms)
         is not distinct from (v_schedule, p_timezone, v_interval_ms, v_ttl_ms, v_overlap, v_catch_up, p_handler, v_payload,
                               p_buffer_limit, v_deadline_ms, v_timeout_ms, v_jitter_ms) then
    perform set_config('leasehold.job_writer', '', true);
    return query select p_name, v_old.revision, false, false, leasehold.live_runners(v_old);
    return;
  end if;
  -- new, changed, or defined again after its removal: from the next slot on
  update leasehold.leases l
     set last_slot = greatest(l.last_slot, now()),
         suspended = case when v_old.paused_at is not null and v_old.removed_at is null then 'paused' else null end
   where l.name = p_name
     and (v_old.name is null or v_old.removed_at is not null
          or (v_old.schedule, v_old.timezone) is distinct from (v_schedule, p_timezone)
          or l.suspended = 'removed')
     and (l.last_slot is not null or l.suspended is not null);
  insert into leasehold.jobs as j (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by, source, handler,
                                   payload, defined_by, buffer_limit, starting_deadline_ms, timeout_ms, jitter_ms, owner_role)
  values (p_name, v_schedule, p_timezone, v_interval_ms, v_ttl_ms, v_overlap, v_catch_up, p_by, 'data', p_handler, v_payload, p_by,
          p_buffer_limit, v_deadline_ms, v_timeout_ms, v_jitter_ms, leasehold.acting_role())
  on conflict on constraint jobs_pkey do update
     set schedule = excluded.schedule, timezone = excluded.timezone, interval_ms = excluded.interval_ms, ttl_ms = excluded.ttl_ms,
         overlap = excluded.overlap, catch_up = excluded.catch_up, registered_by = excluded.registered_by, registered_at = now(),
         handler = excluded.handler, payload = excluded.payload, defined_by = excluded.defined_by, buffer_limit = excluded.buffer_limit,
         starting_deadline_ms = excluded.starting_deadline_ms, timeout_ms = excluded.timeout_ms, jitter_ms = excluded.jitter_ms,
         -- defined again after removal: a new job, not paused, the definer's
         paused_at = case when j.removed_at is null then j.paused_at end, paused_by = case when j.removed_at is null then j.paused_by end,
         pause_reason = case when j.removed_at is null then j.pause_reason end, removed_at = null,
         owner_role = case when j.removed_at is null then coalesce(j.owner_role, excluded.owner_role) else excluded.owner_role end
  returning j.* into v_row;
  perform set_config('leasehold.job_writer', '', true);
  perform leasehold.record_action(case when v_old.name is null or v_old.removed_at is not null then 'schedule-defined' else 'schedule-changed' end,
    p_name, p_by, jsonb_build_object('schedule', v_schedule, 'timezone', p_timezone, 'handler', p_handler,
      'overlap', v_overlap, 'catch_up', v_catch_up, 'ttl_ms', v_row.ttl_ms, 'revision', v_row.revision));
  return query select p_name, v_row.revision, v_old.name is null or v_old.removed_at is not null, true, leasehold.live_runners(v_row);
end $$;

-- remove_schedule: a tombstone the workers read; a run in progress finishes. False: nothing removed.
create function leasehold.remove_schedule(p_name text, p_by text) returns boolean
language plpgsql volatile
set lock_timeout = '2s'
as $$
declare
  v_old leasehold.jobs;
begin
  perform leasehold.check_namespace(array[p_name]);
  perform leasehold.check_job_owner(array[p_name]);
  perform leasehold.check_holder(p_by);
  select * into v_old from leasehold.jobs j where j.name = p_name and j.removed_at is null for update;
  if not found then return false; end if;
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

-- pause_job: no slot is claimed until resume_job; last_slot stays (catch-up applies on resume).
-- p_stop_running: the run in progress loses its lease (force_release) and is recorded aborted.
create function leasehold.pause_job(p_name text, p_by text, p_reason text default null, p_stop_running boolean default false)
returns table (paused boolean, already_paused boolean, stopped_holder text, stopped_fence bigint)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v_job leasehold.jobs; v_lease leasehold.leases; v_stop boolean;
  v_why text := left('stopped: paused by ' || p_by || coalesce(' (' || p_reason || ')', ''), 4000);
begin
  perform leasehold.check_namespace(array[p_name]);
  perform leasehold.pin_synchronous_commit();
  perform leasehold.check_holder(p_by);
  perform leasehold.check_schedule_field(p_reason is null or (char_length(p_reason) <= 1000 and leasehold.check_characters(p_reason) is null),
    'reason', 'must be at most 1000 characters without control or invisible characters');
  v_job := leasehold.live_job(p_name, 'LH006');
  insert into leasehold.leases (name) values (p_name) on conflict do nothing;
  -- waits for a claim that locked the row first; a later claim sees the mark
  select * into v_lease from leasehold.leases l where l.name = p_name for update;
  update leasehold.leases l set suspended = 'paused' where l.name = p_name;
  if v_job.paused_at is null then
    perform set_config('leasehold.job_writer', 'schedules', true);
    update leasehold.jobs j set paused_at = now(), paused_by = p_by, pause_reason = p_reason where j.name = p_name;
    perform set_config('leasehold.job_writer', '', true);
  end if;
  v_stop := p_stop_running and v_lease.token is not null;
  if v_stop then
    if v_lease.run_slot is not null then
      perform leasehold.end_runs(array[p_name], null, array[v_lease.run_fence], array['aborted'], array[v_why], null);
    end if;
    perform from leasehold.force_release(p_name);
    update leasehold.run_log r set outcome = 'aborted', finished_at = now(), error = v_why where r.job = p_name and r.outcome = 'running';
  end if;
  perform leasehold.record_action('paused', p_name, p_by, jsonb_build_object('reason', p_reason, 'stop_running', p_stop_running,
    'stopped_holder', case when p_stop_running then v_lease.holder end, 'already_paused', v_job.paused_at is not null));
  return query select true, v_job.paused_at is not null, case when v_stop then v_lease.holder end, case when v_stop then v_lease.fence end;
end $$;

-- resume_job: the job's slots are claimed again (the workers apply its catch-up policy).
create function leasehold.resume_job(p_name text, p_by text)
returns table (resumed boolean, paused_at timestamptz, paused_by text)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v_job leasehold.jobs;
begin
  perform leasehold.check_namespace(array[p_name]);
  perform leasehold.check_holder(p_by);
  v_job := leasehold.live_job(p_name, 'LH006');
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

-- run_now: one extra run of p_job now, or with p_slots one run of each past slot (a backfill;
-- a unique index: a slot is requested once).
create function leasehold.run_now(p_job text, p_by text, p_slots timestamptz[] default null)
returns table (request_id bigint, slot timestamptz)
language plpgsql volatile as $$
#variable_conflict use_column
declare
  v_count integer := coalesce(cardinality(p_slots), 0);
  v_id bigint;
begin
  perform leasehold.check_namespace(array[p_job]);
  perform leasehold.check_holder(p_by);
  perform leasehold.live_job(p_job, 'P0002');
  if p_slots is null then
    insert into leasehold.run_requests (job, kind, slot, requested_by) values (p_job, 'manual', now(), p_by) returning id into v_id;
    perform leasehold.record_action('run-now', p_job, p_by, jsonb_build_object('request', v_id));
    return query select v_id, now();
    return;
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
  get diagnostics v_id = row_count;
  perform leasehold.record_action('backfill', p_job, p_by, jsonb_build_object(
    'from', (select min(s) from unnest(p_slots) s), 'to', (select max(s) from unnest(p_slots) s), 'slots', v_count, 'requested', v_id));
end $$;

-- check_claim_requests: claim()'s request rules in one pass (the value named is looked for after).
create function leasehold.check_claim_requests(p_jobs text[], p_slots timestamptz[], p_ttls interval[], p_modes text[], p_caps integer[]) returns void
language plpgsql stable as $$
declare
  v_n integer := coalesce(cardinality(p_jobs), 0);
  r record;
begin
  if array[coalesce(cardinality(p_slots), 0), coalesce(cardinality(p_ttls), 0), coalesce(cardinality(p_modes), 0),
           coalesce(cardinality(p_caps), 0)] <> array_fill(v_n, array[4]) then
    raise exception 'claim: as many slots, ttls, modes and buffer caps as jobs are needed (% jobs)', v_n using errcode = '22023';
  end if;
  if v_n = 0 then return; end if;
  -- whole-array tests (no row per request: a second pass asks thousands); ttls need their range
  select not (p_modes <@ array['exclusive', 'replace', 'allow']) as bad_mode, -- a null element is contained in nothing
         array_position(p_caps, null) is not null or coalesce(0 > any (p_caps), false) as bad_cap,
         array_position(p_jobs, null) is not null or array_position(p_slots, null) is not null as bad_null,
         t.null_ttl, t.min_ttl, t.max_ttl
    into r from (select bool_or(x is null) as null_ttl, min(x) as min_ttl, max(x) as max_ttl from unnest(p_ttls) x) t;
  if r.bad_mode then
    raise exception 'claim: mode must be exclusive, replace or allow (got %)',
      coalesce((select m from unnest(p_modes) m where m is null or m not in ('exclusive', 'replace', 'allow') limit 1), 'null') using errcode = '22023';
  end if;
  if r.bad_cap then
    raise exception 'claim: buffer_cap must be 0 or more (got %)',
      coalesce((select c::text from unnest(p_caps) c where c is null or c < 0 limit 1), 'null') using errcode = '22023';
  end if;
  if r.bad_null then
    raise exception 'claim: job and slot must not be null' using errcode = '22023';
  end if;
  -- the two ends of the range tell for all
  if r.null_ttl then
    perform leasehold.check_ttl(null);
  end if;
  perform leasehold.check_ttl(r.min_ttl);
  perform leasehold.check_ttl(r.max_ttl);
end $$;

-- claim_requests: a worker takes pending requests of its jobs, one per job per call, each decided
-- under the lease row lock (SKIP LOCKED) by its overlap policy. Nothing pending: one index read.
create function leasehold.claim_requests(p_jobs text[], p_holder text, p_holder_key bigint default null, p_limit integer default 100)
returns table (request_id bigint, job text, kind text, slot timestamptz, requested_by text, claimed boolean, token uuid, fence bigint,
               expires_at timestamptz, holder text, holder_fence bigint, took_over boolean, database_time timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v record; l leasehold.leases; v_mode text; v_epoch integer; v_incarnation text; v_fence bigint;
  v_token uuid; v_expires timestamptz;
begin
  perform leasehold.check_namespace(p_jobs);
  perform leasehold.check_holder(p_holder);
  if p_limit is null or p_limit < 1 or p_limit > 1000 then
    raise exception 'claim_requests: p_limit must be 1 to 1000 (got %)', p_limit using errcode = '22023';
  end if;
  if not exists (select 1 from leasehold.run_requests q where q.state = 'pending' and q.job = any (p_jobs)) then return; end if;
  -- only the job's own workers take its requests
  p_jobs := array(select j.name from leasehold.jobs j where j.name = any (p_jobs) and leasehold.may_act_as(j.owner_role));
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
    -- a backfill under allow: one at a time, unless the worker of the running one is gone
    continue when v.kind = 'backfill' and v_mode = 'allow' and exists (
      select 1 from leasehold.run_requests b join leasehold.runs r on r.job = b.job and r.fence = b.fence
       where b.job = v.job and b.kind = 'backfill' and b.state = 'claimed' and r.outcome = 'running'
         and not leasehold.holder_gone(b.holder_key));
    if (v.kind = 'backfill' and v_mode <> 'allow') or v.overlap in ('buffer-one', 'buffer-all') then
      -- waits for a free lease: locked only when free (a waiting request costs no lock, no write)
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
            select s.id, s.job, s.kind, s.slot, s.requested_by, false, null::uuid, null::bigint, null::timestamptz, l.holder, l.fence, false, now()
              from later s;
          end if;
        end if;
        continue;
      end if;
      v_mode := case when v_mode = 'allow' then 'allow' else 'exclusive' end;
    else
      -- decided now, whoever holds the lease
      select * into l from leasehold.leases x where x.name = v.job for update skip locked;
      continue when not found;
    end if;
    -- still pending under the lock, with a fresh snapshot?
    perform 1 from leasehold.run_requests q where q.id = v.id and q.state = 'pending';
    continue when not found;
    if v.kind = 'manual' and v.overlap = 'skip' and not leasehold.is_free(l) then
      update leasehold.run_requests q
         set state = 'skipped', decided_at = now(), decided_by = p_holder, skip_holder = l.holder, skip_fence = l.fence
       where q.id = v.id;
      return query select v.id, v.job, v.kind, v.slot, v.requested_by, false, null::uuid, null::bigint, null::timestamptz, l.holder,
                          l.fence, false, now();
      continue;
    end if;

    -- claim() gives the same grant, except that last_slot stays
    v_epoch := coalesce(v_epoch, leasehold.epoch());
    v_incarnation := coalesce(v_incarnation, leasehold.liveness_incarnation(p_holder_key));
    v_fence := (leasehold.fences_after(array[l.fence], v_epoch))[1];
    if v_mode <> 'allow' and l.run_slot is not null then
      perform leasehold.end_runs(array[v.job], null, array[l.run_fence], array['lost'], array['lease taken over by ' || p_holder], null);
    end if;
    -- under allow only the fence moves; a grant's run is in run_log from its start
    if v_mode = 'allow' then
      update leasehold.leases x set fence = v_fence where x.name = v.job;
    else
      update leasehold.leases x
         set fence = v_fence, token = gen_random_uuid(), holder = p_holder, holder_key = p_holder_key, acquired_at = now(),
             expires_at = now() + v.ttl_ms * interval '1 millisecond', released_at = null, ttl = v.ttl_ms * interval '1 millisecond',
             epoch = v_epoch, holder_incarnation = v_incarnation, run_slot = null, run_started_at = null
       where x.name = v.job
      returning x.token, x.expires_at into v_token, v_expires;
    end if;
    insert into leasehold.run_log (job, slot, fence, holder, trigger, requested_by, request_id)
    values (v.job, v.slot, v_fence, p_holder, v.kind, v.requested_by, v.id);
    -- a run still 'running' under an older fence lost its lease (as in claim())
    if v_mode <> 'allow' then
      update leasehold.run_log r set outcome = 'lost', finished_at = now(), error = 'lease taken over by ' || p_holder
       where r.job = v.job and r.outcome = 'running' and r.fence < v_fence;
    end if;
    update leasehold.run_requests q
       set state = 'claimed', decided_at = now(), decided_by = p_holder, holder_key = p_holder_key, fence = v_fence where q.id = v.id;
    insert into leasehold.actions (action, job, actor, detail)
    values ('request-claimed', v.job, p_holder, jsonb_build_object('request', v.id, 'kind', v.kind, 'fence', v_fence));
    return query select v.id, v.job, v.kind, v.slot, v.requested_by, true, case when v_mode <> 'allow' then v_token end, v_fence,
                        case when v_mode <> 'allow' then v_expires end, p_holder, null::bigint, v_mode <> 'allow' and l.token is not null, now();
  end loop;
end $$;

-- schedule_changes: the job rows changed after p_after_revision, oldest first: one index range
-- (revisions become visible in order: writers draw them under one lock). p_snapshot: only the
-- data jobs of p_handlers and the paused ones (a starting worker must not read 100,000 jobs).
create function leasehold.schedule_changes(p_after_revision bigint, p_handlers text[], p_limit integer default 1000, p_snapshot boolean default false)
returns table (
  revision bigint, name text, source text, handler text, removed boolean, schedule text, timezone text, interval_ms bigint, ttl_ms bigint,
  overlap text, catch_up text, buffer_limit integer, starting_deadline_ms bigint, timeout_ms bigint, jitter_ms bigint, payload jsonb,
  paused_at timestamptz, paused_by text, pause_reason text, last_slot timestamptz, database_time timestamptz,
  last_slot_unstarted boolean
)
language sql volatile as $$
  select j.revision, j.name, j.source, j.handler, j.removed_at is not null,
         j.schedule, j.timezone, j.interval_ms, j.ttl_ms, j.overlap, j.catch_up,
         j.buffer_limit, j.starting_deadline_ms, j.timeout_ms, j.jitter_ms,
         case when p_handlers is null or j.handler = any (p_handlers) then j.payload end,
         j.paused_at, j.paused_by, j.pause_reason,
         l.last_slot, now(),
         -- as register_jobs() says it (volatile: is_free() asks for the holder's liveness lock)
         leasehold.unstarted_ahead(l, (select s.started_through from leasehold.worker_starts s where s.holder_key = l.holder_key))
           and leasehold.is_free(l)
    from leasehold.jobs j
    left join leasehold.leases l on l.name = j.name
   where j.revision > coalesce(p_after_revision, 0)
     and (p_snapshot is not true
          or (j.removed_at is null and (j.paused_at is not null
                                        or (j.source = 'data' and (p_handlers is null or j.handler = any (p_handlers))))))
     and leasehold.in_namespace(j.name, (select leasehold.namespace_prefixes()))
     and leasehold.may_act_as(j.owner_role)
   order by j.revision
   limit greatest(1, least(coalesce(p_limit, 1000), 10000));
$$;

-- sql/baseline/5_reads.sql
-- leasehold schema, part 5 of 6: read models (no token shown). Each reads an index range per job,
-- so `where job = ...` or `order by job limit n` reads only those jobs.

-- fleet_status: the fleet's counts on every row, and the jobs needing attention (most urgent reason,
-- newest first), then the others by name. A reason lists the names its history has (the caller
-- leaves out those without a job_status row). Its cost follows the last day's failures.
create function leasehold.fleet_status(p_limit integer)
returns table (place integer, job text, attention text, attention_at timestamptz, jobs integer, running integer,
               expired integer, failing integer, skipping integer, missing integer, leases integer, leases_held integer)
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
  with leases_seen as materialized (
    select l.name, l.state, l.expires_at, j.name is not null as is_job
      from leasehold.lease_status l left join leasehold.jobs j on j.name = l.name
     where l.state <> 'free' or j.name is null
  ),
  -- each reason (0 the most urgent): one row per name that has it, with its latest time
  reasons as materialized (
    select 0 as rank, l.name as job, l.expires_at as at from leases_seen l where l.is_job and l.state = 'expired'
    union all
    select 1, r.job, max(r.started_at) from leasehold.runs r
     where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at > v_since group by r.job
    union all
    select 2, s.job, max(s.recorded_at) from leasehold.skips s where s.recorded_at > v_since group by s.job
    union all
    select 3, m.job, max(m.recorded_at) from leasehold.missed m where m.recorded_at > v_since group by m.job
  ),
  flagged as materialized (
    select distinct on (x.job) x.job, x.rank, x.at from reasons x order by x.job, x.rank
  ),
  page as (
    select (row_number() over (order by p.rank nulls last, p.at desc nulls last, p.job))::integer as n, p.job, p.rank, p.at
      from ((select f.job, f.rank, f.at from flagged f order by f.rank, f.at desc, f.job limit p_limit)
            union all
            (select j.name, null, null from leasehold.jobs j
              where not exists (select 1 from flagged f where f.job = j.name)
              order by j.name limit greatest(p_limit - (select count(*) from flagged), 0))) p
  ),
  counts as (
    select (select count(*) from leasehold.jobs)::integer as jobs,
           (select count(*) from leases_seen l where l.is_job and l.state = 'held')::integer as running,
           (select count(*) filter (where x.rank = 0) from reasons x)::integer as expired,
           (select count(*) filter (where x.rank = 1) from reasons x)::integer as failing,
           (select count(*) filter (where x.rank = 2) from reasons x)::integer as skipping,
           (select count(*) filter (where x.rank = 3) from reasons x)::integer as missing,
           (select count(*) from leases_seen l where not l.is_job)::integer as leases,
           (select count(*) from leases_seen l where not l.is_job and l.state <> 'free')::integer as leases_held
  )
  select p.n, p.job, (array['expired', 'failing', 'skipping', 'missing'])[p.rank + 1], p.at,
         c.jobs, c.running, c.expired, c.failing, c.skipping, c.missing, c.leases, c.leases_held
    from counts c left join page p on true
   order by p.n;
end $$;

-- fleet_summary: the fleet's counts over 24 hours, from run_counts and slow_runs, not a day of runs.
create function leasehold.fleet_summary(p_warn_ratio double precision default 0.8)
returns table (jobs integer, running integer, expired integer, failing integer, creeping integer, over_interval integer,
               runs_24h bigint, failed_24h bigint, lost_24h bigint, skips_24h bigint, missed_24h bigint, timed_out_24h bigint)
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
    select count(*) filter (where l.expires_at > now()) as held, count(*) filter (where l.expires_at <= now()) as expired
      from leasehold.leases l join leasehold.jobs j on j.name = l.name
     where l.token is not null
  ),
  failed_runs as not materialized (
    select r.job, r.outcome from leasehold.run_log r
     where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at > v_since and r.finished_at is not null
  ),
  ratios as (
    select (select percentile_cont(0.95) within group (order by extract(epoch from r.finished_at - r.started_at))
              from leasehold.run_log r
             where r.job = j.name and r.finished_at is not null and r.started_at > v_since) * 1000 / j.interval_ms as ratio
      from leasehold.slow_runs s join leasehold.jobs j on j.name = s.job
     where s.last_started > v_since and j.interval_ms > 0
  )
  select (select count(*) from leasehold.jobs)::integer, (select held from states)::integer, (select expired from states)::integer,
         (select count(*) from (select r.job from failed_runs r group by r.job) f join leasehold.jobs j on j.name = f.job)::integer,
         (select count(*) from ratios where ratio >= p_warn_ratio and ratio < 1)::integer,
         (select count(*) from ratios where ratio >= 1)::integer,
         -- the minutes inside the window from the counts, the partial minute at its edge from run_log
         (select coalesce(sum(c.runs), 0) from leasehold.run_counts c where c.minute > v_edge)::bigint
           + (select count(*) from leasehold.run_log r
               where r.started_at > v_since and r.started_at < to_timestamp((v_edge + 1) * 60) and r.finished_at is not null)::bigint,
         (select count(*) from failed_runs r where r.outcome = 'failed')::bigint,
         (select count(*) from failed_runs r where r.outcome = 'lost')::bigint,
         (select count(*) from leasehold.skips where recorded_at > v_since)::bigint,
         (select count(*) from leasehold.missed where recorded_at > v_since)::bigint,
         (select count(*) from failed_runs r where r.outcome = 'timed-out')::bigint;
end $$;

create view leasehold.lease_status as
select l.name,
       case when l.token is null then 'free' when l.expires_at <= now() then 'expired' else 'held' end as state,
       l.holder, l.fence, l.acquired_at, l.expires_at,
       case when l.token is not null then greatest(extract(epoch from l.expires_at - now()), 0)::double precision end as seconds_left,
       -- liveness locks exist only on the incarnation that took them: elsewhere, unknown
       case when l.token is null or l.holder_key is null
                 or l.holder_incarnation is distinct from (select e.incarnation from leasehold.epoch_source() e) then null
            else l.holder_key in (select k.key from leasehold.liveness_locks() k)
       end as holder_alive,
       l.last_slot, l.released_at, l.epoch, l.holder_key
  from leasehold.leases l;

create view leasehold.runs as
select r.id, r.job, r.slot, r.fence, r.holder, r.started_at, r.finished_at, r.outcome, r.error, r.attempts, r.trigger, r.requested_by, r.request_id
  from leasehold.run_log r
union all
select null::bigint, l.name, l.run_slot, l.run_fence, l.run_holder, l.run_started_at, null::timestamptz,
       'running'::text, null::text, 1, 'schedule'::text, null::text, null::bigint
  from leasehold.leases l
 where l.run_slot is not null;
comment on view leasehold.runs is
  'Every run: ended runs and the runs of run now, backfill, start_run and overlap allow from run_log, and the scheduled runs in flight from their lease rows (id null).';

create view leasehold.run_history as
select job, slot, 'run' as kind, outcome, fence, holder, started_at as at, finished_at,
       extract(epoch from finished_at - started_at)::double precision as duration_seconds, error as detail, trigger, requested_by
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
  left join lateral (select r.fence from leasehold.runs r -- a later run of the slot: from the skip's holder on (fences grow)
                      where r.job = k.job and r.fence >= coalesce(k.holder_fence, 0) and r.slot = k.slot and r.trigger = 'schedule' limit 1) ran on true
union all
select job, slot, 'missed', 'missed', null, null, recorded_at, null, null, reason, 'schedule', null
  from leasehold.missed
union all
select q.job, q.slot, 'skip', 'skipped', q.skip_fence, q.skip_holder, q.decided_at, null, null,
       format('run now held by %s (fence %s)', q.skip_holder, q.skip_fence), q.kind, q.requested_by
  from leasehold.run_requests q
 where q.state = 'skipped';

create view leasehold.run_request_status as
select q.id, q.job, q.kind, q.slot, q.requested_by, q.requested_at,
       case when q.state = 'claimed' and r.outcome is distinct from 'running' then 'done' else q.state end as state,
       q.decided_at, q.decided_by, q.fence, r.outcome, r.started_at, r.finished_at, r.error, q.skip_holder, q.skip_fence
  from leasehold.run_requests q
  left join leasehold.run_log r on r.job = q.job and r.fence = q.fence;

-- job_status: late_p95_seconds is the p95 over 24 h of how long after its slot each scheduled
-- run started (started_at - slot; the jitter offset counts).
create view leasehold.job_status as
select j.name as job, j.schedule, j.timezone, j.interval_ms, j.ttl_ms, j.overlap, j.catch_up,
       case when l.token is null and j.paused_at is not null then 'paused'
            when l.token is null then 'idle' when l.expires_at <= now() then 'expired' else 'running' end as state,
       case when l.token is not null then l.holder end as holder,
       case when l.token is not null then extract(epoch from now() - l.acquired_at)::double precision end as lease_age_seconds,
       l.fence, l.last_slot, r.slot as last_run_slot, r.outcome as last_outcome, r.started_at as last_started_at,
       r.finished_at as last_finished_at, r.error as last_error,
       coalesce(rc.runs, 0)::integer as runs_24h, coalesce(rc.failed, 0)::integer as failed_24h,
       coalesce(rc.lost, 0)::integer as lost_24h, rc.p50::double precision as p50_seconds, rc.p95::double precision as p95_seconds,
       case when j.interval_ms > 0 and rc.p95 is not null then (rc.p95 * 1000 / j.interval_ms)::double precision end as p95_interval_ratio,
       coalesce(s.n, 0)::integer as skips_24h, coalesce(m.n, 0)::integer as missed_24h,
       j.source, j.handler, j.paused_at, j.paused_by, j.pause_reason,
       coalesce(rc.timed_out, 0)::integer as timed_out_24h, rc.late_p95::double precision as late_p95_seconds
  from leasehold.jobs j
  left join leasehold.leases l on l.name = j.name
  left join lateral (select x.slot, x.outcome, x.started_at, x.finished_at, x.error
                       from leasehold.runs x where x.job = j.name order by x.started_at desc limit 1) r on true
  left join lateral (
    select count(*) as runs, count(*) filter (where x.outcome = 'failed') as failed,
           count(*) filter (where x.outcome = 'lost') as lost, count(*) filter (where x.outcome = 'timed-out') as timed_out,
           percentile_cont(0.5) within group (order by extract(epoch from x.finished_at - x.started_at)) as p50,
           percentile_cont(0.95) within group (order by extract(epoch from x.finished_at - x.started_at)) as p95,
           percentile_cont(0.95) within group (order by extract(epoch from x.started_at - x.slot))
             filter (where x.trigger = 'schedule') as late_p95
      from leasehold.run_log x
     where x.job = j.name and x.finished_at is not null and x.started_at > now() - interval '24 hours'
  ) rc on true
  left join lateral (select count(*) as n from leasehold.skips x where x.job = j.name and x.recorded_at > now() - interval '24 hours') s on true
  left join lateral (select count(*) as n from leasehold.missed x where x.job = j.name and x.recorded_at > now() - interval '24 hours') m on true
 where j.removed_at is null;
comment on view leasehold.job_status is
  'One row per scheduled job: lease holder, last run, p50/p95 duration and their ratio to the interval over 24 h, skips and missed slots over 24 h. Each row costs one index range of its job''s runs: filter by job or order by job with a limit at scale.';

-- sql/baseline/6_privileges.sql
-- leasehold schema, part 6 of 6: the privilege model (docs/security.md). Entry points run as the
-- owner with a pinned search_path (no table privileges needed, no planted object picked up);
-- nothing is granted to PUBLIC; roles get a level, applied by secure_schema() after every migration.

create table leasehold.access (
  object text primary key, level text not null,
  constraint access_level_check CHECK ((level = ANY (ARRAY['reader'::text, 'client'::text, 'operator'::text, 'owner'::text])))
);
comment on table leasehold.access is
  'Which level may use each function, view or table of the schema (owner: nobody but the schema owner).';

-- Roles granted a level (grant_access()): an upgrade grants them what it adds.
create table leasehold.grants (
  role text not null, level text not null, granted_at timestamp with time zone not null default now(),
  constraint grants_pkey PRIMARY KEY (role, level),
  constraint grants_level_check CHECK ((level = ANY (ARRAY['reader'::text, 'client'::text, 'operator'::text])))
);

-- Namespaces: a role bound to name prefixes (itself or a role it is a member of) acts only on
-- names starting with one, so services sharing a database cannot reach each other's jobs.
create table leasehold.namespaces (
  role text not null, prefix text not null check (char_length(prefix) between 1 and 100), granted_at timestamptz not null default now(),
  primary key (role, prefix)
);
comment on table leasehold.namespaces is
  'Name prefixes a role is bound to (none: the whole schema). Written by grant_access(role, level, namespace).';

-- namespace_prefixes: the prefixes of p_role (the caller by default), null when not bound.
create function leasehold.namespace_prefixes(p_role text default session_user) returns text[]
language sql stable as $$
  select case when not exists (select 1 from leasehold.namespaces) then null
              when leasehold.acting_role(p_role) is null then null
              else (select array_agg(s.prefix order by s.prefix) from leasehold.namespaces s
                     where s.role = p_role or leasehold.is_member_of(s.role, p_role))
         end;
$$;

create function leasehold.is_member_of(p_role text, p_member text default session_user) returns boolean
language sql stable as $$
  select coalesce(pg_has_role(to_regrole(quote_ident(p_member)), to_regrole(quote_ident(p_role)), 'member'), false);
$$;

create function leasehold.in_namespace(p_name text, p_prefixes text[]) returns boolean
language sql immutable as $$
  select p_prefixes is null or exists (select 1 from unnest(p_prefixes) x where starts_with(p_name, x));
$$;

-- check_namespace: refuses (42501) a call that names anything outside the caller's namespace.
create function leasehold.check_namespace(p_names text[]) returns void
language plpgsql stable as $$
declare
  v_prefixes text[];
  v_outside text;
begin
  -- no namespace at all (most installations): one probe with a cached plan, on every acquire
  if not exists (select 1 from leasehold.namespaces) then return; end if;
  v_prefixes := leasehold.namespace_prefixes();
  if v_prefixes is null then return; end if;
  select x into v_outside from unnest(p_names) x where x is not null and not leasehold.in_namespace(x, v_prefixes) limit 1;
  if found then
    raise exception 'role "%" may not act on "%": it is bound to the namespace %', session_user, v_outside,
      array_to_string(v_prefixes, ', ')
      using errcode = '42501', hint = 'Name it with one of those prefixes, or grant the role another namespace.';
  end if;
end $$;

-- acting_role: the owner_role of a job written now: null for the schema owner and superusers.
create function leasehold.acting_role(p_role text default session_user) returns text
language sql stable as $$
  select case when r.rolsuper or r.oid = n.nspowner then null else r.rolname::text end
    from pg_roles r, pg_namespace n where r.rolname = p_role and n.nspname = 'leasehold';
$$;

-- may_act_as: p_actor (the caller by default) may change or run what p_role owns (a member, the
-- owner; null: anyone). p_actor must exist: acting_role() is null for an unknown role.
create function leasehold.may_act_as(p_role text, p_actor text default session_user) returns boolean
language sql stable as $$
  select p_role is null or p_role = p_actor or leasehold.acting_role(p_actor) is null or leasehold.is_member_of(p_role, p_actor);
$$;

-- check_job_owner: refuses (42501) a change of jobs p_names that another role owns.
create function leasehold.check_job_owner(p_names text[]) returns void
language plpgsql stable as $$
declare
  j leasehold.jobs;
begin
  -- a join, not `x.name = any (p_names)`: a caller's custom plan (claim) estimated that once per
  -- element of the array (10,000 jobs: 9 ms of planning for a 1 ms probe)
  select x.* into j from unnest(p_names) n(name) join leasehold.jobs x on x.name = n.name
   where not leasehold.may_act_as(x.owner_role) limit 1;
  if found then
    raise exception 'role "%" may not change job "%": it belongs to role "%"', session_user, j.name, j.owner_role
      using errcode = '42501', hint = 'Register or define it as that role, or have an operator remove it first.';
  end if;
end $$;

-- schema_version: the installed version, for every level.
create function leasehold.schema_version() returns integer
language sql stable as $$
  select coalesce(max(version), 0)::integer from leasehold.migrations;
$$;

-- breaking_since: a migration newer than p_version changed the contract (false: rolling deploys work).
create function leasehold.breaking_since(p_version integer) returns boolean
language sql stable as $$
  select coalesce(bool_or(breaking), false) from leasehold.migrations where version > p_version;
$$;

-- grant_statements: the GRANTs of a level, argument types printed schema-qualified (run anywhere).
create function leasehold.grant_statements(p_role text, p_level text) returns setof text
language plpgsql stable as $$
begin
  if p_level is null or p_level not in ('reader', 'client', 'operator') then
    raise exception 'level must be reader, client or operator (got %)', coalesce(p_level, 'null') using errcode = '22023';
  end if;
  if p_role is null or p_role = '' or lower(p_role) = 'public' then
    raise exception 'name a role (not PUBLIC) to grant leasehold access to' using errcode = '22023';
  end if;
  perform set_config('search_path', 'pg_catalog, pg_temp', true);
  return next format('grant usage on schema leasehold to %I', p_role);
  return query
    select format('grant execute on function leasehold.%I(%s) to %I', p.proname, pg_get_function_identity_arguments(p.oid), p_role)
      from pg_proc p join leasehold.access a on a.object = p.proname
     where p.pronamespace = 'leasehold'::regnamespace and a.level in ('reader', p_level)
     order by a.level desc, p.proname, 1;
  return query
    select format('grant select on table leasehold.%I to %I', c.relname, p_role)
      from pg_class c join leasehold.access a on a.object = c.relname
     where c.relnamespace = 'leasehold'::regnamespace and c.relkind in ('r', 'v', 'm') and a.level in ('reader', p_level)
     order by c.relname;
end $$;

create function leasehold.check_role(p_role text) returns void
language plpgsql stable as $$
begin
  if to_regrole(quote_ident(p_role)) is null then
    raise exception 'role "%" does not exist', p_role
      using errcode = '42704', hint = 'Create it first, e.g. create role ... login password ''...''.';
  end if;
end $$;

-- grant_access: runs grant_statements and remembers the role; p_namespace binds it to one more prefix.
create function leasehold.grant_access(p_role text, p_level text, p_namespace text default null) returns setof text
language plpgsql volatile as $$
declare
  s text;
begin
  perform leasehold.check_role(p_role);
  if p_namespace is not null then
    if char_length(p_namespace) not between 1 and 100 or leasehold.check_characters(p_namespace) is not null then
      raise exception 'a namespace is a name prefix of 1-100 visible characters (got %)', quote_literal(p_namespace) using errcode = '22023';
    end if;
    insert into leasehold.namespaces (role, prefix) values (p_role, p_namespace) on conflict do nothing;
  end if;
  for s in select * from leasehold.grant_statements(p_role, p_level) loop
    execute s;
    return next s;
  end loop;
  insert into leasehold.grants (role, level) values (p_role, p_level) on conflict do nothing;
end $$;

-- revoke_access: revokes everything, grants the remaining levels again (none: namespaces go too).
create function leasehold.revoke_access(p_role text, p_level text) returns integer
language plpgsql volatile as $$
declare
  r record;
  n integer := 0;
begin
  perform leasehold.check_role(p_role);
  delete from leasehold.grants g where g.role = p_role and g.level = p_level;
  execute format('revoke all on all routines in schema leasehold from %I', p_role);
  execute format('revoke all on all tables in schema leasehold from %I', p_role);
  execute format('revoke all on schema leasehold from %I', p_role);
  for r in select s from leasehold.grants g, leasehold.grant_statements(p_role, g.level) s where g.role = p_role loop
    execute r.s;
  end loop;
  select count(*) into n from leasehold.grants g where g.role = p_role;
  if n = 0 then
    delete from leasehold.namespaces ns where ns.role = p_role;
  end if;
  return n;
end $$;

-- secure_schema: idempotent, after every migration. Entry points and trigger functions run as the
-- owner with the pinned path; internal steps (level owner) pin nothing, so that they can be inlined
-- (saving and restoring settings was three quarters of a declined acquire's server time).
create function leasehold.secure_schema() returns void
language plpgsql volatile as $$
declare
  f record;
  r record;
begin
  -- an object planted in the schema would be on every pinned path
  revoke all on schema leasehold from public;
  for r in select a.grantee::regrole::text as grantee from pg_namespace n, aclexplode(n.nspacl) a
            where n.nspname = 'leasehold' and a.privilege_type = 'CREATE' and a.grantee not in (n.nspowner, 0) loop
    execute format('revoke create on schema leasehold from %s', r.grantee);
  end loop;
  for f in select p.proname, pg_get_function_identity_arguments(p.oid) as args,
                  coalesce(a.level, 'entry') = 'owner' and p.prorettype <> 'trigger'::regtype
                    and p.proname not in ('secure_schema', 'grant_access', 'grant_statements', 'revoke_access', 'refresh_run_counts') as step
             from pg_proc p left join leasehold.access a on a.object = p.proname
            where p.pronamespace = 'leasehold'::regnamespace and p.prokind in ('f', 'p') loop
    if f.step then
      execute format('alter routine leasehold.%I(%s) security invoker reset search_path', f.proname, f.args);
    else
      execute format('alter routine leasehold.%I(%s) security definer set search_path = pg_catalog, leasehold, pg_temp', f.proname, f.args);
    end if;
  end loop;
  revoke all on all routines in schema leasehold from public;
  revoke all on all tables in schema leasehold from public;
  revoke all on all sequences in schema leasehold from public;
  for r in select s from leasehold.grants g, leasehold.grant_statements(g.role, g.level) s where to_regrole(quote_ident(g.role)) is not null loop
    execute r.s;
  end loop;
end $$;

-- Each function and view by level, and the tables a level may read; the other tables are the owner's.
insert into leasehold.access (object, level)
select unnest(v.objects), v.level from (values
  ('reader', array['actions', 'breaking_since', 'clock_steps', 'epoch_source', 'fleet_status', 'fleet_summary',
     'job_status', 'jobs', 'lease_status', 'liveness_locks', 'missed', 'namespaces', 'run_counts', 'run_history',
     'run_log', 'run_request_status', 'run_requests', 'runs', 'schema_version', 'skips', 'slow_runs',
     'unhandled_schedules', 'worker_handlers']),
  ('client', array['acquire', 'assert_lease', 'claim', 'claim_requests', 'define_schedule', 'enqueue_slots',
     'finish_held_run', 'finish_runs', 'holds_lease', 'reconfirm_leases', 'record_clock_step', 'record_missed_slots',
     'record_skip', 'register_jobs', 'register_liveness', 'release', 'remove_schedule', 'renew_leases',
     'report_share', 'reported_shares', 'schedule_changes', 'start_run', 'start_tick']),
  ('operator', array['force_release', 'pause_job', 'prune_history', 'resume_job', 'run_now']),
  ('owner', array['acting_role', 'add_run_counts', 'bad_characters', 'batch_token', 'check_characters', 'check_claim_requests',
     'check_holder', 'check_job_owner', 'check_name', 'check_namespace', 'check_role',
     'check_schedule_field', 'check_ttl', 'confirm', 'confirm_leases', 'count_runs_deleted', 'count_runs_inserted',
     'count_runs_updated', 'end_runs', 'epoch', 'fences_after', 'fork_base', 'grant_access', 'grant_statements',
     'holder_gone', 'in_namespace', 'is_free', 'is_member_of', 'jobs_revision', 'live_job', 'live_runners',
     'liveness_incarnation', 'mark_slow_runs', 'may_act_as', 'may_run', 'namespace_prefixes', 'next_fence', 'notify_changes',
     'pin_synchronous_commit', 'record_action', 'refresh_run_counts', 'refuse', 'refuse_holder', 'refuse_name', 'refuse_ttl',
     'revoke_access', 'run_outcomes', 'run_start',
     'run_timed_out', 'secure_schema', 'server_incarnation', 'slot_to_answer', 'timezone_problem', 'unstarted_ahead', 'worker_key_tag'])
) as v(level, objects);

insert into leasehold.migrations (version, name, breaking, checksum) values (28, 'baseline', true, 'a3ab583ff31f956b6fd7875ceb677704e9a56bbbc44ca7257bef786c59c9e2c6');

do $$ begin
  if to_regprocedure('leasehold.secure_schema()') is not null then perform leasehold.secure_schema(); end if;
end $$;
