-- leasehold schema, part 6 of 6: the privilege model (see docs/security.md).
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
--   operator  reader + control (pause, resume, run now, backfill, force release, prune)
-- secure_schema() applies all of this generically; the migration runner (and the install
-- script) call it after every migration, so a function added later is covered too.


create table leasehold.access (
  object text primary key,
  level text not null,
  constraint access_level_check CHECK ((level = ANY (ARRAY['reader'::text, 'client'::text, 'operator'::text, 'owner'::text])))
);
comment on table leasehold.access is
  'Which level may use each function, view or table of the schema (owner: nobody but the schema owner).';

-- Roles granted a level through grant_access(); secure_schema() grants them what later
-- migrations add, so an upgrade never takes a working role's access away.
create table leasehold.grants (
  role text not null,
  level text not null,
  granted_at timestamp with time zone not null default now(),
  constraint grants_pkey PRIMARY KEY (role, level),
  constraint grants_level_check CHECK ((level = ANY (ARRAY['reader'::text, 'client'::text, 'operator'::text])))
);

-- Namespaces: a role bound to name prefixes (leasehold grant ROLE --as client --namespace
-- billing:) acts only on leases, jobs, schedules and requests whose names start with one of
-- them, whatever its level: services that share one database cannot reach each other's jobs. A
-- role with no row here (and the schema owner, and superusers) is not bound: the whole schema,
-- as for a database that serves one service. Checked against session_user, the login role, so
-- psql, Python and TypeScript callers are bound alike; a login role is bound by the rows of every
-- role it is a member of.
create table leasehold.namespaces (
  role       text not null,
  prefix     text not null check (char_length(prefix) between 1 and 100),
  granted_at timestamptz not null default now(),
  primary key (role, prefix)
);
comment on table leasehold.namespaces is
  'Name prefixes a role is bound to (none: the whole schema). Written by grant_access(role, level, namespace).';

-- namespace_prefixes: the prefixes the caller (session_user) is bound to; null when it is not
-- bound. The first probe keeps a database without namespaces at one read of an empty table.
create function leasehold.namespace_prefixes() returns text[]
language sql stable as $$
  select case when not exists (select 1 from leasehold.namespaces) then null
              when leasehold.acting_role() is null then null
              else (select array_agg(s.prefix order by s.prefix) from leasehold.namespaces s
                     where s.role = session_user::text
                        or (to_regrole(quote_ident(s.role)) is not null
                            and pg_has_role(session_user, to_regrole(quote_ident(s.role)), 'member')))
         end;
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
  v_prefixes text[] := leasehold.namespace_prefixes();
  v_outside text;
begin
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
  select p_role is null or p_role = session_user::text or leasehold.acting_role() is null
      or (to_regrole(quote_ident(p_role)) is not null and pg_has_role(session_user, to_regrole(quote_ident(p_role)), 'member'));
$$;

-- check_job_owner: refuses (42501) a change of jobs p_names that another role owns.
create function leasehold.check_job_owner(p_names text[]) returns void
language plpgsql stable as $$
declare
  v_job text;
  v_owner text;
begin
  select j.name, j.owner_role into v_job, v_owner
    from leasehold.jobs j where j.name = any (p_names) and not leasehold.may_act_as(j.owner_role)
   limit 1;
  if found then
    raise exception 'role "%" may not change job "%": it belongs to role "%"', session_user, v_job, v_owner
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

-- grant_statements (0005) printed argument types as they read on its own pinned search_path,
-- which includes this schema: renew_leases' argument came out as a bare lease_renewal[], and
-- that GRANT fails when run elsewhere (`leasehold grant --print`). The same statements, with
-- the argument types of this schema qualified (pg_catalog's types read as before).
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

-- grant_access: applies grant_statements and remembers the role, so that later migrations
-- extend its grants; with p_namespace, also binds the role to that name prefix (more than one
-- call: more prefixes). Returns the statements it ran.
create function leasehold.grant_access(p_role text, p_level text, p_namespace text default null) returns setof text
language plpgsql volatile as $$
declare
  s text;
begin
  if to_regrole(quote_ident(p_role)) is null then
    raise exception 'role "%" does not exist', p_role
      using errcode = '42704', hint = 'Create it first, e.g. create role ... login password ''...''.';
  end if;
  if p_namespace is not null then
    if char_length(p_namespace) not between 1 and 100 or leasehold.check_characters(p_namespace) is not null then
      raise exception 'a namespace is a name prefix of 1-100 visible characters (got %)', quote_literal(p_namespace)
        using errcode = '22023';
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
  -- no level left: its namespaces go too (a namespace only ever narrows a level)
  if n = 0 then
    delete from leasehold.namespaces ns where ns.role = p_role;
  end if;
  return n;
end $$;

-- secure_schema: the generic pass, idempotent. Run after every migration.
--
-- Every function a role may call (levels reader, client, operator), every trigger function and
-- the functions the owner calls at top level (the privilege tools, refresh_run_counts) run with
-- the owner's rights and the pinned search_path. The internal steps of the protocol (level owner: is_free, epoch, next_fence, the
-- check_* helpers, ...) run inside those functions only: executable by nobody but the owner,
-- they inherit the caller's pinned search_path and rights and pin nothing themselves, so that
-- PostgreSQL can inline them and a call does not save and restore its settings (measured: three
-- quarters of the server time of a declined acquire went to those saves and restores).
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
  for f in select p.proname, pg_get_function_identity_arguments(p.oid) as args,
                  coalesce(a.level, 'entry') = 'owner' and p.prorettype <> 'trigger'::regtype
                    and p.proname not in ('secure_schema', 'grant_access', 'grant_statements', 'revoke_access', 'refresh_run_counts') as step
             from pg_proc p left join leasehold.access a on a.object = p.proname
            where p.pronamespace = 'leasehold'::regnamespace and p.prokind in ('f', 'p') loop
    if f.step then
      execute format('alter routine leasehold.%I(%s) security invoker reset search_path', f.proname, f.args);
    else
      execute format('alter routine leasehold.%I(%s) security definer set search_path = pg_catalog, leasehold, pg_temp',
                     f.proname, f.args);
    end if;
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

