-- Before the 1.0 baseline: a schema created by a pre-release build (versions 22 to 27) is set
-- aside under the name leasehold_prerelease, so that the baseline is installed exactly as on an
-- empty database; 2_copy.sql then copies its rows across and drops it. Leases (tokens, fences,
-- expiries), history, jobs, requests, the audit and the roles' grants are kept. Clients wait on
-- the table locks below for the length of the upgrade, a second or so.
do $$
declare
  v integer := (select coalesce(max(version), 0) from leasehold.migrations);
  t record;
begin
  if v not between 22 and 27 then
    raise exception 'this script converts a pre-release leasehold schema (version 22 to 27), but the database is at version %', v
      using errcode = '55000';
  end if;
  if to_regnamespace('leasehold_prerelease') is not null then
    raise exception 'schema leasehold_prerelease exists: a conversion of the pre-release schema stopped half-way. Drop it (after a look) and run again'
      using errcode = '55000';
  end if;
  for t in select c.relname from pg_class c
            where c.relnamespace = 'leasehold'::regnamespace and c.relkind = 'r' order by c.relname loop
    execute format('lock table leasehold.%I in access exclusive mode', t.relname);
  end loop;
end $$;

alter schema leasehold rename to leasehold_prerelease;
