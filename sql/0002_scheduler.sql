-- leasehold migration 0002: scheduled jobs, batched slot claims and run history.
--
-- A job's lease row (leasehold.leases, name = job name) carries last_slot: the newest
-- scheduled occurrence anyone claimed. claim_slots() claims many jobs' slots in one call with
-- a fixed number of set-based statements, whatever the number of jobs, and records each skip
-- once per (job, slot) however many workers notice it.

create table leasehold.jobs (
  name             text primary key,
  schedule         text not null,
  timezone         text,
  interval_ms      bigint,
  ttl_ms           bigint not null,
  overlap          text not null,
  catch_up         text not null,
  registered_by    text not null,
  registered_at    timestamptz not null default now()
);
comment on table leasehold.jobs is 'The latest definition of each scheduled job, as registered by a worker.';

create table leasehold.runs (
  id          bigserial primary key,
  job         text not null,
  slot        timestamptz not null,
  fence       bigint not null,
  holder      text not null,
  started_at  timestamptz not null default now(),
  finished_at timestamptz,
  outcome     text not null default 'running'
              check (outcome in ('running', 'succeeded', 'failed', 'lost', 'aborted')),
  error       text,
  attempts    integer not null default 1
);
create unique index runs_job_fence on leasehold.runs (job, fence);
create index runs_job_started on leasehold.runs (job, started_at desc);
create index runs_running on leasehold.runs (job) where outcome = 'running';

create table leasehold.skips (
  job          text not null,
  slot         timestamptz not null,
  holder       text,
  holder_fence bigint,
  holder_slot  timestamptz,
  held_for     interval,
  recorded_by  text not null,
  recorded_at  timestamptz not null default now(),
  primary key (job, slot)
);

create table leasehold.missed (
  job         text not null,
  slot        timestamptz not null,
  reason      text not null,
  recorded_by text not null,
  recorded_at timestamptz not null default now(),
  primary key (job, slot)
);

-- Windows (from_time, to_time] of database time that a forward step of the database clock
-- jumped over, as the workers that noticed it measured them. Slots inside never existed in
-- real time: record_missed() does not record them, whichever worker (started before or after
-- the step) asks. Kept as long as the history (prune_history) and at most 1,000 windows.
create table leasehold.clock_steps (
  id          bigint generated always as identity primary key,
  from_time   timestamptz not null,
  to_time     timestamptz not null check (to_time > from_time),
  recorded_by text not null,
  recorded_at timestamptz not null default now()
);

-- Slots waiting for the running one to finish (overlap policies buffer-one and buffer-all).
create table leasehold.buffered (
  job         text not null,
  slot        timestamptz not null,
  buffered_at timestamptz not null default now(),
  primary key (job, slot)
);

