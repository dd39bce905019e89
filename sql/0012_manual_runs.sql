-- leasehold migration 0012: run now and backfill.
--
-- Additive. An operator asks for an extra occurrence of a job (run_now) or for the occurrences
-- of a past range (request_backfill); each ask is one row of leasehold.run_requests, and the
-- workers that have a handler for the job take them with claim_requests(), under the lease row
-- lock, by the same rules as a scheduled slot (is_free, fence_after, the takeover bookkeeping of
-- claim()). A request never moves the lease's last_slot: the scheduled slot due at the same
-- moment is still claimed by claim(), which stays as it is.
--
-- What a request does while a run holds the lease follows the job's overlap policy:
--   run now   skip: recorded skipped, naming the holder; buffer-one: the oldest pending run-now
--             waits for the lease, later ones are skipped; buffer-all: every one waits, in
--             order; replace: takes the lease over; allow: runs alongside, without a lease.
--   backfill  always waits for a free lease, one slot at a time in slot order (a backfill is
--             catch-up work: it neither skips nor replaces); under allow (no lease) a job's
--             next backfill slot starts when no backfill run of the job is still running on a
--             live worker.

alter table leasehold.runs
  add column trigger text not null default 'schedule' check (trigger in ('schedule', 'manual', 'backfill')),
  add column requested_by text,
  add column request_id bigint;