insert into leasehold.access (object, level) values
  ('acquire', 'client'),
  ('assert_lease', 'client'),
  ('claim', 'client'),
  ('claim_requests', 'client'),
  ('define_schedule', 'client'),
  ('enqueue_slots', 'client'),
  ('finish_held_run', 'client'),
  ('finish_runs', 'client'),
  ('holds_lease', 'client'),
  ('record_clock_step', 'client'),
  ('record_missed_slots', 'client'),
  ('record_skip', 'client'),
  ('register_jobs', 'client'),
  ('register_liveness', 'client'),
  ('release', 'client'),
  ('remove_schedule', 'client'),
  ('renew_leases', 'client'),
  ('schedule_changes', 'client'),
  ('start_run', 'client'),
  ('force_release', 'operator'),
  ('pause_job', 'operator'),
  ('prune_history', 'operator'),
  ('request_backfill', 'operator'),
  ('resume_job', 'operator'),
  ('run_now', 'operator'),
  ('add_run_counts', 'owner'),
  ('check_claim_requests', 'owner'),
  ('check_lease_name', 'owner'),
  ('check_schedule_field', 'owner'),
  ('confirm', 'owner'),
  ('confirm_leases', 'owner'),
  ('count_runs_deleted', 'owner'),
  ('count_runs_inserted', 'owner'),
  ('count_runs_updated', 'owner'),
  ('end_runs', 'owner'),
  ('fence_after', 'owner'),
  ('fences_after', 'owner'),
  ('fork_base', 'owner'),
  ('forks', 'owner'),
  ('grant_access', 'owner'),
  ('reconfirm_leases', 'client'),
  ('epoch_source', 'reader'),
  ('worker_starts', 'owner'),
  ('start_tick', 'client'),
  ('namespace_prefixes', 'owner'),
  ('in_namespace', 'owner'),
  ('check_namespace', 'owner'),
  ('acting_role', 'owner'),
  ('may_act_as', 'owner'),
  ('check_job_owner', 'owner'),
  ('namespaces', 'reader'),
  ('server_incarnation', 'owner'),
  ('grant_statements', 'owner'),
  ('is_free', 'owner'),
  ('job_revisions', 'owner'),
  ('jobs_revision', 'owner'),
  ('liveness_incarnation', 'owner'),
  ('mark_slow_runs', 'owner'),
  ('next_fence', 'owner'),
  ('notify_changes', 'owner'),
  ('pin_synchronous_commit', 'owner'),
  ('record_action', 'owner'),
  ('release_matching', 'owner'),
  ('revoke_access', 'owner'),
  ('run_start', 'owner'),
  ('run_timed_out', 'owner'),
  ('secure_schema', 'owner'),
  ('timezone_problem', 'owner'),
  ('worker_handlers', 'owner'),
  ('worker_key_tag', 'owner'),
  ('actions', 'reader'),
  ('breaking_since', 'reader'),
  ('check_characters', 'owner'),
  ('check_holder', 'owner'),
  ('check_name', 'owner'),
  ('check_ttl', 'owner'),
  ('clock_steps', 'reader'),
  ('epoch', 'owner'),
  ('fleet_status', 'reader'),
  ('fleet_summary', 'reader'),
  ('holder_gone', 'owner'),
  ('job_status', 'reader'),
  ('jobs', 'reader'),
  ('lease_status', 'reader'),
  ('liveness_locks', 'reader'),
  ('missed', 'reader'),
  ('run_counts', 'reader'),
  ('run_history', 'reader'),
  ('run_log', 'reader'),
  ('run_outcomes', 'owner'),
  ('refresh_run_counts', 'owner'),
  ('run_request_status', 'reader'),
  ('run_requests', 'reader'),
  ('runs', 'reader'),
  ('schema_version', 'reader'),
  ('skips', 'reader'),
  ('slow_runs', 'reader'),
  ('unhandled_schedules', 'reader'),
  ('live_handlers', 'owner');
