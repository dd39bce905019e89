-- leasehold migration 0004: history for runs that are not scheduled by a leasehold worker
-- (`leasehold exec` under system cron, a Kubernetes CronJob, a CI schedule; or any client that
-- takes a plain lease and wants it in the history).

-- register_external_job: makes a job visible in job_status without a schedule leasehold runs.
create function leasehold.register_external_job(p_name text, p_interval_ms bigint, p_ttl_ms bigint, p_holder text)
returns void
language sql volatile as $$
  insert into leasehold.jobs as j (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
  values (p_name, 'external', null, p_interval_ms, p_ttl_ms, 'skip', 'none', p_holder)
  on conflict (name) do update
     set interval_ms = coalesce(excluded.interval_ms, j.interval_ms), ttl_ms = excluded.ttl_ms
   where j.schedule = 'external';
$$;

-- start_run: records a run under a lease the caller holds, checked by assert_lease (name, token
-- and fence match an unexpired lease confirmed in the current epoch; LH003 otherwise). The slot
-- is the database's now() unless given.
create function leasehold.start_run(p_name text, p_token uuid, p_fence bigint, p_slot timestamptz default null)
returns timestamptz
language plpgsql volatile as $$
declare
  v_slot timestamptz := coalesce(p_slot, now());
  v_holder text;
begin
  perform leasehold.assert_lease(p_name, p_token, p_fence);
  select l.holder into v_holder from leasehold.leases l where l.name = p_name;
  insert into leasehold.runs (job, slot, fence, holder) values (p_name, v_slot, p_fence, v_holder)
  on conflict (job, fence) do nothing;
  return v_slot;
end $$;

-- record_skip: records that a caller declined to run `p_name` because it was held, naming the
-- holder as leasehold.acquire reported it. One row per (job, slot); returns false if the slot
-- already had one.
create function leasehold.record_skip(p_name text, p_recorded_by text, p_slot timestamptz default null)
returns boolean
language sql volatile as $$
  with inserted as (
    insert into leasehold.skips (job, slot, holder, holder_fence, holder_slot, held_for, recorded_by)
    select l.name, coalesce(p_slot, now()), l.holder, l.fence, l.last_slot, now() - l.acquired_at, p_recorded_by
      from leasehold.leases l where l.name = p_name
    on conflict do nothing
    returning 1
  )
  select exists (select 1 from inserted);
$$;

-- finish_held_run: finish_run for a run started with start_run, checking the lease first. A run
-- whose lease was force-released, expired or taken over before it finished is recorded 'lost'
-- (whatever the caller saw: a command can finish between two heartbeats without noticing),
-- so the history never shows a success that was not exclusive. With p_release (the default) it
-- also releases the lease, as finish_run does. Returns the recorded outcome.
create function leasehold.finish_held_run(
  p_name text, p_fence bigint, p_token uuid, p_outcome text, p_error text default null, p_release boolean default true
)
returns table (outcome text, recorded boolean, released boolean)
language plpgsql volatile
set lock_timeout = '2s'
as $$
declare
  v_held boolean;
  v_outcome text := p_outcome;
  v_error text := p_error;
  f record;
begin
  -- the row lock keeps the lease as it is seen here until finish_run releases it
  select l.token = p_token and l.fence = p_fence and l.expires_at > now() into v_held
    from leasehold.leases l where l.name = p_name for update;
  if not coalesce(v_held, false) and p_outcome in ('succeeded', 'failed') then
    v_outcome := 'lost';
    v_error := concat_ws('; ', 'the lease was no longer held when the run finished (released by force, expired or taken over)', p_error);
  end if;
  select * into f from leasehold.finish_run(p_name, p_fence, case when p_release then p_token end, v_outcome, v_error);
  return query select v_outcome, f.recorded, f.released;
end $$;
