-- leasehold migration 0025: which handlers the live workers have, so that a schedule no worker
-- can run is seen instead of staying idle forever.
--
-- Additive: one table and three functions.
--
-- A job defined as data names a handler; only a worker that registered a handler of that name
-- (startWorker({ handlers })) loads and runs it. A schedule whose handler no worker has stayed
-- idle, with nothing recorded: status showed it idle without attention and the dashboard
-- promised its next run. Now each worker registers its handler names on its liveness session
-- (register_worker_handlers), live_handlers() counts the live workers per handler, and
-- unhandled_schedules() lists the data jobs no live worker can run. One worker records their
-- slots as missed, naming the handler, so they show wherever a missed slot shows (status
-- attention, `leasehold runs`, the dashboard's timeline, the missed-slots metric and alert).
-- A row belongs to a worker's liveness key: it counts while that key's session lives
-- (worker_keys()), and rows of dead keys are pruned at the next registration.

create table leasehold.worker_handlers (
  worker_key    bigint primary key,
  holder        text not null,
  handlers      text[] not null,
  registered_at timestamptz not null default now()
);
comment on table leasehold.worker_handlers is
  'The handler names each scheduler worker registered, by its liveness key (live while worker_keys() lists it).';

-- register_worker_handlers: called by a worker on its liveness session, right after
-- register_worker_liveness(). Only the session that holds p_key may register under it.
create function leasehold.register_worker_handlers(p_key bigint, p_holder text, p_handlers text[]) returns void
language plpgsql volatile as $$
begin
  perform leasehold.check_holder(p_holder);
  if not exists (select 1 from leasehold.worker_keys() k where k.key = p_key and k.pid = pg_backend_pid()) then
    raise exception 'register_worker_handlers: this session does not hold worker key %', p_key
      using errcode = '42501', hint = 'Call it on the session that called register_worker_liveness().';
  end if;
  if cardinality(p_handlers) > 10000 then
    raise exception 'register_worker_handlers: at most 10000 handlers (got %)', cardinality(p_handlers) using errcode = '22023';
  end if;
  delete from leasehold.worker_handlers w
   where w.worker_key = p_key
      or not exists (select 1 from leasehold.worker_keys() k where k.key = w.worker_key);
  insert into leasehold.worker_handlers (worker_key, holder, handlers)
  values (p_key, p_holder, coalesce(p_handlers, '{}'));
end $$;

-- live_handlers: each handler name the live workers registered, with how many of them have it.
create function leasehold.live_handlers() returns table (handler text, workers integer)
language sql stable as $$
  select h.handler, count(*)::integer
    from leasehold.worker_handlers w
    join leasehold.worker_keys() k on k.key = w.worker_key
    cross join lateral unnest(w.handlers) as h(handler)
   group by h.handler;
$$;

-- unhandled_schedules: the data jobs (not removed, not paused) whose handler no live worker
-- registered, with what the recording worker needs to compute their slots. `since`: the
-- latest of the definition's last change and the job's last claimed slot.
create function leasehold.unhandled_schedules()
returns table (
  job text, handler text, schedule text, timezone text, interval_ms bigint,
  starting_deadline_ms bigint, since timestamptz, database_time timestamptz
)
language sql stable as $$
  select j.name, j.handler, j.schedule, j.timezone, j.interval_ms, j.starting_deadline_ms,
         greatest(j.registered_at, (select l.last_slot from leasehold.leases l where l.name = j.name)), now()
    from leasehold.jobs j
   where j.source = 'data' and j.removed_at is null and j.paused_at is null
     and not exists (select 1 from leasehold.live_handlers() h where h.handler = j.handler)
   order by j.name
   limit 10000;
$$;

insert into leasehold.access (object, level) values
  ('worker_handlers', 'owner'), ('register_worker_handlers', 'client'), ('live_handlers', 'reader'), ('unhandled_schedules', 'reader');
