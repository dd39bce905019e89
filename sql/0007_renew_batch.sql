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
