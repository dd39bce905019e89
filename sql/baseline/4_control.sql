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
