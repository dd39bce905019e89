-- leasehold schema, part 6 of 6: the privilege model (see docs/security.md).
--
-- Every function runs with its owner's rights (SECURITY DEFINER) and a pinned search_path
-- (pg_catalog, leasehold, pg_temp), so that a role needs no privilege on the tables (it cannot
-- read a token or write a lease row but through the functions) and objects others create (an
-- operator public.*) are never picked up. Nothing is granted to PUBLIC; roles get a level
-- (reader, client, operator: leasehold.access), and secure_schema() applies it all after every
-- migration, so that a function added later is covered too.

create table leasehold.access (
  object text primary key, level text not null,
  constraint access_level_check CHECK ((level = ANY (ARRAY['reader'::text, 'client'::text, 'operator'::text, 'owner'::text])))
);
comment on table leasehold.access is
  'Which level may use each function, view or table of the schema (owner: nobody but the schema owner).';

-- Roles granted a level through grant_access(): secure_schema() grants them what later
-- migrations add, so an upgrade never takes a working role's access away.
create table leasehold.grants (
  role text not null, level text not null, granted_at timestamp with time zone not null default now(),
  constraint grants_pkey PRIMARY KEY (role, level),
  constraint grants_level_check CHECK ((level = ANY (ARRAY['reader'::text, 'client'::text, 'operator'::text])))
);

-- Namespaces: a role bound to name prefixes acts only on leases, jobs, schedules and requests
-- whose names start with one of them, whatever its level, so services that share a database
-- cannot reach each other's jobs. A role without rows (and the schema owner, and superusers) is
-- not bound. Checked against session_user, and the rows of every role it is a member of.
create table leasehold.namespaces (
  role text not null, prefix text not null check (char_length(prefix) between 1 and 100), granted_at timestamptz not null default now(),
  primary key (role, prefix)
);
comment on table leasehold.namespaces is
  'Name prefixes a role is bound to (none: the whole schema). Written by grant_access(role, level, namespace).';

-- namespace_prefixes: the caller's prefixes, null when it is not bound. The first probe keeps a
-- database without namespaces at one read of an empty table.
create function leasehold.namespace_prefixes() returns text[]
language sql stable as $$
  select case when not exists (select 1 from leasehold.namespaces) then null
              when leasehold.acting_role() is null then null
              else (select array_agg(s.prefix order by s.prefix) from leasehold.namespaces s
                     where s.role = session_user::text or leasehold.is_member_of(s.role))
         end;
$$;

-- is_member_of: whether session_user is a member of role p_role (false when there is none).
create function leasehold.is_member_of(p_role text) returns boolean
language sql stable as $$
  select to_regrole(quote_ident(p_role)) is not null and pg_has_role(session_user, to_regrole(quote_ident(p_role)), 'member');
$$;

-- in_namespace: whether the caller may act on p_name (always, when it is not bound).
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
  if not exists (select 1 from leasehold.namespaces) then
    return;
  end if;
  v_prefixes := leasehold.namespace_prefixes();
  if v_prefixes is null then
    return;
  end if;
  select x into v_outside from unnest(p_names) x where x is not null and not leasehold.in_namespace(x, v_prefixes) limit 1;
  if found then
    raise exception 'role "%" may not act on "%": it is bound to the namespace %', session_user, v_outside,
      array_to_string(v_prefixes, ', ')
      using errcode = '42501', hint = 'Name it with one of those prefixes, or grant the role another namespace.';
  end if;
end $$;

