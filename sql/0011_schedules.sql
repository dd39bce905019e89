-- leasehold migration 0011: schedules defined at run time, and pause/resume.
--
-- Additive. A job was a row of leasehold.jobs that a worker registered from its code. Now an
-- application may also define jobs as data (define_schedule / remove_schedule: a handler name
-- and a JSON payload next to the schedule) and an operator may pause and resume any job.
--
-- * Every change of a jobs row takes the next value of leasehold.job_revisions (a trigger, so
--   register_jobs' writes count too). schedule_changes(after) is one range of the unique index
--   on revision: a worker asks once per poll for what changed since the last revision it saw.
--   Writers of leasehold.jobs take one transaction-level advisory lock before they draw a
--   revision, so revisions become visible in the order they were drawn: a reader that saw
--   revision n never later finds a committed n-1 it skipped.
-- * Removal leaves a tombstone (removed_at), so that the workers that run the job hear of it.
-- * A name belongs to code or to data. define_schedule refuses a name a worker registered from
--   code; a worker that registers a code job under the name of a data job takes the name over
--   (the row becomes a code job, the feed tells the other workers to drop the data job).
-- * The claim is refused in the database for a paused or removed job: the mark is on the lease
--   row itself (leases.suspended), which claim() locks FOR UPDATE, so a pause that committed
--   before a claim locked the row is seen by it (READ COMMITTED re-checks the locked row's
--   newest version), and a pause waits for a claim that locked the row first.

create sequence leasehold.job_revisions;

alter table leasehold.jobs
  add column source text not null default 'code' check (source in ('code', 'data')),
  add column handler text,
  add column payload jsonb,
  add column defined_by text,
  add column buffer_limit integer,
  add column starting_deadline_ms bigint,
  -- stored for the per-run timeout and jitter options; null: none
  add column timeout_ms bigint check (timeout_ms > 0),
  add column jitter_ms bigint check (jitter_ms > 0),
  add column removed_at timestamptz,
  add column paused_at timestamptz,
  add column paused_by text,
  add column pause_reason text,
  add column revision bigint not null default nextval('leasehold.job_revisions');
create unique index jobs_revision on leasehold.jobs (revision);

-- null: claimable; 'paused' or 'removed': claim() refuses every slot of the job
alter table leasehold.leases add column suspended text check (suspended in ('paused', 'removed'));

-- The writers of this migration say so; any other write of leasehold.jobs is register_jobs (or
-- register_external_job): a code job's registration.
create function leasehold.jobs_revision() returns trigger
language plpgsql volatile as $$
begin
  perform pg_advisory_xact_lock(7308604897068083572);
  if current_setting('leasehold.job_writer', true) is distinct from 'schedules' then
    if tg_op = 'UPDATE' and old.source = 'data' then
      -- a code job takes the name over: it is claimable again unless paused
      update leasehold.leases l set suspended = case when old.paused_at is null then null else 'paused' end
       where l.name = new.name;
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

create trigger jobs_revision before insert or update on leasehold.jobs
  for each row execute function leasehold.jobs_revision();

-- check_schedule_field: raises LH005 naming the field when p_ok is not true.
create function leasehold.check_schedule_field(p_ok boolean, p_field text, p_message text) returns void
language plpgsql immutable as $$
begin
  if p_ok is not true then
    raise exception '%: %', p_field, p_message using errcode = 'LH005',
      hint = 'Define schedules through the client (control.define) or see docs/sql-api.md for the bounds.';
  end if;
end $$;

-- define_schedule: creates or changes a job defined as data. Upsert by name; a definition equal
-- to the stored one changes nothing (no new revision, no action recorded). A changed schedule or
-- timezone applies from the next slot (the slots between never existed), as in register_jobs.
create function leasehold.define_schedule(
  p_name text, p_handler text, p_by text,
  p_cron text default null, p_every interval default null, p_timezone text default null,
  p_payload jsonb default null, p_ttl interval default null,
  p_overlap text default null, p_catch_up text default null, p_buffer_limit integer default 10,
  p_starting_deadline interval default null, p_timeout interval default null, p_jitter interval default null
) returns table (name text, revision bigint, created boolean, changed boolean)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v_old leasehold.jobs;
  -- the defaults of a code job (null: the default), so that a caller may pass null for any
  v_payload jsonb := coalesce(p_payload, '{}'::jsonb);
  v_ttl interval := coalesce(p_ttl, interval '30 seconds');
  v_overlap text := coalesce(p_overlap, 'skip');
  v_catch_up text := coalesce(p_catch_up, 'latest');
  v_cron text := btrim(p_cron);
  v_every_ms bigint := (extract(epoch from p_every) * 1000)::bigint;
  v_schedule text;
  v_interval_ms bigint;
  v_deadline_ms bigint := (extract(epoch from p_starting_deadline) * 1000)::bigint;
  v_row leasehold.jobs;
begin
  perform leasehold.check_name(p_name);
  perform leasehold.check_holder(p_by);
  perform leasehold.check_schedule_field(p_handler is not null and char_length(p_handler) between 1 and 200
    and leasehold.check_characters(p_handler) is null, 'handler', 'must be 1-200 characters without control or invisible characters');
  perform leasehold.check_schedule_field((v_cron is null) <> (p_every is null), 'schedule', 'give exactly one of cron and every');
  if v_cron is not null then
    perform leasehold.check_schedule_field(char_length(v_cron) between 9 and 200
      and array_length(regexp_split_to_array(v_cron, '\s+'), 1) in (5, 6)
      and v_cron ~ '^[0-9A-Za-z*/,?#\-\s]+$', 'cron', format('must be 5 fields (or 6 with seconds first) of digits, names and * / , - ? # L W (got %L)', left(v_cron, 200)));
    if p_timezone is not null then
      perform leasehold.check_schedule_field(p_timezone ~ '^[A-Za-z][A-Za-z0-9_+\-/]{0,63}$', 'timezone', format('must be an IANA timezone name (got %L)', left(p_timezone, 64)));
      begin
        perform now() at time zone p_timezone;
      exception when others then
        perform leasehold.check_schedule_field(false, 'timezone', format('unknown timezone %L', p_timezone));
      end;
    end if;
    v_schedule := v_cron;
    v_interval_ms := null;
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

  perform set_config('leasehold.job_writer', 'schedules', true);
  insert into leasehold.leases (name) values (p_name) on conflict do nothing;
  select * into v_old from leasehold.jobs j where j.name = p_name for update;
  if found and v_old.source = 'code' then
    perform set_config('leasehold.job_writer', '', true);
    raise exception 'job "%" is defined in code (registered by %): a data schedule cannot take its name', p_name, v_old.registered_by
      using errcode = 'LH006', hint = 'Pick another name, or remove the job from the workers'' code first.';
  end if;
  if found and v_old.removed_at is null
     and (v_old.schedule, v_old.timezone, v_old.interval_ms, v_old.ttl_ms, v_old.overlap, v_old.catch_up, v_old.handler,
          v_old.payload, v_old.buffer_limit, v_old.starting_deadline_ms, v_old.timeout_ms, v_old.jitter_ms)
         is not distinct from
         (v_schedule, p_timezone, v_interval_ms, (extract(epoch from v_ttl) * 1000)::bigint, v_overlap, v_catch_up, p_handler,
          v_payload, p_buffer_limit, v_deadline_ms, (extract(epoch from p_timeout) * 1000)::bigint, (extract(epoch from p_jitter) * 1000)::bigint) then
    perform set_config('leasehold.job_writer', '', true);
    return query select p_name, v_old.revision, false, false;
    return;
  end if;
  -- a new schedule, a changed one, or one defined again after its removal: from the next slot on
  update leasehold.leases l
     set last_slot = greatest(l.last_slot, now()),
         suspended = case when v_old.paused_at is not null and v_old.removed_at is null then 'paused' else null end
   where l.name = p_name
     and (v_old.name is null or v_old.removed_at is not null
          or (v_old.schedule, v_old.timezone) is distinct from (v_schedule, p_timezone)
          or l.suspended = 'removed')
     and (l.last_slot is not null or l.suspended is not null);
  insert into leasehold.jobs as j (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by,
                                   source, handler, payload, defined_by, buffer_limit, starting_deadline_ms, timeout_ms, jitter_ms)
  values (p_name, v_schedule, p_timezone, v_interval_ms, (extract(epoch from v_ttl) * 1000)::bigint, v_overlap, v_catch_up, p_by,
          'data', p_handler, v_payload, p_by, p_buffer_limit, v_deadline_ms,
          (extract(epoch from p_timeout) * 1000)::bigint, (extract(epoch from p_jitter) * 1000)::bigint)
  on conflict on constraint jobs_pkey do update
     set schedule = excluded.schedule, timezone = excluded.timezone, interval_ms = excluded.interval_ms,
         ttl_ms = excluded.ttl_ms, overlap = excluded.overlap, catch_up = excluded.catch_up,
         registered_by = excluded.registered_by, registered_at = now(), handler = excluded.handler,
         payload = excluded.payload, defined_by = excluded.defined_by, buffer_limit = excluded.buffer_limit,
         starting_deadline_ms = excluded.starting_deadline_ms, timeout_ms = excluded.timeout_ms,
         jitter_ms = excluded.jitter_ms,
         -- defined again after removal: a new job, not paused
         paused_at = case when j.removed_at is null then j.paused_at end,
         paused_by = case when j.removed_at is null then j.paused_by end,
         pause_reason = case when j.removed_at is null then j.pause_reason end,
         removed_at = null
  returning j.* into v_row;
  perform set_config('leasehold.job_writer', '', true);
  perform leasehold.record_action(case when v_old.name is null or v_old.removed_at is not null then 'schedule-defined' else 'schedule-changed' end,
    p_name, p_by, jsonb_build_object('schedule', v_schedule, 'timezone', p_timezone, 'handler', p_handler,
      'overlap', v_overlap, 'catch_up', v_catch_up, 'ttl_ms', v_row.ttl_ms, 'revision', v_row.revision));
  return query select p_name, v_row.revision, v_old.name is null or v_old.removed_at is not null, true;
end $$;

-- remove_schedule: removes a data job (a tombstone the workers read). A run in progress is left
-- to finish under its lease. Returns false when there was nothing to remove.
create function leasehold.remove_schedule(p_name text, p_by text) returns boolean
language plpgsql volatile
set lock_timeout = '2s'
as $$
declare
  v_old leasehold.jobs;
begin
  perform leasehold.check_holder(p_by);
  select * into v_old from leasehold.jobs j where j.name = p_name for update;
  if not found or v_old.removed_at is not null then
    return false;
  end if;
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

-- schedule_changes: the job rows changed after revision p_after_revision, oldest change first,
-- at most p_limit (1-10000) of them: one range of the index on revision. Code jobs come too
-- (their pause state); payloads only for the handlers named in p_handlers (null: all).
create function leasehold.schedule_changes(p_after_revision bigint, p_handlers text[], p_limit integer default 1000)
returns table (
  revision bigint, name text, source text, handler text, removed boolean,
  schedule text, timezone text, interval_ms bigint, ttl_ms bigint, overlap text, catch_up text,
  buffer_limit integer, starting_deadline_ms bigint, timeout_ms bigint, jitter_ms bigint, payload jsonb,
  paused_at timestamptz, paused_by text, pause_reason text, last_slot timestamptz, database_time timestamptz
)
language sql stable as $$
  select j.revision, j.name, j.source, j.handler, j.removed_at is not null,
         j.schedule, j.timezone, j.interval_ms, j.ttl_ms, j.overlap, j.catch_up,
         j.buffer_limit, j.starting_deadline_ms, j.timeout_ms, j.jitter_ms,
         case when p_handlers is null or j.handler = any (p_handlers) then j.payload end,
         j.paused_at, j.paused_by, j.pause_reason,
         (select l.last_slot from leasehold.leases l where l.name = j.name), now()
    from leasehold.jobs j
   where j.revision > coalesce(p_after_revision, 0)
   order by j.revision
   limit greatest(1, least(coalesce(p_limit, 1000), 10000));
$$;

-- schedule_snapshot: what a starting worker needs of leasehold.jobs before it follows
-- schedule_changes(): the data jobs of the handlers p_handlers and the paused jobs (code jobs
-- that are not paused, other handlers' jobs and tombstones are none of its business: at 100,000
-- jobs a worker of one handler would otherwise read them all), after revision p_after_revision
-- in revision order, at most p_limit. The caller reads the newest revision of the table first
-- and follows schedule_changes() from it: a change made meanwhile is read twice, never missed.
create function leasehold.schedule_snapshot(p_handlers text[], p_after_revision bigint default 0, p_limit integer default 1000)
returns table (
  revision bigint, name text, source text, handler text, removed boolean,
  schedule text, timezone text, interval_ms bigint, ttl_ms bigint, overlap text, catch_up text,
  buffer_limit integer, starting_deadline_ms bigint, timeout_ms bigint, jitter_ms bigint, payload jsonb,
  paused_at timestamptz, paused_by text, pause_reason text, last_slot timestamptz, database_time timestamptz
)
language sql stable as $$
  select j.revision, j.name, j.source, j.handler, false,
         j.schedule, j.timezone, j.interval_ms, j.ttl_ms, j.overlap, j.catch_up,
         j.buffer_limit, j.starting_deadline_ms, j.timeout_ms, j.jitter_ms,
         case when j.handler = any (p_handlers) then j.payload end,
         j.paused_at, j.paused_by, j.pause_reason,
         (select l.last_slot from leasehold.leases l where l.name = j.name), now()
    from leasehold.jobs j
   where j.revision > coalesce(p_after_revision, 0) and j.removed_at is null
     and ((j.source = 'data' and j.handler = any (p_handlers)) or j.paused_at is not null)
   order by j.revision
   limit greatest(1, least(coalesce(p_limit, 1000), 10000));
$$;

-- pause_job: no slot of the job is claimed until resume_job. The lease's last_slot stays where
-- it is, so the pause is downtime on purpose: on resume the workers apply the job's catch-up
-- policy and record the slots that do not run as missed ('paused'). With p_stop_running the run
-- in progress loses its lease (its token no longer holds: heartbeats and fenced writes fail)
-- and is recorded aborted; otherwise it finishes.
create function leasehold.pause_job(p_name text, p_by text, p_reason text default null, p_stop_running boolean default false)
returns table (paused boolean, already_paused boolean, stopped_holder text, stopped_fence bigint)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v_job leasehold.jobs;
  v_lease leasehold.leases;
begin
  perform leasehold.pin_synchronous_commit();
  perform leasehold.check_holder(p_by);
  if p_reason is not null then
    perform leasehold.check_schedule_field(char_length(p_reason) <= 1000 and leasehold.check_characters(p_reason) is null,
      'reason', 'must be at most 1000 characters without control or invisible characters');
  end if;
  select * into v_job from leasehold.jobs j where j.name = p_name and j.removed_at is null for update;
  if not found then
    raise exception 'no job named "%"', p_name using errcode = 'LH006';
  end if;
  insert into leasehold.leases (name) values (p_name) on conflict do nothing;
  -- waits for a claim that locked the row first; a later claim sees the mark
  select * into v_lease from leasehold.leases l where l.name = p_name for update;
  update leasehold.leases l set suspended = 'paused' where l.name = p_name;
  if v_job.paused_at is null then
    perform set_config('leasehold.job_writer', 'schedules', true);
    update leasehold.jobs j set paused_at = now(), paused_by = p_by, pause_reason = p_reason where j.name = p_name;
    perform set_config('leasehold.job_writer', '', true);
  end if;
  if p_stop_running and v_lease.token is not null then
    -- the operator's override, as force_release does it: the fence moves past the holder's
    perform from leasehold.force_release(p_name);
    update leasehold.runs r
       set outcome = 'aborted', finished_at = now(), error = left('stopped: paused by ' || p_by || coalesce(' (' || p_reason || ')', ''), 4000)
     where r.job = p_name and r.outcome = 'running';
  end if;
  perform leasehold.record_action('paused', p_name, p_by, jsonb_build_object('reason', p_reason, 'stop_running', p_stop_running,
    'stopped_holder', case when p_stop_running then v_lease.holder end, 'already_paused', v_job.paused_at is not null));
  return query select true, v_job.paused_at is not null,
    case when p_stop_running and v_lease.token is not null then v_lease.holder end,
    case when p_stop_running and v_lease.token is not null then v_lease.fence end;
end $$;

-- resume_job: the job's slots are claimed again; workers apply its catch-up policy.
create function leasehold.resume_job(p_name text, p_by text)
returns table (resumed boolean, paused_at timestamptz, paused_by text)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v_job leasehold.jobs;
begin
  perform leasehold.check_holder(p_by);
  select * into v_job from leasehold.jobs j where j.name = p_name and j.removed_at is null for update;
  if not found then
    raise exception 'no job named "%"', p_name using errcode = 'LH006';
  end if;
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

-- claim: as in schema 9, and a paused or removed job's slot is never claimed (reason 'paused' or
-- 'removed'). Nothing is recorded for such a slot: last_slot does not move.
create or replace function leasehold.claim(
  p_claims leasehold.slot_claim[], p_holder text, p_holder_key bigint default null
) returns table (
  job            text,
  slot           timestamptz,
  claimed        boolean,
  reason         text,
  token          uuid,
  fence          bigint,
  expires_at     timestamptz,
  previous_slot  timestamptz,
  holder         text,
  holder_fence   bigint,
  holder_slot    timestamptz,
  holder_since   timestamptz,
  skip_recorded  boolean,
  buffered       boolean,
  database_time  timestamptz,
  took_over      boolean
)
language plpgsql volatile
set lock_timeout = '2s'
set plan_cache_mode = force_custom_plan
set jit = off
as $$
#variable_conflict use_column
declare
  -- the claims this call locked, and the slot each claims (an older buffered one may come
  -- first); parallel arrays, so that no step joins two unnest()s (the planner's estimate of such
  -- a join is the product of their sizes)
  v_claims leasehold.slot_claim[];
  v_slots timestamptz[];
  -- the same for every row of this call: asked once, not once per claimed row (each asks
  -- pg_current_wal_lsn(), and the liveness check reads pg_locks)
  v_epoch integer := leasehold.epoch();
  v_incarnation text := leasehold.liveness_incarnation(p_holder_key);