-- register_jobs: upserts job definitions and makes sure each has a lease row. Returns each
-- job's last claimed slot, so a starting worker can apply its catch-up policy. When a job's
-- schedule or timezone changes, its last slot moves up to now(): the slots between the old
-- schedule's last run and now never existed, so they are neither caught up nor recorded missed.
create function leasehold.register_jobs(
  p_names text[], p_schedules text[], p_timezones text[], p_interval_ms bigint[], p_ttl_ms bigint[],
  p_overlaps text[], p_catch_ups text[], p_holder text
) returns table (name text, last_slot timestamptz, database_time timestamptz)
language plpgsql volatile as $$
#variable_conflict use_column
begin
  perform leasehold.check_name(n) from unnest(p_names) as n;
  insert into leasehold.leases (name) select n from unnest(p_names) as n on conflict do nothing;
  update leasehold.leases l
     set last_slot = greatest(l.last_slot, now())
    from unnest(p_names, p_schedules, p_timezones) as i(name, schedule, timezone)
    join leasehold.jobs j on j.name = i.name
   where l.name = i.name and l.last_slot is not null
     and (j.schedule, j.timezone) is distinct from (i.schedule, i.timezone);
  insert into leasehold.jobs as j (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
  select * , p_holder from unnest(p_names, p_schedules, p_timezones, p_interval_ms, p_ttl_ms, p_overlaps, p_catch_ups)
  on conflict (name) do update
     set schedule = excluded.schedule, timezone = excluded.timezone, interval_ms = excluded.interval_ms,
         ttl_ms = excluded.ttl_ms, overlap = excluded.overlap, catch_up = excluded.catch_up,
         registered_by = excluded.registered_by, registered_at = now()
   where (j.schedule, j.timezone, j.interval_ms, j.ttl_ms, j.overlap, j.catch_up)
         is distinct from (excluded.schedule, excluded.timezone, excluded.interval_ms, excluded.ttl_ms, excluded.overlap, excluded.catch_up);
  return query select l.name, l.last_slot, now() from leasehold.leases l where l.name = any (p_names);
end $$;

-- claim_slots: claims the given (job, slot) pairs for p_holder in one call.
--
-- p_modes: 'exclusive' (skip / buffer policies: only a free lease), 'replace' (take it from a
-- running holder: its token changes, so its renewals and fenced writes fail) or 'allow' (no
-- exclusivity: only the slot guard and a new fence). p_buffer_caps: how many skipped slots
-- to keep for later (0 skip, 1 buffer-one, n buffer-all). A job with buffered slots claims its
-- oldest buffered slot first and buffers the new one, so buffered slots run in order.
--
-- Every claim needs slot > last_slot and slot <= now(): each occurrence is claimed at most
-- once across all workers, and a worker whose clock runs ahead cannot claim early.
--
-- Returns one row per input job: claimed or the reason not, the holder that blocked it, and
-- whether this call recorded the skip (exactly one caller does per slot).
create function leasehold.claim_slots(
  p_jobs text[], p_slots timestamptz[], p_ttls interval[], p_modes text[], p_buffer_caps integer[],
  p_holder text, p_holder_key bigint default null
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
as $$
#variable_conflict use_column
begin
  perform leasehold.check_holder(p_holder);
  -- the same bounds as acquire: a caller must not hold a job for a century
  perform leasehold.check_ttl(t) from unnest(p_ttls) as t;
  perform leasehold.pin_synchronous_commit();

  -- 1. Claim. Rows are locked in random order with SKIP LOCKED, so workers claiming the same
  --    tick share the jobs instead of queueing behind one another.
  return query
  with input as materialized (
    select i.job, i.slot, i.ttl, i.mode, i.cap,
           (select min(b.slot) from leasehold.buffered b
             where b.job = i.job
               and b.slot > coalesce((select l.last_slot from leasehold.leases l where l.name = i.job), '-infinity')
           ) as buffered_slot
      from unnest(p_jobs, p_slots, p_ttls, p_modes, p_buffer_caps) as i(job, slot, ttl, mode, cap)
  ),
  wanted as (
    select i.*, least(i.slot, coalesce(i.buffered_slot, i.slot)) as claim_slot from input i
  ),
  candidates as (
    select l.name, l.last_slot as previous_slot, l.token as previous_token, w.claim_slot, w.ttl, w.mode
      from leasehold.leases l
      join wanted w on w.job = l.name
     where w.claim_slot <= now()
       and (l.last_slot is null or w.claim_slot > l.last_slot)
       -- under overlap 'skip' a recorded skip is final: a late tick, a retry or a catch-up
       -- claim must not run the slot after its holder releases
       and not (w.mode = 'exclusive' and w.cap = 0
                and exists (select 1 from leasehold.skips k where k.job = w.job and k.slot = w.claim_slot))
       and (w.mode in ('replace', 'allow') or leasehold.is_free(l))
     order by random()
       for update of l skip locked
  ),
  claimed as (
    update leasehold.leases l
       set fence = leasehold.next_fence(l.fence),
           last_slot = c.claim_slot,
           token = case when c.mode = 'allow' then l.token else gen_random_uuid() end,
           holder = case when c.mode = 'allow' then l.holder else p_holder end,
           holder_key = case when c.mode = 'allow' then l.holder_key else p_holder_key end,
           acquired_at = case when c.mode = 'allow' then l.acquired_at else now() end,
           expires_at = case when c.mode = 'allow' then l.expires_at else now() + c.ttl end,
           released_at = case when c.mode = 'allow' then l.released_at else null end,
           ttl = case when c.mode = 'allow' then l.ttl else c.ttl end,
           epoch = case when c.mode = 'allow' then l.epoch else leasehold.epoch() end,
           holder_incarnation = case when c.mode = 'allow' then l.holder_incarnation else leasehold.liveness_incarnation(p_holder_key) end
      from candidates c
     where l.name = c.name
    returning l.name, c.claim_slot, c.mode, c.previous_slot, c.previous_token, l.token, l.fence, l.expires_at
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
    select w.job, w.slot from wanted w join claimed c on c.name = w.job
     where w.claim_slot < w.slot
       and (select count(*) from leasehold.buffered b where b.job = w.job and b.slot > w.claim_slot) < w.cap
    on conflict do nothing
  )
  select c.name, c.claim_slot, true, 'claimed'::text, case when c.mode = 'allow' then null else c.token end,
         c.fence, case when c.mode = 'allow' then null else c.expires_at end, c.previous_slot,
         p_holder, null::bigint, null::timestamptz, null::timestamptz, false, false, now(),
         c.mode <> 'allow' and c.previous_token is not null
    from claimed c;

  -- 2. Everything not claimed above: say why, record a real skip once per slot, buffer it
  --    if the policy says so. Lease rows claimed by step 1 are the ones this transaction
  --    wrote (xmin = our transaction id): an O(1) test per row. (Call claim_slots in a
  --    transaction of its own, as the client does; inside a savepoint the test misses and the
  --    claimed jobs are reported a second time, as slot-taken.)
  return query
  with input as (
    select i.job, i.slot, i.mode, i.cap
      from unnest(p_jobs, p_slots, p_modes, p_buffer_caps) as i(job, slot, mode, cap)
  ),
  pending as (
    select i.*, l.holder as l_holder, l.fence as l_fence, l.last_slot as l_last_slot,
           l.acquired_at as l_acquired_at, l.expires_at as l_expires_at,
           case
             when l.name is null then 'unknown-job'
             when i.slot > now() then 'slot-not-due'
             when l.last_slot is not null and i.slot <= l.last_slot then 'slot-taken'
             when i.mode = 'exclusive' and i.cap = 0
                  and exists (select 1 from leasehold.skips k where k.job = i.job and k.slot = i.slot) then 'slot-skipped'
             -- replace and allow only fail on a row lock: a transient state, not a skip
             when i.mode in ('replace', 'allow') then 'holder-committing'
             when not leasehold.is_free(l) then 'held'
             else 'holder-committing'
           end as why
      from input i
      left join leasehold.leases l on l.name = i.job
     where l.xmin is distinct from xid(pg_current_xact_id_if_assigned())
  ),
  skipped as (
    insert into leasehold.skips (job, slot, holder, holder_fence, holder_slot, held_for, recorded_by)
    select p.job, p.slot, p.l_holder, p.l_fence, p.l_last_slot, now() - p.l_acquired_at, p_holder
      from pending p where p.why = 'held'
    on conflict do nothing
    returning skips.job, skips.slot
  ),
  buffering as (
    insert into leasehold.buffered (job, slot)
    select p.job, p.slot from pending p
     where p.why = 'held' and p.cap > 0
       and (select count(*) from leasehold.buffered b where b.job = p.job) < p.cap
    on conflict do nothing
    returning buffered.job, buffered.slot
  )
  select p.job, p.slot, false, p.why, null::uuid, null::bigint, null::timestamptz, null::timestamptz,
         p.l_holder, p.l_fence, p.l_last_slot, p.l_acquired_at,
         exists (select 1 from skipped s where s.job = p.job and s.slot = p.slot),
         exists (select 1 from buffering b where b.job = p.job and b.slot = p.slot),
         now(), false
    from pending p;
end $$;

-- finish_run: records a run's outcome and, for a leased run, releases the lease (only for the
-- matching token). Returns the oldest buffered slot of the job, which the caller should claim
-- at once (buffer policies start the next slot as soon as the holder releases).
create function leasehold.finish_run(
  p_job text, p_fence bigint, p_token uuid, p_outcome text, p_error text default null, p_attempts integer default 1
) returns table (recorded boolean, released boolean, next_buffered_slot timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v_recorded boolean;
  v_released boolean := false;
begin
  perform leasehold.pin_synchronous_commit();
  if p_outcome not in ('succeeded', 'failed', 'lost', 'aborted') then
    raise exception 'outcome must be succeeded, failed, lost or aborted (got %)', p_outcome using errcode = '22023';
  end if;
  update leasehold.runs r
     set outcome = p_outcome, finished_at = now(), error = left(p_error, 4000), attempts = p_attempts
   where r.job = p_job and r.fence = p_fence and r.outcome = 'running';
  v_recorded := found;
  if p_token is not null then
    v_released := leasehold.release(p_job, p_token);
  end if;
  -- buffered slots at or before the last claimed one can never be claimed: drop them
  delete from leasehold.buffered b
   using leasehold.leases l
   where b.job = p_job and l.name = p_job and b.slot <= l.last_slot;
  return query select v_recorded, v_released,
    (select min(b.slot) from leasehold.buffered b where b.job = p_job);
end $$;

-- finish_runs: finish_run for many runs in one statement (a worker batches the runs that end
-- at about the same moment). Returns, per job, whether the run was recorded and released and
-- the job's oldest buffered slot.
create function leasehold.finish_runs(
  p_jobs text[], p_fences bigint[], p_tokens uuid[], p_outcomes text[], p_errors text[], p_attempts integer[]
) returns table (job text, fence bigint, recorded boolean, released boolean, next_buffered_slot timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
begin
  perform leasehold.pin_synchronous_commit();
  if exists (select 1 from unnest(p_outcomes) o where o not in ('succeeded', 'failed', 'lost', 'aborted')) then
    raise exception 'outcome must be succeeded, failed, lost or aborted' using errcode = '22023';
  end if;
  return query
  with input as materialized (
    select * from unnest(p_jobs, p_fences, p_tokens, p_outcomes, p_errors, p_attempts)
      as i(job, fence, token, outcome, error, attempts)
  ),
  recorded as (
    update leasehold.runs r
       set outcome = i.outcome, finished_at = now(), error = left(i.error, 4000), attempts = i.attempts
      from input i
     where r.job = i.job and r.fence = i.fence and r.outcome = 'running'
    returning r.job, r.fence
  ),
  released as (
    update leasehold.leases l
       set token = null, expires_at = null, holder_key = null, released_at = now()
      from input i
     where i.token is not null and l.name = i.job and l.token = i.token
    returning l.name, l.last_slot
  ),
  stale_buffers as (
    delete from leasehold.buffered b using leasehold.leases l, input i
     where b.job = i.job and l.name = i.job and b.slot <= l.last_slot
    returning b.job, b.slot
  )
  select i.job, i.fence,
         exists (select 1 from recorded r where r.job = i.job and r.fence = i.fence),
         exists (select 1 from released x where x.name = i.job),
         (select min(b.slot) from leasehold.buffered b
           where b.job = i.job
             and b.slot > coalesce((select l.last_slot from leasehold.leases l where l.name = i.job), '-infinity')
             and not exists (select 1 from stale_buffers s where s.job = b.job and s.slot = b.slot))
    from input i;
end $$;

-- enqueue_slots: queues slots to run in order, one at a time, as soon as the lease is free
-- (catch-up policy { all: n }). Slots at or before the last claimed one are ignored.
create function leasehold.enqueue_slots(p_job text, p_slots timestamptz[]) returns integer
language sql volatile as $$
  with inserted as (
    insert into leasehold.buffered (job, slot)
    select p_job, s from unnest(p_slots) as s
     where s > coalesce((select l.last_slot from leasehold.leases l where l.name = p_job), '-infinity')
    on conflict do nothing
    returning 1
  )
  select count(*)::integer from inserted;
$$;

-- record_clock_step: a forward step of the database clock jumped from p_from to p_to (database
-- times, as the caller measured them). Overlapping windows merge into one, so a fleet of
-- workers noticing the same step stores one window. Returns true if a new window was stored.
create function leasehold.record_clock_step(p_from timestamptz, p_to timestamptz, p_holder text)
returns boolean
language plpgsql volatile as $$
begin
  if p_from is null or p_to is null or not isfinite(p_from) or not isfinite(p_to) or p_to <= p_from then
    raise exception 'leasehold: a clock step window needs finite times with from < to (got % .. %)', p_from, p_to
      using errcode = '22023';
  end if;
  perform leasehold.check_holder(p_holder);
  -- one writer at a time, so that concurrent reports of the same step merge instead of racing
  perform pg_advisory_xact_lock(7308604897068083571);
  update leasehold.clock_steps
     set from_time = least(from_time, p_from), to_time = greatest(to_time, p_to)
   where from_time <= p_to and p_from <= to_time;
  if found then
    return false;
  end if;
  insert into leasehold.clock_steps (from_time, to_time, recorded_by) values (p_from, p_to, p_holder);
  -- bounded: the oldest windows go (their slots are long recorded or pruned)
  delete from leasehold.clock_steps
   where id <= (select id from leasehold.clock_steps order by id desc offset 1000 limit 1);
  return true;
end $$;

-- record_missed: slots no worker ran (downtime beyond the catch-up policy), once each.
-- Slots that were skipped (a skip row exists) or ran are not missed, nor are slots inside a
-- window a forward database clock step jumped over (they never existed).
create function leasehold.record_missed(p_job text, p_slots timestamptz[], p_reason text, p_holder text)
returns integer
language sql volatile as $$
  with inserted as (
    insert into leasehold.missed (job, slot, reason, recorded_by)
    select p_job, s, p_reason, p_holder from unnest(p_slots) as s
     where not exists (select 1 from leasehold.skips k where k.job = p_job and k.slot = s)
       and not exists (select 1 from leasehold.runs r where r.job = p_job and r.slot = s)
       and not exists (select 1 from leasehold.clock_steps w where s > w.from_time and s <= w.to_time)
    on conflict do nothing
    returning 1
  )
  select count(*)::integer from inserted;
$$;

-- prune_history: deletes finished runs, skips and missed slots older than p_keep. Returns the
-- number of rows deleted. Safe to call from every worker: only one prunes at a time.
create function leasehold.prune_history(p_keep interval) returns bigint
language plpgsql volatile as $$
declare
  n bigint := 0;
  c bigint;
begin
  if not pg_try_advisory_xact_lock(7308604897068083570) then
    return 0;
  end if;
  delete from leasehold.runs where outcome <> 'running' and finished_at < now() - p_keep;
  get diagnostics c = row_count; n := n + c;
  delete from leasehold.skips where recorded_at < now() - p_keep;
  get diagnostics c = row_count; n := n + c;
  delete from leasehold.missed where recorded_at < now() - p_keep;
  get diagnostics c = row_count; n := n + c;
  delete from leasehold.clock_steps where recorded_at < now() - p_keep;
  get diagnostics c = row_count; n := n + c;
  return n;
end $$;

-- run_history: runs, skips and missed slots of every job in one timeline. A skipped slot that
-- was buffered and ran later has outcome 'buffered' (and a run row of its own).
--   select * from leasehold.run_history where job = 'nightly-report' limit 20;
create view leasehold.run_history as
select job, slot, 'run' as kind, outcome, fence, holder, started_at as at, finished_at,
       extract(epoch from finished_at - started_at)::double precision as duration_seconds, error as detail
  from leasehold.runs
union all
select k.job, k.slot, 'skip', case when ran.fence is null then 'skipped' else 'buffered' end,
       k.holder_fence, k.holder, k.recorded_at, null, null,
       -- a lease taken without a slot (leasehold exec, run(), psql) has none to name
       format('held by %s (fence %s%s) for %ss%s', k.holder, k.holder_fence,
              coalesce(', slot ' || to_char(k.holder_slot at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), ''),
              round(extract(epoch from k.held_for)::numeric, 1),
              case when ran.fence is null then '' else format('; buffered, ran later (fence %s)', ran.fence) end)
  from leasehold.skips k
  left join lateral (select r.fence from leasehold.runs r where r.job = k.job and r.slot = k.slot limit 1) ran on true
union all
select job, slot, 'missed', 'missed', null, null, recorded_at, null, null, reason
  from leasehold.missed;
