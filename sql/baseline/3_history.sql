-- leasehold schema, part 3 of 6: run history. run_counts and slow_runs (kept by triggers) spare
-- the summaries a scan of run_log.

-- run_outcomes: the values of runs.outcome. run_log's check spells them out (a function there would
-- run with the reader's rights); test/sql/contract.test.ts holds the two lists together.
create function leasehold.run_outcomes() returns text[]
language sql immutable as $$
  select array['running', 'succeeded', 'failed', 'lost', 'aborted', 'timed-out'];
$$;

create table leasehold.run_counts (
  bucket smallint not null, shard smallint not null, minute bigint not null, runs bigint not null,
  constraint run_counts_pkey PRIMARY KEY (bucket, shard),
  constraint run_counts_bucket_check CHECK (((bucket >= 0) AND (bucket < 1500))),
  constraint run_counts_shard_check CHECK (((shard >= 0) AND (shard < 64)))
);
comment on table leasehold.run_counts is
  'Finished runs per minute of their start over the last 25 hours (a ring of 1,500 minutes per shard; sum the shards of a minute, ignore minutes outside the window).';

create table leasehold.run_log (
  id bigserial,
  job text not null, slot timestamp with time zone not null, fence bigint not null, holder text not null,
  started_at timestamp with time zone not null default clock_timestamp(), finished_at timestamp with time zone,
  outcome text not null default 'running'::text, error text, attempts integer not null default 1,
  trigger text not null default 'schedule'::text, requested_by text, request_id bigint, -- what started it
  constraint runs_pkey PRIMARY KEY (job, fence), -- a run is its job's fence; id is for readers (no index: one b-tree less per run)
  constraint runs_outcome_known CHECK ((outcome = ANY (ARRAY['running', 'succeeded', 'failed', 'lost', 'aborted', 'timed-out']))),
  constraint runs_trigger_check CHECK ((trigger = ANY (ARRAY['schedule'::text, 'manual'::text, 'backfill'::text])))
);
comment on table leasehold.run_log is
  'History rows of runs: one per run, written when it ends (or when it starts, for runs of run now, backfill, start_run and overlap allow). Read leasehold.runs, which adds the runs in flight.';
create index runs_failing on leasehold.run_log (started_at DESC) WHERE (outcome = ANY (ARRAY['failed'::text, 'lost'::text, 'timed-out'::text]));
create index runs_finished_brin on leasehold.run_log using brin (finished_at) WITH (pages_per_range='32');
create index runs_job_started on leasehold.run_log (job, started_at DESC);
create index runs_running on leasehold.run_log (job) WHERE (outcome = 'running'::text);
create index runs_started_brin on leasehold.run_log using brin (started_at) WITH (pages_per_range='32');

create table leasehold.slow_runs (job text primary key, last_started timestamp with time zone not null);
comment on table leasehold.slow_runs is
  'Per job, the latest start of a finished run that took at least half its interval: the only jobs whose p95 can creep.';

-- run_start: the handler's start (the worker's estimate of the database clock), kept between the claim and now.
create function leasehold.run_start(p_claimed timestamptz, p_started_ms double precision) returns timestamptz
language sql stable as $$
  select case when p_started_ms is null then p_claimed else least(greatest(p_claimed, to_timestamp(p_started_ms / 1000.0)), now()) end;
$$;

-- start_run: records a run under a held lease (LH003 otherwise), once per fence, and shows the name
-- as a job (schedule 'external') unless a job of that name is scheduled.
create function leasehold.start_run(p_name text, p_token uuid, p_fence bigint, p_slot timestamptz default null, p_interval_ms bigint default null)
returns timestamptz
language plpgsql volatile as $$
declare
  v_slot timestamptz := coalesce(p_slot, now());
  l leasehold.leases;
