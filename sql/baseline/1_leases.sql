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

