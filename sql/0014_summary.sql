-- leasehold migration 0014: a fleet summary that does not read a day of runs.
--
-- Additive. The dashboard's summary (and the metrics' fleet gauges) showed counts over the last
-- 24 hours: runs, failed and lost runs, and how many jobs' p95 duration creeps towards their
-- interval. At 100,000 jobs every 15 minutes that is ~10 million runs a day, and the summary
-- read all of them (26 s). Two small tables, kept by statement-level triggers on runs (one
-- aggregate per statement over its changed rows, whatever path wrote them: claim, finish,
-- exec, prune), let it answer from bounded reads, with the same numbers:
--   * run_counts: finished runs per minute of started_at, for the last 25 hours, in a ring of
--     1,500 buckets per shard (the shard is the writing backend's pid mod 64, so concurrent
--     finishing workers rarely wait on the same row; rows are taken in bucket order, so two
--     that do wait, never deadlock). runs in 24 h = the buckets wholly inside
--     the window + an exact count of the one partial minute at its old edge.
--   * slow_runs: per job, the latest start of a finished run that took at least half the job's
--     interval (at the time it finished). A job whose p95 over 24 h reaches a ratio >= 0.5 of
--     its interval has such a run in the window, so the summary computes the exact p95 only for
--     these jobs (usually none or few).
-- Failed, lost and timed-out counts use the partial index runs_failing (below; it replaces
-- 0008's runs_failed, which left out the timed-out runs of schema 13). TRUNCATE of runs is not
-- seen by the triggers: refresh_run_counts() rebuilds both tables from runs.

-- runs_failing: every failure outcome (a job whose runs all time out is failing), still a small
-- share of the runs; runs_failed is dropped once the wider index exists.
create index runs_failing on leasehold.runs (started_at desc) where outcome in ('failed', 'lost', 'timed-out');
drop index leasehold.runs_failed;

create table leasehold.run_counts (
  bucket  smallint not null check (bucket >= 0 and bucket < 1500),
  shard   smallint not null check (shard >= 0 and shard < 64),
  minute  bigint not null,   -- minutes since the epoch: floor(extract(epoch from started_at) / 60)
  runs    bigint not null,
  primary key (bucket, shard)
);
comment on table leasehold.run_counts is
  'Finished runs per minute of their start over the last 25 hours (a ring of 1,500 minutes per shard; sum the shards of a minute, ignore minutes outside the window).';

create table leasehold.slow_runs (
  job           text primary key,
  last_started  timestamptz not null
);
comment on table leasehold.slow_runs is
  'Per job, the latest start of a finished run that took at least half its interval: the only jobs whose p95 can creep.';

-- add_run_counts: adds signed per-minute counts to this backend's shard. Minutes older than
-- 25 hours are never read and are dropped; a bucket that still holds a minute 25 hours older
-- is taken over.
create function leasehold.add_run_counts(p_minutes bigint[], p_counts bigint[]) returns void
language sql volatile as $$
  insert into leasehold.run_counts as c (bucket, shard, minute, runs)
  select (d.minute % 1500)::smallint, (pg_backend_pid() % 64)::smallint, d.minute, d.n
    from unnest(p_minutes, p_counts) as d (minute, n)
   where d.n <> 0 and d.minute > floor(extract(epoch from now()) / 60)::bigint - 1500
   order by 1 -- rows locked in bucket order: two sessions on one shard wait, never deadlock
  on conflict (bucket, shard) do update
     set minute = excluded.minute,
         runs = case when c.minute = excluded.minute then c.runs + excluded.runs else excluded.runs end
   where c.minute <= excluded.minute;
$$;

-- The triggers: one per event (a trigger with transition tables has one event). Each sums the
-- statement's changed rows by minute (added minus removed finished runs) in one aggregate.
create function leasehold.count_runs_inserted() returns trigger
language plpgsql volatile set jit = off as $$
begin
  perform leasehold.add_run_counts(array_agg(minute), array_agg(n))
     from (select floor(extract(epoch from started_at) / 60)::bigint as minute, count(*) as n
             from new_runs where finished_at is not null group by 1) d;
  perform leasehold.mark_slow_runs(array_agg(job), array_agg(started_at), array_agg(finished_at))
     from new_runs where finished_at is not null and finished_at - started_at >= interval '500 milliseconds';
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
  perform leasehold.mark_slow_runs(array_agg(job), array_agg(started_at), array_agg(finished_at))
     from new_runs where finished_at is not null and finished_at - started_at >= interval '500 milliseconds';
  return null;
end $$;

create function leasehold.count_runs_deleted() returns trigger
language plpgsql volatile set jit = off as $$
begin
  -- prune_history deletes old rows: only those of the last 25 hours change a count
  perform leasehold.add_run_counts(array_agg(minute), array_agg(-n))
     from (select floor(extract(epoch from started_at) / 60)::bigint as minute, count(*) as n
             from old_runs where finished_at is not null and started_at > now() - interval '25 hours' group by 1) d;
  return null;
end $$;

-- mark_slow_runs: the runs (>= 500 ms, the shortest interval's half) that took at least half
-- their job's interval. Nothing when there are none (the usual case: no join at all).
create function leasehold.mark_slow_runs(p_jobs text[], p_started timestamptz[], p_finished timestamptz[]) returns void
language sql volatile as $$
  insert into leasehold.slow_runs as s (job, last_started)
  select r.job, max(r.started_at)
    from unnest(p_jobs, p_started, p_finished) as r (job, started_at, finished_at)
    join leasehold.jobs j on j.name = r.job
   where p_jobs is not null and j.interval_ms > 0
     and extract(epoch from r.finished_at - r.started_at) * 1000 >= 0.5 * j.interval_ms
   group by r.job
  on conflict (job) do update set last_started = greatest(s.last_started, excluded.last_started);
$$;

create trigger runs_count_inserted after insert on leasehold.runs
  referencing new table as new_runs for each statement execute function leasehold.count_runs_inserted();
create trigger runs_count_updated after update on leasehold.runs
  referencing old table as old_runs new table as new_runs for each statement execute function leasehold.count_runs_updated();
create trigger runs_count_deleted after delete on leasehold.runs
  referencing old table as old_runs for each statement execute function leasehold.count_runs_deleted();

-- refresh_run_counts: rebuilds both tables from runs (after a TRUNCATE, or a restore). This
-- migration calls it once for the history already there.
create function leasehold.refresh_run_counts() returns void
language plpgsql volatile set jit = off as $$
begin
  lock table leasehold.run_counts, leasehold.slow_runs in exclusive mode;
  delete from leasehold.run_counts;
  delete from leasehold.slow_runs;
  insert into leasehold.run_counts (bucket, shard, minute, runs)
  select (minute % 1500)::smallint, 0, minute, n
    from (select floor(extract(epoch from started_at) / 60)::bigint as minute, count(*) as n
            from leasehold.runs
           where finished_at is not null and started_at > now() - interval '25 hours'
           group by 1) d;
  insert into leasehold.slow_runs (job, last_started)
  select r.job, max(r.started_at)
    from leasehold.runs r join leasehold.jobs j on j.name = r.job
   where r.finished_at is not null and r.started_at > now() - interval '25 hours' and j.interval_ms > 0
     and extract(epoch from r.finished_at - r.started_at) * 1000 >= 0.5 * j.interval_ms
   group by r.job;
end $$;

select leasehold.refresh_run_counts();

-- fleet_summary: the dashboard's summary counts over the last 24 hours, from the tables above
-- (bounded reads; see the top of this file). p_warn_ratio (>= 0.5): a job creeps when its p95
-- duration is at least that share of its interval, and is over when it is at least the interval.
create function leasehold.fleet_summary(p_warn_ratio double precision default 0.8)
returns table (
  jobs integer, running integer, expired integer, failing integer, creeping integer, over_interval integer,
  runs_24h bigint, failed_24h bigint, lost_24h bigint, skips_24h bigint, missed_24h bigint, timed_out_24h bigint
)
language plpgsql stable set jit = off as $$
#variable_conflict use_column
declare
  v_since timestamptz := now() - interval '24 hours';
  v_edge  bigint := floor(extract(epoch from now() - interval '24 hours') / 60)::bigint;
begin
  if p_warn_ratio is null or p_warn_ratio < 0.5 or p_warn_ratio >= 1 then
    raise exception 'p_warn_ratio must be from 0.5 to below 1 (got %)', p_warn_ratio using errcode = '22023';
  end if;
  return query
  with states as (
    select count(*) filter (where l.state = 'held') as held, count(*) filter (where l.state = 'expired') as expired
      from leasehold.jobs j join leasehold.lease_status l on l.name = j.name
  ),
  failures as (
    select count(distinct r.job) filter (where exists (select 1 from leasehold.jobs j where j.name = r.job)) as jobs,
           count(*) filter (where r.outcome = 'failed') as failed,
           count(*) filter (where r.outcome = 'lost') as lost,
           count(*) filter (where r.outcome = 'timed-out') as timed_out
      from leasehold.runs r
     where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at > v_since and r.finished_at is not null
  ),
  ratios as (
    select (select percentile_cont(0.95) within group (order by extract(epoch from r.finished_at - r.started_at))
              from leasehold.runs r
             where r.job = j.name and r.finished_at is not null and r.started_at > v_since) * 1000 / j.interval_ms as ratio
      from leasehold.slow_runs s join leasehold.jobs j on j.name = s.job
     where s.last_started > v_since and j.interval_ms > 0
  )
  select (select count(*) from leasehold.jobs)::integer,
         (select held from states)::integer,
         (select expired from states)::integer,
         (select f.jobs from failures f)::integer,
         (select count(*) from ratios where ratio >= p_warn_ratio and ratio < 1)::integer,
         (select count(*) from ratios where ratio >= 1)::integer,
         (select coalesce(sum(c.runs), 0) from leasehold.run_counts c where c.minute > v_edge)::bigint
           + (select count(*) from leasehold.runs r
               where r.started_at > v_since and r.started_at < to_timestamp((v_edge + 1) * 60) and r.finished_at is not null)::bigint,
         (select f.failed from failures f)::bigint,
         (select f.lost from failures f)::bigint,
         (select count(*) from leasehold.skips where recorded_at > v_since)::bigint,
         (select count(*) from leasehold.missed where recorded_at > v_since)::bigint,
         (select f.timed_out from failures f)::bigint;
end $$;

insert into leasehold.access (object, level) values
  ('fleet_summary', 'reader'),
  ('run_counts', 'reader'), ('slow_runs', 'reader'),
  ('refresh_run_counts', 'operator'),
  -- steps of the triggers on runs, never called directly
  ('add_run_counts', 'owner'), ('mark_slow_runs', 'owner'),
  ('count_runs_inserted', 'owner'), ('count_runs_updated', 'owner'), ('count_runs_deleted', 'owner');