begin
  perform leasehold.check_namespace(array[p_name]);
  perform leasehold.check_schedule_field(p_interval_ms is null or p_interval_ms between 1 and 366::bigint * 86400000, 'interval_ms',
    'must be from 1 millisecond to 366 days');
  perform leasehold.assert_lease(p_name, p_token, p_fence);
  select * into l from leasehold.leases x where x.name = p_name;
  insert into leasehold.jobs as j (name, schedule, interval_ms, ttl_ms, overlap, catch_up, registered_by)
  values (p_name, 'external', p_interval_ms, (extract(epoch from l.ttl) * 1000)::bigint, 'skip', 'none', l.holder)
  on conflict (name) do update set interval_ms = coalesce(excluded.interval_ms, j.interval_ms), ttl_ms = excluded.ttl_ms
   where j.schedule = 'external' and (coalesce(excluded.interval_ms, j.interval_ms), excluded.ttl_ms) is distinct from (j.interval_ms, j.ttl_ms);
  insert into leasehold.run_log (job, slot, fence, holder) values (p_name, v_slot, p_fence, l.holder) on conflict (job, fence) do nothing;
  return v_slot;
end $$;

-- finish_runs: ends runs (a run in flight on its lease row through end_runs, a run_log row in place)
-- and releases the leases given with their tokens.
create function leasehold.finish_runs(
  p_jobs text[], p_fences bigint[], p_tokens uuid[], p_outcomes text[], p_errors text[], p_attempts integer[], p_started_ms double precision[] default null
) returns table (job text, fence bigint, recorded boolean, released boolean, next_buffered_slot timestamptz)
language plpgsql volatile
set lock_timeout = '2s'
set plan_cache_mode = force_custom_plan
set jit = off
as $$
#variable_conflict use_column
declare
  v_n integer := coalesce(cardinality(p_jobs), 0);
  v_bad text; v_released text[]; v_queued boolean;
  v_recorded text[]; -- the runs recorded from their lease rows, as 'job#fence'
begin
  perform leasehold.check_namespace(p_jobs);
  perform leasehold.pin_synchronous_commit();
  if array[coalesce(cardinality(p_fences), 0), coalesce(cardinality(p_tokens), 0), coalesce(cardinality(p_outcomes), 0),
           coalesce(cardinality(p_errors), v_n), coalesce(cardinality(p_attempts), v_n), coalesce(cardinality(p_started_ms), v_n)]
     <> array_fill(v_n, array[6]) then
    raise exception 'finish_runs: as many fences, tokens, outcomes, errors, attempts and start times as jobs are needed (% jobs)', v_n
      using errcode = '22023';
  end if;
  select o into v_bad from unnest(p_outcomes) o where o is null or o = 'running' or not (o = any (leasehold.run_outcomes())) limit 1;
  if found then
    raise exception 'outcome must be one of % (got %)', array_to_string(array_remove(leasehold.run_outcomes(), 'running'), ', '),
      coalesce(v_bad, 'null') using errcode = '22023';
  end if;
  select coalesce(array_agg(e.name || '#' || e.fence) filter (where e.recorded), '{}'), coalesce(array_agg(e.name) filter (where e.released), '{}')
    into v_recorded, v_released
    from leasehold.end_runs(p_jobs, p_tokens, p_fences, p_outcomes, p_errors, p_attempts, p_started_ms) e;
  -- the others: runs with a run_log row from their start (run now, backfill, start_run, allow);
  -- a statement of its own, only when there are some (its run_log triggers run even for no row)
  if cardinality(v_recorded) < v_n then
    with recorded as (
      update leasehold.run_log r
         set outcome = i.outcome, finished_at = now(), error = left(i.error, 4000), attempts = coalesce(i.attempts, 1),
             started_at = leasehold.run_start(r.started_at, i.started_ms)
        from unnest(p_jobs, p_fences, p_outcomes, p_errors, p_attempts, p_started_ms) as i(job, fence, outcome, error, attempts, started_ms)
       where r.job = i.job and r.fence = i.fence and r.outcome = 'running' and not ((i.job || '#' || i.fence) = any (v_recorded))
      returning r.job || '#' || r.fence as run
    )
    select v_recorded || coalesce(array_agg(x.run), '{}') into v_recorded from recorded x;
  end if;
  -- queued slots (buffered, catch-up): almost never; an empty table answers without a probe per job
  -- (and, in a statement of its own, without planning `= any (p_jobs)`: 3 ms for 10,000 jobs)
  v_queued := exists (select 1 from leasehold.buffered);
  if v_queued then v_queued := exists (select 1 from leasehold.buffered b where b.job = any (p_jobs)); end if;
  return query
  with input as materialized (
    select * from unnest(p_jobs, p_fences) as i(job, fence)
  ),
  stale_buffers as (
    delete from leasehold.buffered b using leasehold.leases l, input i
     where v_queued and b.job = i.job and l.name = i.job and b.slot <= l.last_slot
    returning b.job, b.slot
  )
  select i.job, i.fence,
         (i.job || '#' || i.fence) = any (v_recorded),
         i.job in (select unnest(v_released)),
         case when v_queued then (select min(b.slot) from leasehold.buffered b
           where b.job = i.job and b.slot > coalesce((select l.last_slot from leasehold.leases l where l.name = i.job), '-infinity')
             and not exists (select 1 from stale_buffers s where s.job = b.job and s.slot = b.slot)) end
    from input i;