-- acting_role: the login role a job written now belongs to (jobs.owner_role): null for the
-- schema owner and superusers (a job any service's workers may run), else session_user.
create function leasehold.acting_role() returns text
language sql stable as $$
  select case when r.rolsuper or r.oid = n.nspowner then null else r.rolname::text end
    from pg_roles r, pg_namespace n where r.rolname = session_user and n.nspname = 'leasehold';
$$;

-- may_act_as: whether the caller may change, remove or run what p_role owns: p_role itself, a
-- member of it, the schema owner and superusers; anyone for what nobody owns (null).
create function leasehold.may_act_as(p_role text) returns boolean
language sql stable as $$
  select p_role is null or p_role = session_user::text or leasehold.acting_role() is null or leasehold.is_member_of(p_role);
$$;

-- check_job_owner: refuses (42501) a change of jobs p_names that another role owns.
create function leasehold.check_job_owner(p_names text[]) returns void
language plpgsql stable as $$
declare
  j leasehold.jobs;
begin
  select * into j from leasehold.jobs x where x.name = any (p_names) and not leasehold.may_act_as(x.owner_role) limit 1;
  if found then
    raise exception 'role "%" may not change job "%": it belongs to role "%"', session_user, j.name, j.owner_role
      using errcode = '42501', hint = 'Register or define it as that role, or have an operator remove it first.';
  end if;
end $$;

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

-- grant_statements: the GRANTs of level p_level for p_role. Argument types are printed on a
-- search_path without this schema, so that its own types come out qualified and the statements
-- run anywhere (`leasehold grant --print`).
create function leasehold.grant_statements(p_role text, p_level text) returns setof text
language plpgsql stable as $$
begin
  if p_level is null or p_level not in ('reader', 'client', 'operator') then
    raise exception 'level must be reader, client or operator (got %)', coalesce(p_level, 'null') using errcode = '22023';
  end if;
  if p_role is null or p_role = '' or lower(p_role) = 'public' then
    raise exception 'name a role (not PUBLIC) to grant leasehold access to' using errcode = '22023';
  end if;
  -- local to this call: the function's own search_path comes back when it returns
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

-- check_role: refuses (42704) a role that does not exist.
create function leasehold.check_role(p_role text) returns void
language plpgsql stable as $$
begin
  if to_regrole(quote_ident(p_role)) is null then
    raise exception 'role "%" does not exist', p_role
      using errcode = '42704', hint = 'Create it first, e.g. create role ... login password ''...''.';
  end if;
end $$;

-- grant_access: applies grant_statements and remembers the role, so that later migrations
-- extend its grants; with p_namespace, also binds the role to that name prefix (more than one
-- call: more prefixes). Returns the statements it ran.
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

-- revoke_access: takes the level away (and everything else in the schema), then grants the
-- role's remaining levels again; with none left, its namespaces go too. Returns the levels left.
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

-- secure_schema: the generic pass, idempotent, after every migration. Every function a role may
-- call, every trigger function and the functions the owner calls at top level (the privilege
-- tools, refresh_run_counts) run with the owner's rights and the pinned search_path. The internal
-- steps (level owner: is_free, epoch, next_fence, the check_* helpers, ...) run inside those
-- only: executable by nobody but the owner, they pin nothing, so that PostgreSQL can inline them
-- and a call does not save and restore its settings (three quarters of the server time of a
-- declined acquire went to those).
create function leasehold.secure_schema() returns void
language plpgsql volatile as $$
declare
  f record;
  r record;
begin
  -- only the owner creates objects here: one planted in the schema would be on every pinned path
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
  ('reader', array['actions', 'breaking_since', 'clock_steps', 'epoch_source', 'fleet_status',
     'fleet_summary', 'job_status', 'jobs', 'lease_status', 'liveness_locks', 'missed',
     'namespaces', 'run_counts', 'run_history', 'run_log', 'run_request_status', 'run_requests',
     'runs', 'schema_version', 'skips', 'slow_runs', 'unhandled_schedules', 'worker_handlers']),
  ('client', array['acquire', 'assert_lease', 'claim', 'claim_requests', 'define_schedule',
     'enqueue_slots', 'finish_held_run', 'finish_runs', 'holds_lease', 'reconfirm_leases',
     'record_clock_step', 'record_missed_slots', 'record_skip', 'register_jobs',
     'register_liveness', 'release', 'remove_schedule', 'renew_leases', 'schedule_changes',
     'start_run', 'start_tick']),
  ('operator', array['force_release', 'pause_job', 'prune_history', 'resume_job', 'run_now']),
  ('owner', array['acting_role', 'add_run_counts', 'bad_characters', 'check_characters', 'check_claim_requests',
     'check_holder', 'check_job_owner', 'check_lease_name', 'check_name', 'check_namespace',
     'check_role', 'check_schedule_field', 'check_ttl', 'confirm', 'confirm_leases', 'count_runs_deleted',
     'count_runs_inserted', 'count_runs_updated', 'end_runs', 'epoch',
     'fences_after', 'fork_base', 'grant_access', 'grant_statements', 'holder_gone',
     'in_namespace', 'is_free', 'is_member_of', 'jobs_revision', 'live_handlers', 'live_job', 'liveness_incarnation',
     'mark_slow_runs', 'may_act_as', 'namespace_prefixes', 'next_fence', 'notify_changes',
     'pin_synchronous_commit', 'record_action', 'refresh_run_counts',
     'revoke_access', 'run_outcomes', 'run_start', 'run_timed_out', 'secure_schema',
     'server_incarnation', 'timezone_problem', 'worker_key_tag'])
) as v(level, objects);
