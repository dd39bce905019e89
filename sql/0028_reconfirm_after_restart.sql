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