end $$;

-- end_runs: the one rule by which a lease row lets go of its lease (only for its current token) and
-- of the run of fence p_fences[i] in flight on it (history row written), in one update; rows locked
-- in name order. FOR NO KEY UPDATE: the holder's fenced transactions do not block it.
create function leasehold.end_runs(
  p_names text[], p_tokens uuid[], p_fences bigint[], p_outcomes text[], p_errors text[], p_attempts integer[], p_started_ms double precision[] default null
) returns table (name text, fence bigint, released boolean, recorded boolean)
language plpgsql volatile
set plan_cache_mode = force_custom_plan
set jit = off
set random_page_cost = 1.1 -- primary-key probes, not a scan of every lease (see claim)
as $$
#variable_conflict use_column
begin
  return query
  with locked as (
    -- both tests on the newest version of the row, once it is locked
    select l.name, i.fence, i.outcome, i.error, i.attempts, i.started_ms,
           coalesce(l.token = i.token, false) as releasing,
           coalesce(l.run_slot is not null and l.run_fence = i.fence, false) as ending,
           l.run_slot, l.run_fence, l.run_holder, l.run_started_at
      from leasehold.leases l
      join unnest(p_names, p_tokens, p_fences, p_outcomes, p_errors, p_attempts, p_started_ms)
             as i(name, token, fence, outcome, error, attempts, started_ms) on l.name = i.name
     where l.token = i.token or (l.run_slot is not null and l.run_fence = i.fence)
     order by l.name
       for no key update of l
  ),
  -- one change per row: released if any element has its token, recorded with the element that ends it
  changing as (
    select distinct on (k.name) k.name, k.fence, k.outcome, k.error, k.attempts, k.started_ms, k.ending,
           bool_or(k.releasing) over (partition by k.name) as releasing,
           k.run_slot, k.run_fence, k.run_holder, k.run_started_at
      from locked k order by k.name, k.ending desc
  ),
  changed as (
    update leasehold.leases l
       set token = case when c.releasing then null else l.token end,
           expires_at = case when c.releasing then null else l.expires_at end,
           holder_key = case when c.releasing then null else l.holder_key end,
           released_at = case when c.releasing then now() else l.released_at end,
           run_slot = case when c.ending then null else l.run_slot end,
           run_started_at = case when c.ending then null else l.run_started_at end
      from changing c
     where l.name = c.name
    returning c.*
  ),
  recorded as (
    insert into leasehold.run_log as r (job, slot, fence, holder, started_at, finished_at, outcome, error, attempts)
    select c.name, c.run_slot, c.run_fence, c.run_holder, leasehold.run_start(c.run_started_at, c.started_ms), now(), c.outcome,
           left(c.error, 4000), coalesce(c.attempts, 1)
      from changed c
     -- not `on conflict do nothing`: its speculative insertion logs a confirmation per row (48 bytes)
     where c.ending and not exists (select 1 from leasehold.run_log x where x.job = c.name and x.fence = c.run_fence)
    returning r.job
  )
  select c.name, c.fence, c.releasing, c.ending and c.name in (select r.job from recorded r) from changed c;
end $$;

