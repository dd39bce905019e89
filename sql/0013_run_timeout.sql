-- leasehold migration 0013: per-run timeouts.
--
-- Additive. A job may have a timeout (jobs.timeout_ms): the most a run of it may last, counted
-- from the moment its lease was granted (leases.acquired_at, the claim's now()), retries
-- included. Once it has passed, the run's lease is no longer held for the purpose of fenced
-- writes: holds_lease() is false, so assert_lease() and start_run() refuse with LH003, whatever
-- the holding process does or fails to do (a paused or stuck process cannot commit after its
-- deadline). The lease row itself stays the holder's until the run is finished (or its TTL
-- runs out): no other run of the job starts while the timed-out one might still be writing
-- elsewhere. A run that ended this way is recorded with the new outcome 'timed-out'.
--
-- Code-defined jobs get their timeout into the row with set_job_timeouts(), which workers
-- call right after register_jobs() (whose signature SQL callers depend on, so it is left as
-- it is). A null timeout_ms means no timeout.

alter table leasehold.jobs add column if not exists timeout_ms bigint;

-- set_job_timeouts: sets (or, with null, clears) the timeout of each named job, as its latest
-- registration says. Names that are not registered are ignored. Returns the rows changed.
create function leasehold.set_job_timeouts(p_names text[], p_timeout_ms bigint[]) returns integer
language plpgsql volatile
set lock_timeout = '2s'
as $$
declare
  v_bad bigint;
  v_changed integer;
begin
  if coalesce(cardinality(p_names), 0) <> coalesce(cardinality(p_timeout_ms), 0) then
    raise exception 'set_job_timeouts needs as many timeouts as names (% names, % timeouts)',
      coalesce(cardinality(p_names), 0), coalesce(cardinality(p_timeout_ms), 0)
      using errcode = '22023';
  end if;
  -- the bounds of the client's `timeout` option: 1 ms to 366 days
  select t into v_bad from unnest(p_timeout_ms) t where t < 1 or t > 31622400000 limit 1;
  if found then
    raise exception 'a job timeout must be between 1 ms and 366 days (got % ms)', v_bad using errcode = '22023';
  end if;
  update leasehold.jobs j
     set timeout_ms = i.timeout_ms
    from unnest(p_names, p_timeout_ms) as i(name, timeout_ms)
   where j.name = i.name and j.timeout_ms is distinct from i.timeout_ms;
  get diagnostics v_changed = row_count;
  return v_changed;
end $$;

-- holds_lease: as in 0001, and a lease of a job with a timeout is not held once the timeout
-- has passed since the lease was granted.
create or replace function leasehold.holds_lease(p_name text, p_token uuid, p_fence bigint) returns boolean
language plpgsql volatile as $$
begin
  perform 1 from leasehold.leases l
   where l.name = p_name and l.token = p_token and l.fence = p_fence and l.expires_at > now()
     and l.epoch = leasehold.epoch()
     and not leasehold.run_timed_out(l.name, l.acquired_at)
     for key share of l;
  return found;
end $$;

-- run_timed_out: the deadline rule alone (holds_lease applies it; assert_lease names it in its
-- refusal): a run of job p_job whose lease was granted at p_acquired_at has outlived the job's
-- timeout.
create function leasehold.run_timed_out(p_job text, p_acquired_at timestamptz) returns boolean
language sql stable as $$
  select exists (
    select 1 from leasehold.jobs j
     where j.name = p_job and j.timeout_ms is not null
       and now() >= p_acquired_at + j.timeout_ms * interval '1 millisecond');
$$;

-- assert_lease: as in 0001, with the timeout named in the refusal (otherwise a timed-out lease,
-- unexpired and with a matching token, would be explained as unconfirmed since a failover, and
-- clients would renew it and try again).
create or replace function leasehold.assert_lease(p_name text, p_token uuid, p_fence bigint) returns bigint
language plpgsql volatile as $$
declare
  r leasehold.leases;
  v_detail text;
begin
  -- the rule and the lock are holds_lease's; this function only explains a refusal
  if leasehold.holds_lease(p_name, p_token, p_fence) then
    return p_fence;
  end if;
  select * into r from leasehold.leases l where l.name = p_name;
  v_detail := case
      when r.name is null then 'no such lease'
      when r.fence <> p_fence and r.token is null then format('the lease was force-released (fence is now %s, held by nobody)', r.fence)
      when r.fence <> p_fence then format('fence is now %s, held by %s', r.fence, r.holder)
      when r.token is null then 'the lease was released'
      when r.expires_at <= now() then 'the lease expired'
      -- a wrong token is no failover, whatever the row's epoch says
      when r.token <> p_token then 'the token does not match the lease'
      when leasehold.run_timed_out(r.name, r.acquired_at) then
        format('the run timed out: its job''s timeout of %s ms passed at %s',
               (select j.timeout_ms from leasehold.jobs j where j.name = r.name),
               r.acquired_at + (select j.timeout_ms from leasehold.jobs j where j.name = r.name) * interval '1 millisecond')
    end;
  if v_detail is not null then
    raise exception 'lease "%" (fence %) is no longer held', p_name, p_fence
      using errcode = 'LH003', detail = v_detail,
            hint = 'Roll back: another holder may be running. Do not retry the write under this lease.';
  end if;
  -- Not lost as far as this server knows, only unconfirmed since a failover. The DETAIL's
  -- first words are part of the contract: clients recognise this case by them, renew, and
  -- run the transaction again.
  raise exception 'lease "%" (fence %) is no longer held', p_name, p_fence
    using errcode = 'LH003',
          detail = format('a database failover happened since the lease was last confirmed (epoch %s, now %s): '
                          'renew it, or roll back if it is lost', r.epoch, leasehold.epoch()),
          hint = 'Roll back, renew the lease (leasehold.renew) and run the transaction again; if the renewal fails, the lease is lost.';
end $$;

-- run_outcomes: as in 0006, with 'timed-out' (the run outlived its job's timeout) appended.
create or replace function leasehold.run_outcomes() returns text[]
language sql immutable as $$
  select array['running', 'succeeded', 'failed', 'lost', 'aborted', 'timed-out'];
$$;

insert into leasehold.access (object, level) values
  ('set_job_timeouts', 'client'),
  -- a step of holds_lease and assert_lease
  ('run_timed_out', 'owner');
