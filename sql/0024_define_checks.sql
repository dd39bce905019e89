-- leasehold migration 0024: define_schedule refuses definitions no worker can run, or that
-- break the readers of leasehold.jobs.
--
-- Additive for callers: every function keeps its arguments and rows; define_schedule refuses
-- more input, with the codes it used for the same fields (LH001 name, LH005 the others).
-- Definitions stored before are left as they are.
--
-- * timezone: PostgreSQL knows names the workers' Node.js (croner, Intl) refuses: 'posixrules'
--   (New York time), 'Factory', 'localtime', POSIX specifications such as 'UTC+5' (five hours
--   west), 'posix/Europe/Berlin', abbreviations such as 'PST'. Such a schedule was stored and
--   then skipped by every worker. Now only 'UTC' and the Area/Location names of the tz
--   database (Europe/Berlin, America/Argentina/Buenos_Aires, Etc/GMT+5) that this server knows
--   pass: timezone_problem() below, the rule the client applies too (src/validate/timezone.ts).
--   Legacy single names (EST, CET, GMT, Japan) are refused: America/Panama, Europe/Paris, UTC
--   and Asia/Tokyo say the same today.
-- * name: a name blank or with whitespace at either end (' nightly') passed check_name and then
--   looked like another job in every list. Lease names elsewhere keep their rules (acquire,
--   code jobs): refusing them there would stop workers that run such names today.
-- * payload: a payload nested 6,000 deep was stored, and JSON.stringify then overflowed the
--   stack of every `leasehold schedule list --json`. At most 32 levels of arrays and objects
--   now. A payload nested deeper than PostgreSQL's own jsonb parser goes (12,000 to 15,000
--   levels with the default max_stack_depth of 2MB) fails with PostgreSQL's 54001 while the
--   caller's statement parses it, before this function runs; the client refuses it before
--   sending.

-- timezone_problem: why p_timezone is not a name both PostgreSQL and the workers' Intl accept,
-- or null. 'UTC', or Area/Location[/Sub] with an area of the tz database (the backward-compatible
-- US, Canada, Brazil, Chile and Mexico included; not posix/ or right/, the copies of the database
-- that PostgreSQL also finds in a system zoneinfo directory), known to this server. Both engines
-- look names up ignoring case, so only the area's spelling and the initials are checked. Every
-- name of Intl.supportedValuesOf('timeZone') has this form (test/schedule-definition-checks.test.ts).
create function leasehold.timezone_problem(p_timezone text) returns text
language plpgsql stable as $$
begin
  if p_timezone is null or char_length(p_timezone) > 64
     or p_timezone !~ '^(UTC|(Africa|America|Antarctica|Arctic|Asia|Atlantic|Australia|Europe|Indian|Pacific|Etc|US|Canada|Brazil|Chile|Mexico)/[A-Za-z][A-Za-z0-9_+-]*(/[A-Za-z][A-Za-z0-9_+-]*)?)$' then
    return format('must be an IANA name such as Europe/Berlin, America/Argentina/Buenos_Aires, Etc/GMT+5 or UTC (got %s)',
                  coalesce(quote_literal(left(p_timezone, 64)), 'null'));
  end if;
  begin
    perform now() at time zone p_timezone;
  exception when others then
    return format('unknown timezone %L', p_timezone);
  end;
  return null;
end $$;

-- define_schedule: as in schema 11, and refuses a name with whitespace at either end (LH001), a
-- timezone timezone_problem() describes and a payload nested more than 32 levels deep (LH005).
create or replace function leasehold.define_schedule(
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
  v_problem text;
begin
  perform leasehold.check_name(p_name);
  -- the name is the job's in every list and log: ' nightly' must not pass for 'nightly'
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
  -- within the size: the walk stops 32 levels down, whatever the nesting below
  perform leasehold.check_schedule_field(not jsonb_path_exists(v_payload, 'strict $.**{32} ? (@.type() == "array" || @.type() == "object")'),
    'payload', 'must nest arrays and objects at most 32 levels deep');

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

insert into leasehold.access (object, level) values ('timezone_problem', 'owner');