-- finish_held_run: finish_runs() of a start_run run; one no longer held is recorded 'lost' (a run
-- may end between two heartbeats), so the history never shows a success that was not exclusive.
create function leasehold.finish_held_run(p_name text, p_fence bigint, p_token uuid, p_outcome text, p_error text default null, p_release boolean default true)
returns table (outcome text, recorded boolean, released boolean)
language plpgsql volatile
set lock_timeout = '2s'
as $$
declare
  v_held boolean; v_outcome text := p_outcome; v_error text := p_error; f record;
begin
  perform leasehold.check_namespace(array[p_name]);
  -- the row lock keeps the lease as it is seen here until finish_runs() releases it
  select l.token = p_token and l.fence = p_fence and l.expires_at > now() into v_held
    from leasehold.leases l where l.name = p_name for update;
  if not coalesce(v_held, false) and p_outcome in ('succeeded', 'failed') then
    v_outcome := 'lost';
    v_error := concat_ws('; ', 'the lease was no longer held when the run finished (released by force, expired or taken over)', p_error);
  end if;
  select * into f from leasehold.finish_runs(array[p_name], array[p_fence], array[case when p_release then p_token end],
                                             array[v_outcome], array[v_error], array[1]);
  return query select v_outcome, f.recorded, f.released;
end $$;

-- The run counts: one trigger per event (transition tables allow one), each summing by minute.
create function leasehold.count_runs_inserted() returns trigger
language plpgsql volatile set jit = off as $$
begin
  perform leasehold.add_run_counts(array_agg(minute), array_agg(n))
     from (select floor(extract(epoch from started_at) / 60)::bigint as minute, count(*) as n
             from new_runs where finished_at is not null group by 1) d;
  if exists (select 1 from new_runs where finished_at is not null and finished_at - started_at >= interval '500 milliseconds') then
    perform leasehold.mark_slow_runs(array_agg(job), array_agg(started_at), array_agg(finished_at))
       from new_runs where finished_at is not null and finished_at - started_at >= interval '500 milliseconds';
  end if;
  return null;
end $$;

create function leasehold.count_runs_updated() returns trigger
language plpgsql volatile set jit = off as $$
begin
  perform leasehold.add_run_counts(array_agg(minute), array_agg(n))
     from (select minute, sum(n)::bigint as n
             from (select floor(extract(epoch from started_at) / 60)::bigint as minute, 1 as n from new_runs where finished_at is not null
                   union all
                   select floor(extract(epoch from started_at) / 60)::bigint, -1 from old_runs where finished_at is not null) c
            group by 1) d;
  if exists (select 1 from new_runs where finished_at is not null and finished_at - started_at >= interval '500 milliseconds') then
    perform leasehold.mark_slow_runs(array_agg(job), array_agg(started_at), array_agg(finished_at))
       from new_runs where finished_at is not null and finished_at - started_at >= interval '500 milliseconds';
  end if;
  return null;
end $$;

-- prune_history deletes old rows: only those of the last 25 hours change a count
create function leasehold.count_runs_deleted() returns trigger
language plpgsql volatile set jit = off as $$
begin
  perform leasehold.add_run_counts(array_agg(minute), array_agg(-n))
     from (select floor(extract(epoch from started_at) / 60)::bigint as minute, count(*) as n
             from old_runs where finished_at is not null and started_at > now() - interval '25 hours' group by 1) d;
  return null;
end $$;

-- add_run_counts: signed per-minute counts into this backend's shard (minutes older than 25 hours
-- dropped, their buckets taken over). The shard's advisory lock first: a transaction counting twice
-- (insert and update triggers) locks buckets in order within a call, not across calls: deadlock.
create function leasehold.add_run_counts(p_minutes bigint[], p_counts bigint[]) returns void
language sql volatile as $$
  select pg_advisory_xact_lock(1819042147, (pg_backend_pid() % 64)::integer);
  insert into leasehold.run_counts as c (bucket, shard, minute, runs)
  select (d.minute % 1500)::smallint, (pg_backend_pid() % 64)::smallint, d.minute, d.n
    from unnest(p_minutes, p_counts) as d (minute, n)
   where d.n <> 0 and d.minute > floor(extract(epoch from now()) / 60)::bigint - 1500
   order by 1 -- rows locked in bucket order: two sessions on one shard wait, never deadlock
  on conflict (bucket, shard) do update
     set minute = excluded.minute, runs = case when c.minute = excluded.minute then c.runs + excluded.runs else excluded.runs end
   where c.minute <= excluded.minute;
