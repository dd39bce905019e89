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
