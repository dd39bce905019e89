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