begin
  perform leasehold.check_holder(p_holder);
  -- the same bounds as acquire: a caller must not hold a job for a century
  perform leasehold.check_ttl(c.ttl) from unnest(p_claims) c;
  perform leasehold.pin_synchronous_commit();

  -- 1. Lock the lease rows this call may claim. Random order with SKIP LOCKED, so workers
  --    claiming the same tick share the jobs instead of queueing behind one another.
  select coalesce(array_agg(x.claim), '{}'), coalesce(array_agg(x.claim_slot), '{}') into v_claims, v_slots
    from (
      select w.claim, w.claim_slot
        from leasehold.leases l
        join (
          select c.job, c.mode, c.buffer_cap, c as claim,
                 least(c.slot, coalesce(
                   (select min(b.slot) from leasehold.buffered b
                     where b.job = c.job
                       and b.slot > coalesce((select l2.last_slot from leasehold.leases l2 where l2.name = c.job), '-infinity')
                       -- a queued catch-up slot whose skip is final (overlap 'skip') never runs:
                       -- it must not stand in front of the later slots for ever
                       and not (c.mode = 'exclusive' and c.buffer_cap = 0
                                and exists (select 1 from leasehold.skips k where k.job = b.job and k.slot = b.slot))),
                   c.slot)) as claim_slot
            from unnest(p_claims) c
        ) w on w.job = l.name
       where w.claim_slot <= now()
         -- cheap and necessary (a claim slot is never after the slot asked for), so that a
         -- slot a peer already claimed costs no is_free() (a read of pg_locks per row)
         and (l.last_slot is null or (w.claim).slot > l.last_slot)
         and (l.last_slot is null or w.claim_slot > l.last_slot)
         -- under overlap 'skip' a recorded skip is final: a late tick, a retry or a catch-up
         -- claim must not run the slot after its holder releases
         and not (w.mode = 'exclusive' and w.buffer_cap = 0
                  and exists (select 1 from leasehold.skips k where k.job = w.job and k.slot = w.claim_slot))
         and (w.mode in ('replace', 'allow') or leasehold.is_free(l))
         -- paused or removed (schema 11): checked on the locked row's newest version
         and l.suspended is null
       order by random()
         for update of l skip locked
    ) x;

  -- 2. A skip recorded by a peer that held the row (FOR SHARE) until step 1 got its lock
  --    committed before it: this statement's snapshot sees it, the lock of step 1 did not.
  select coalesce(array_agg(row(k.job, k.slot, k.ttl, k.mode, k.buffer_cap)::leasehold.slot_claim), '{}'),
         coalesce(array_agg(k.claim_slot), '{}') into v_claims, v_slots
    from unnest(v_claims, v_slots) k(job, slot, ttl, mode, buffer_cap, claim_slot)
   where not (k.mode = 'exclusive' and k.buffer_cap = 0
              and exists (select 1 from leasehold.skips s where s.job = k.job and s.slot = k.claim_slot));

  -- 3. Claim what is locked and still claimable.
  return query
  with claiming as (
    select k.job as name, k.claim_slot, k.slot, k.ttl, k.mode, k.buffer_cap as cap
      from unnest(v_claims, v_slots) k(job, slot, ttl, mode, buffer_cap, claim_slot)
  ),
  claimed as (
    update leasehold.leases l
       set fence = leasehold.fence_after(l.fence, v_epoch),
           last_slot = c.claim_slot,
           token = case when c.mode = 'allow' then l.token else gen_random_uuid() end,
           holder = case when c.mode = 'allow' then l.holder else p_holder end,
           holder_key = case when c.mode = 'allow' then l.holder_key else p_holder_key end,
           acquired_at = case when c.mode = 'allow' then l.acquired_at else now() end,
           expires_at = case when c.mode = 'allow' then l.expires_at else now() + c.ttl end,
           released_at = case when c.mode = 'allow' then l.released_at else null end,
           ttl = case when c.mode = 'allow' then l.ttl else c.ttl end,
           epoch = case when c.mode = 'allow' then l.epoch else v_epoch end,
           holder_incarnation = case when c.mode = 'allow' then l.holder_incarnation else v_incarnation end
      from claiming c
     where l.name = c.name
    -- the row as it was (previous_slot, previous_token) comes from the locked version
    returning l.name, c.claim_slot, c.slot as wanted_slot, c.cap, c.mode, l.token, l.fence, l.expires_at
  ),
  previous as (
    select l.name, l.last_slot as previous_slot, l.token as previous_token
      from leasehold.leases l join claiming c on c.name = l.name
  ),
  started as (
    insert into leasehold.runs (job, slot, fence, holder)
    select c.name, c.claim_slot, c.fence, p_holder from claimed c
  ),
  -- A run still 'running' under an older fence lost its lease when this one took it (its
  -- holder died, expired or was replaced); 'allow' runs overlap by design and stay running.
  superseded as (
    update leasehold.runs r
       set outcome = 'lost', finished_at = now(), error = 'lease taken over by ' || p_holder
      from claimed c
     where r.job = c.name and c.mode <> 'allow' and r.outcome = 'running' and r.fence < c.fence
  ),
  unbuffered as (
    delete from leasehold.buffered b using claimed c where b.job = c.name and b.slot <= c.claim_slot
  ),
  rebuffered as (
    -- the slot that came in behind a buffered one waits its turn (within the cap)
    insert into leasehold.buffered (job, slot)
    select c.name, c.wanted_slot from claimed c
     where c.claim_slot < c.wanted_slot
       and (select count(*) from leasehold.buffered b where b.job = c.name and b.slot > c.claim_slot) < c.cap
    on conflict do nothing
  )
  select c.name, c.claim_slot, true, 'claimed'::text, case when c.mode = 'allow' then null else c.token end,
         c.fence, case when c.mode = 'allow' then null else c.expires_at end, p.previous_slot,
         p_holder, null::bigint, null::timestamptz, null::timestamptz, false, false, now(),
         c.mode <> 'allow' and p.previous_token is not null
    from claimed c join previous p on p.name = c.name;

  -- 4. Everything not claimed above: say why, record a real skip once per slot, buffer it
  --    if the policy says so.
  return query
  with pending as (
    select c.job, c.slot, c.mode, c.buffer_cap as cap, l.holder as l_holder, l.fence as l_fence,
           l.last_slot as l_last_slot, l.acquired_at as l_acquired_at,
           exists (select 1 from leasehold.skips k where k.job = c.job and k.slot = c.slot) as skip_exists,
           case
             when l.name is null then 'unknown-job'
             when l.suspended = 'paused' then 'paused'
             when l.suspended = 'removed' then 'removed'
             when c.slot > now() then 'slot-not-due'
             when l.last_slot is not null and c.slot <= l.last_slot then 'slot-taken'
             when c.mode = 'exclusive' and c.buffer_cap = 0
                  and exists (select 1 from leasehold.skips k where k.job = c.job and k.slot = c.slot) then 'slot-skipped'
             -- replace and allow only fail on a row lock: a transient state, not a skip
             when c.mode in ('replace', 'allow') then 'holder-committing'
             when not leasehold.is_free(l) then 'held'
             else 'holder-committing'
           end as why
      from unnest(p_claims) c
      left join leasehold.leases l on l.name = c.job
     where c.job not in (select k.job from unnest(v_claims) k)
  ),
  -- held, as the newest row version says under a lock no claim can pass; a row a claimer has
  -- locked (SKIP LOCKED) or that changed meanwhile is reported holder-committing: ask again.
  -- A slot whose skip is recorded already needs no lock (and takes no lock, no xid).
  held as (
    select p.job, p.slot, p.cap, l.holder, l.fence, l.last_slot, l.acquired_at
      from pending p join leasehold.leases l on l.name = p.job
     where p.why = 'held' and not p.skip_exists
       and (l.last_slot is null or p.slot > l.last_slot)
       and not leasehold.is_free(l)
       for share of l skip locked
  ),
  skipped as (
    insert into leasehold.skips (job, slot, holder, holder_fence, holder_slot, held_for, recorded_by)
    select h.job, h.slot, h.holder, h.fence, h.last_slot, now() - h.acquired_at, p_holder
      from held h
    on conflict do nothing
    returning skips.job, skips.slot
  ),
  buffering as (
    insert into leasehold.buffered (job, slot)
    select h.job, h.slot from held h
     where h.cap > 0
       and (select count(*) from leasehold.buffered b where b.job = h.job) < h.cap
    on conflict do nothing
    returning buffered.job, buffered.slot
  )
  select p.job, p.slot, false,
         case when p.why = 'held' and not p.skip_exists and not exists (select 1 from held h where h.job = p.job)
              then 'holder-committing' else p.why end,
         null::uuid, null::bigint, null::timestamptz, null::timestamptz,
         p.l_holder, p.l_fence, p.l_last_slot, p.l_acquired_at,
         exists (select 1 from skipped s where s.job = p.job and s.slot = p.slot),
         exists (select 1 from buffering b where b.job = p.job and b.slot = p.slot),
         now(), false
    from pending p;