create table leasehold.run_requests (
  id            bigint generated always as identity primary key,
  job           text not null,
  kind          text not null check (kind in ('manual', 'backfill')),
  -- backfill: the scheduled slot to run; run now: the moment it was asked for (database time)
  slot          timestamptz not null,
  requested_by  text not null,
  requested_at  timestamptz not null default now(),
  -- pending until a worker decides; claimed: a run started (its outcome is in leasehold.runs,
  -- under (job, fence)); skipped: held under overlap skip (or buffer-one's second)
  state         text not null default 'pending' check (state in ('pending', 'claimed', 'skipped')),
  decided_at    timestamptz,
  decided_by    text,
  holder_key    bigint,
  fence         bigint,
  skip_holder   text,
  skip_fence    bigint
);
comment on table leasehold.run_requests is
  'Run-now and backfill requests: who asked, when, and what became of each (pending, claimed with its fence, skipped naming the holder).';
-- each backfill slot is requested at most once, however many operators ask at the same time
create unique index run_requests_backfill_slot on leasehold.run_requests (job, slot) where kind = 'backfill';
-- the workers' check for work: an index over pending requests only, empty almost always
create index run_requests_pending on leasehold.run_requests (job, id) where state = 'pending';
create index run_requests_job_at on leasehold.run_requests (job, requested_at desc);

-- run_now: asks for one extra occurrence of p_job now; returns the request id. p_by names who
-- asked (checked like a holder name). The job must be defined (leasehold.jobs) and not removed;
-- a paused job may be run now (an operator's explicit act; its schedule stays paused).
create function leasehold.run_now(p_job text, p_by text) returns bigint
language plpgsql volatile as $$
declare
  v_id bigint;
begin
  perform leasehold.check_holder(p_by);
  if not exists (select 1 from leasehold.jobs j where j.name = p_job and j.removed_at is null) then
    raise exception 'no job named "%"', left(p_job, 200)
      using errcode = 'P0002', hint = 'leasehold status lists the jobs; a job exists once a worker registered it.';
  end if;
  insert into leasehold.run_requests (job, kind, slot, requested_by)
  values (p_job, 'manual', now(), p_by)
  returning id into v_id;
  perform leasehold.record_action('run-now', p_job, p_by, jsonb_build_object('request', v_id));
  return v_id;
end $$;

-- request_backfill: one backfill request per slot of p_slots (1 to 1,000 slots, none in the
-- future). A slot already requested by an earlier or concurrent backfill is not requested
-- again (unique index, ON CONFLICT DO NOTHING). Returns the slots this call requested.
create function leasehold.request_backfill(p_job text, p_slots timestamptz[], p_by text)
returns table (request_id bigint, slot timestamptz)
language plpgsql volatile as $$
#variable_conflict use_column
declare
  v_count integer := coalesce(cardinality(p_slots), 0);
  v_created integer;
begin
  perform leasehold.check_holder(p_by);
  if not exists (select 1 from leasehold.jobs j where j.name = p_job and j.removed_at is null) then
    raise exception 'no job named "%"', left(p_job, 200)
      using errcode = 'P0002', hint = 'leasehold status lists the jobs; a job exists once a worker registered it.';
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
  get diagnostics v_created = row_count;
  perform leasehold.record_action('backfill', p_job, p_by, jsonb_build_object(
    'from', (select min(s) from unnest(p_slots) s), 'to', (select max(s) from unnest(p_slots) s),
    'slots', v_count, 'requested', v_created));
end $$;

-- claim_requests: a worker takes pending requests of the jobs it has handlers for (p_jobs),
-- at most p_limit, at most one per job per call (a job's requests go one at a time: run-now
-- requests first, by id; then backfill slots in slot order). Each is decided under the job's
-- lease row lock (FOR UPDATE SKIP LOCKED: a row another worker is deciding is left for the
-- next call). Rows come back for what this call decided: claimed (run it: token, fence,
-- expires_at as claim() gives them) or skipped (holder and holder_fence name the holder).
-- A call with nothing pending reads one small partial index and writes nothing.
create function leasehold.claim_requests(
  p_jobs text[], p_holder text, p_holder_key bigint default null, p_limit integer default 100
) returns table (
  request_id     bigint,
  job            text,
  kind           text,
  slot           timestamptz,
  requested_by   text,
  claimed        boolean,
  token          uuid,
  fence          bigint,
  expires_at     timestamptz,
  holder         text,
  holder_fence   bigint,
  took_over      boolean,
  database_time  timestamptz
)
language plpgsql volatile
set lock_timeout = '2s'
as $$
#variable_conflict use_column
declare
  v record;
  l leasehold.leases;
  v_mode text;
  v_epoch integer;
  v_incarnation text;
  v_fence bigint;
  v_token uuid;
  v_expires timestamptz;
begin
  perform leasehold.check_holder(p_holder);
  if p_limit is null or p_limit < 1 or p_limit > 1000 then
    raise exception 'claim_requests: p_limit must be 1 to 1000 (got %)', p_limit using errcode = '22023';
  end if;
  -- the common case: nothing pending, nothing locked, nothing written
  if not exists (select 1 from leasehold.run_requests q where q.state = 'pending' and q.job = any (p_jobs)) then
    return;
  end if;
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
    -- a backfill under allow has no lease to wait for: one backfill run at a time, unless the
    -- worker of the running one is gone (a peer that claimed this very request meanwhile is
    -- caught by the pending check under the lock below)
    continue when v.kind = 'backfill' and v_mode = 'allow' and exists (
      select 1 from leasehold.run_requests b join leasehold.runs r on r.job = b.job and r.fence = b.fence
       where b.job = v.job and b.kind = 'backfill' and b.state = 'claimed' and r.outcome = 'running'
         and not leasehold.holder_gone(b.holder_key));
    if (v.kind = 'backfill' and v_mode <> 'allow') or v.overlap in ('buffer-one', 'buffer-all') then
      -- It waits for a free lease: the row is locked only when free (a WHERE that is false
      -- locks no row), so a request that waits costs its job no lock and no write per call.
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
            select s.id, s.job, s.kind, s.slot, s.requested_by, false, null::uuid, null::bigint,
                   null::timestamptz, l.holder, l.fence, false, now()
              from later s;
          end if;
        end if;
        continue;
      end if;
      v_mode := case when v_mode = 'allow' then 'allow' else 'exclusive' end;
    else
      -- decided now, whoever holds the lease: a run now under skip, replace or allow, a
      -- backfill under allow
      select * into l from leasehold.leases x where x.name = v.job for update skip locked;
      continue when not found;
    end if;
    -- under the lease lock, with a fresh snapshot: still pending? (a peer may have decided it
    -- and committed before we got the lock)
    perform 1 from leasehold.run_requests q where q.id = v.id and q.state = 'pending';
    continue when not found;
    if v.kind = 'manual' and v.overlap = 'skip' and not leasehold.is_free(l) then
      update leasehold.run_requests q
         set state = 'skipped', decided_at = now(), decided_by = p_holder, skip_holder = l.holder, skip_fence = l.fence
       where q.id = v.id;
      return query select v.id, v.job, v.kind, v.slot, v.requested_by, false, null::uuid, null::bigint,
                          null::timestamptz, l.holder, l.fence, false, now();
      continue;
    end if;

    -- claim: the same grant as claim() gives a slot, except that last_slot stays
    v_epoch := coalesce(v_epoch, leasehold.epoch());
    if v_incarnation is null and p_holder_key is not null then
      v_incarnation := leasehold.liveness_incarnation(p_holder_key);
    end if;
    v_fence := leasehold.fence_after(l.fence, v_epoch);
    update leasehold.leases x
       set fence = v_fence,
           token = case when v_mode = 'allow' then x.token else gen_random_uuid() end,
           holder = case when v_mode = 'allow' then x.holder else p_holder end,
           holder_key = case when v_mode = 'allow' then x.holder_key else p_holder_key end,
           acquired_at = case when v_mode = 'allow' then x.acquired_at else now() end,
           expires_at = case when v_mode = 'allow' then x.expires_at else now() + v.ttl_ms * interval '1 millisecond' end,
           released_at = case when v_mode = 'allow' then x.released_at else null end,
           ttl = case when v_mode = 'allow' then x.ttl else v.ttl_ms * interval '1 millisecond' end,
           epoch = case when v_mode = 'allow' then x.epoch else v_epoch end,
           holder_incarnation = case when v_mode = 'allow' then x.holder_incarnation else v_incarnation end
     where x.name = v.job
    returning x.token, x.expires_at into v_token, v_expires;
    insert into leasehold.runs (job, slot, fence, holder, trigger, requested_by, request_id)
    values (v.job, v.slot, v_fence, p_holder, v.kind, v.requested_by, v.id);
    -- a run still 'running' under an older fence lost its lease to this one (as in claim())
    if v_mode <> 'allow' then
      update leasehold.runs r
         set outcome = 'lost', finished_at = now(), error = 'lease taken over by ' || p_holder
       where r.job = v.job and r.outcome = 'running' and r.fence < v_fence;
    end if;
    update leasehold.run_requests q
       set state = 'claimed', decided_at = now(), decided_by = p_holder, holder_key = p_holder_key, fence = v_fence
     where q.id = v.id;
    return query select v.id, v.job, v.kind, v.slot, v.requested_by, true,
                        case when v_mode = 'allow' then null else v_token end, v_fence,
                        case when v_mode = 'allow' then null else v_expires end,
                        p_holder, null::bigint, v_mode <> 'allow' and l.token is not null, now();
  end loop;
end $$;

-- run_request_status: each request with what became of it. state 'done' once its run ended
-- (outcome, error and times from leasehold.runs).
create view leasehold.run_request_status as
select q.id, q.job, q.kind, q.slot, q.requested_by, q.requested_at,
       case when q.state = 'claimed' and r.outcome is distinct from 'running' then 'done' else q.state end as state,
       q.decided_at, q.decided_by, q.fence, r.outcome, r.started_at, r.finished_at, r.error,
       q.skip_holder, q.skip_fence
  from leasehold.run_requests q
  left join leasehold.runs r on r.job = q.job and r.fence = q.fence;

-- run_history gains what triggered each run and who asked; a skipped run-now is a skip entry.
-- (A skip's "ran later" lookup matches scheduled runs only: a manual run's slot is a moment.)
create or replace view leasehold.run_history as
select job, slot, 'run' as kind, outcome, fence, holder, started_at as at, finished_at,
       extract(epoch from finished_at - started_at)::double precision as duration_seconds, error as detail,
       trigger, requested_by
  from leasehold.runs
union all
select k.job, k.slot, 'skip', case when ran.fence is null then 'skipped' else 'buffered' end,
       k.holder_fence, k.holder, k.recorded_at, null, null,
       -- a lease taken without a slot (leasehold exec, run(), psql) has none to name
       format('held by %s (fence %s%s) for %ss%s', k.holder, k.holder_fence,
              coalesce(', slot ' || to_char(k.holder_slot at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), ''),
              round(extract(epoch from k.held_for)::numeric, 1),
              case when ran.fence is null then '' else format('; buffered, ran later (fence %s)', ran.fence) end),
       'schedule', null
  from leasehold.skips k
  left join lateral (select r.fence from leasehold.runs r
                      where r.job = k.job and r.slot = k.slot and r.trigger = 'schedule' limit 1) ran on true
union all
select job, slot, 'missed', 'missed', null, null, recorded_at, null, null, reason, 'schedule', null
  from leasehold.missed
union all
select q.job, q.slot, 'skip', 'skipped', q.skip_fence, q.skip_holder, q.decided_at, null, null,
       format('run now held by %s (fence %s)', q.skip_holder, q.skip_fence), q.kind, q.requested_by
  from leasehold.run_requests q
 where q.state = 'skipped';

insert into leasehold.access (object, level) values
  ('run_requests', 'reader'), ('run_request_status', 'reader'),
  ('run_now', 'operator'), ('request_backfill', 'operator'),
  ('claim_requests', 'client');