$$;

-- refresh_run_counts: rebuilds both tables from run_log (after a TRUNCATE or a restore of it alone).
create function leasehold.refresh_run_counts() returns void
language plpgsql volatile set jit = off as $$
begin
  lock table leasehold.run_counts, leasehold.slow_runs in exclusive mode;
  delete from leasehold.run_counts;
  delete from leasehold.slow_runs;
  insert into leasehold.run_counts (bucket, shard, minute, runs)
  select (minute % 1500)::smallint, 0, minute, n
    from (select floor(extract(epoch from started_at) / 60)::bigint as minute, count(*) as n from leasehold.run_log
           where finished_at is not null and started_at > now() - interval '25 hours' group by 1) d;
  insert into leasehold.slow_runs (job, last_started)
  select r.job, max(r.started_at) from leasehold.run_log r join leasehold.jobs j on j.name = r.job
   where r.finished_at is not null and r.started_at > now() - interval '25 hours' and j.interval_ms > 0
     and extract(epoch from r.finished_at - r.started_at) * 1000 >= 0.5 * j.interval_ms
   group by r.job;
end $$;

-- mark_slow_runs: runs that took half their interval (the triggers pass only those of 500 ms or more).
create function leasehold.mark_slow_runs(p_jobs text[], p_started timestamptz[], p_finished timestamptz[]) returns void
language sql volatile as $$
  insert into leasehold.slow_runs as s (job, last_started)
  select r.job, max(r.started_at)
    from unnest(p_jobs, p_started, p_finished) as r (job, started_at, finished_at)
    join leasehold.jobs j on j.name = r.job
   where p_jobs is not null and j.interval_ms > 0 and extract(epoch from r.finished_at - r.started_at) * 1000 >= 0.5 * j.interval_ms
   group by r.job
  on conflict (job) do update set last_started = greatest(s.last_started, excluded.last_started);
$$;

-- prune_history: deletes ended runs, skips, missed slots and clock steps older than p_keep; with
-- p_batch, at most p_batch of each per call.
create function leasehold.prune_history(p_keep interval, p_batch integer default null) returns bigint
language plpgsql volatile as $$
declare
  n bigint := 0; c bigint;
  v_before timestamptz := now() - p_keep;
  v_batch integer := coalesce(p_batch, 10000);
begin
  if v_batch < 1 then
    raise exception 'prune_history: p_batch must be at least 1 (got %)', p_batch using errcode = '22023';
  end if;
  if not pg_try_advisory_xact_lock(7308604897068083570) then return 0; end if;
  loop
    with d as (delete from leasehold.run_log where ctid in (
                 select ctid from leasehold.run_log where finished_at < v_before and outcome <> 'running' limit v_batch) returning 1),
         k as (delete from leasehold.skips where ctid in (select ctid from leasehold.skips where recorded_at < v_before limit v_batch) returning 1),
         m as (delete from leasehold.missed where ctid in (select ctid from leasehold.missed where recorded_at < v_before limit v_batch) returning 1)
    select (select count(*) from d) + (select count(*) from k) + (select count(*) from m) into c;
    n := n + c;
    exit when p_batch is not null or c = 0;
  end loop;
  delete from leasehold.clock_steps where recorded_at < v_before;
  get diagnostics c = row_count;
  return n + c;
end $$;

create trigger runs_count_deleted AFTER DELETE ON leasehold.run_log REFERENCING OLD TABLE AS old_runs FOR EACH STATEMENT EXECUTE FUNCTION leasehold.count_runs_deleted();
create trigger runs_count_inserted AFTER INSERT ON leasehold.run_log REFERENCING NEW TABLE AS new_runs FOR EACH STATEMENT EXECUTE FUNCTION leasehold.count_runs_inserted();
create trigger runs_count_updated AFTER UPDATE ON leasehold.run_log REFERENCING OLD TABLE AS old_runs NEW TABLE AS new_runs FOR EACH STATEMENT EXECUTE FUNCTION leasehold.count_runs_updated();