end $$;

insert into leasehold.access (object, level) values
  ('job_revisions', 'owner'), ('jobs_revision', 'owner'), ('check_schedule_field', 'owner'),
  ('define_schedule', 'client'), ('remove_schedule', 'client'), ('schedule_changes', 'client'), ('schedule_snapshot', 'client'),
  ('pause_job', 'operator'), ('resume_job', 'operator');

-- job_status: as in schema 8, without removed data jobs, with state 'paused' for a paused job
-- whose lease is not held (a run left running shows 'running'), and six columns at the end:
-- source ('code' or 'data'), handler, who paused the job, when and why, and timed_out_24h (runs
-- that outlived their job's timeout, schema 13: a failure like failed and lost).
create or replace view leasehold.job_status as
select j.name as job,
       j.schedule,
       j.timezone,
       j.interval_ms,
       j.ttl_ms,
       j.overlap,
       j.catch_up,
       case when l.token is null and j.paused_at is not null then 'paused'
            when l.token is null then 'idle' when l.expires_at <= now() then 'expired' else 'running' end as state,
       case when l.token is null then null else l.holder end as holder,
       case when l.token is null then null else extract(epoch from now() - l.acquired_at)::double precision end as lease_age_seconds,
       l.fence,
       l.last_slot,
       r.slot as last_run_slot,
       r.outcome as last_outcome,
       r.started_at as last_started_at,
       r.finished_at as last_finished_at,
       r.error as last_error,
       coalesce(rc.runs, 0)::integer as runs_24h,
       coalesce(rc.failed, 0)::integer as failed_24h,
       coalesce(rc.lost, 0)::integer as lost_24h,
       rc.p50::double precision as p50_seconds,
       rc.p95::double precision as p95_seconds,
       case when j.interval_ms > 0 and rc.p95 is not null then (rc.p95 * 1000 / j.interval_ms)::double precision end as p95_interval_ratio,
       coalesce(s.n, 0)::integer as skips_24h,
       coalesce(m.n, 0)::integer as missed_24h,
       j.source,
       j.handler,
       j.paused_at,
       j.paused_by,
       j.pause_reason,
       coalesce(rc.timed_out, 0)::integer as timed_out_24h
  from leasehold.jobs j
  left join leasehold.leases l on l.name = j.name
  left join lateral (
    select x.slot, x.outcome, x.started_at, x.finished_at, x.error
      from leasehold.runs x where x.job = j.name order by x.started_at desc limit 1
  ) r on true
  left join lateral (
    select count(*) as runs,
           count(*) filter (where x.outcome = 'failed') as failed,
           count(*) filter (where x.outcome = 'lost') as lost,
           count(*) filter (where x.outcome = 'timed-out') as timed_out,
           percentile_cont(0.5) within group (order by extract(epoch from x.finished_at - x.started_at)) as p50,
           percentile_cont(0.95) within group (order by extract(epoch from x.finished_at - x.started_at)) as p95
      from leasehold.runs x
     where x.job = j.name and x.finished_at is not null and x.started_at > now() - interval '24 hours'
  ) rc on true
  left join lateral (
    select count(*) as n from leasehold.skips x where x.job = j.name and x.recorded_at > now() - interval '24 hours'
  ) s on true
  left join lateral (
    select count(*) as n from leasehold.missed x where x.job = j.name and x.recorded_at > now() - interval '24 hours'
  ) m on true
 where j.removed_at is null;
