-- leasehold schema, part 2 of 6: scheduled jobs and slot claims. A job's lease row carries
-- last_slot, the newest slot anyone claimed.

create sequence leasehold.job_revisions;

-- Slots waiting for the running one to finish (overlap buffer-one and buffer-all, catch-up).
create table leasehold.buffered (
  job text not null, slot timestamp with time zone not null, buffered_at timestamp with time zone not null default now(),
  constraint buffered_pkey PRIMARY KEY (job, slot)
);

create table leasehold.worker_starts (
  holder_key bigint primary key, started_through timestamptz not null, taken_through timestamptz, updated_at timestamptz not null default now()
);
comment on table leasehold.worker_starts is
  'Per worker liveness key: through when its runs claimed ahead are started (start_tick), and the latest planned start of one a peer claimed again.';

-- A worker's share of its latest tick, once every slot of it is decided (report_share): a peer
-- whose own view of that share has the same digest leaves it out of its second pass.
create table leasehold.share_reports (
  holder_key bigint primary key, jobs integer not null, sum_a bigint not null, sum_b bigint not null,
  reported_by text not null, reported_at timestamptz not null default now()
);
comment on table leasehold.share_reports is
  'Per worker liveness key: the digest of the (job, slot) pairs its latest share claim decided (report_share), read by the peers'' second pass (reported_shares).';

create table leasehold.jobs (
  name text primary key,
  schedule text not null, timezone text, interval_ms bigint, ttl_ms bigint not null, overlap text not null, catch_up text not null,
  registered_by text not null, registered_at timestamp with time zone not null default now(),
  source text not null default 'code'::text, handler text, payload jsonb, defined_by text, -- jobs defined as data
  buffer_limit integer, starting_deadline_ms bigint, timeout_ms bigint, jitter_ms bigint, -- null: the default (or none)
  removed_at timestamp with time zone, paused_at timestamp with time zone, paused_by text, pause_reason text,
  revision bigint not null default nextval('leasehold.job_revisions'::regclass),
  owner_role text, -- who registered or defined it (null: owner or superuser): only it changes it, its workers run it
  constraint jobs_jitter_ms_check CHECK ((jitter_ms > 0)),
  constraint jobs_source_check CHECK ((source = ANY (ARRAY['code'::text, 'data'::text]))),
  constraint jobs_timeout_ms_check CHECK ((timeout_ms > 0))
);
comment on table leasehold.jobs is
  'The latest definition of each scheduled job, as registered by a worker.';
create unique index jobs_revision on leasehold.jobs (revision);

create table leasehold.missed (
  job text not null, slot timestamp with time zone not null, reason text not null, recorded_by text not null,
  recorded_at timestamp with time zone not null default now(),
  constraint missed_pkey PRIMARY KEY (job, slot)
);
create index missed_recorded_brin on leasehold.missed using brin (recorded_at) WITH (pages_per_range='32');

create table leasehold.worker_handlers (
  worker_key bigint primary key, holder text not null, handlers text[] not null, registered_at timestamp with time zone not null default now(),
  role text not null default SESSION_USER -- the worker's login role: which jobs its feed shows (may_run)
);
comment on table leasehold.worker_handlers is
  'The handler names each scheduler worker registered, by its liveness key (live while liveness_locks() lists it).';

-- jobs_revision: every write of a jobs row takes the next revision, one writer at a time. A write
-- not marked by leasehold.job_writer is a code job's registration, which takes a data job's name over.
create function leasehold.jobs_revision() returns trigger
language plpgsql volatile as $$
begin
  perform pg_advisory_xact_lock(7308604897068083572);
  if current_setting('leasehold.job_writer', true) is distinct from 'schedules' then
    if tg_op = 'UPDATE' and old.source = 'data' then
      update leasehold.leases l set suspended = case when old.paused_at is null then null else 'paused' end where l.name = new.name;
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

-- notify_changes: the table's name on channel leasehold_changes (no data: any role may listen).
create function leasehold.notify_changes() returns trigger
language plpgsql volatile as $$
begin
  perform pg_notify('leasehold_changes', tg_argv[0]);
  return null;
end $$;

-- timezone_problem: why p_timezone is not a name both PostgreSQL and the workers' Intl accept, or
-- null (both ignore case, so only the area and the initials are checked).
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

-- register_jobs: upserts job definitions and their lease rows; returns each last_slot (catch-up).
-- A changed schedule or timezone moves last_slot to now(): the old schedule's slots never existed.
create function leasehold.register_jobs(
  p_names text[], p_schedules text[], p_timezones text[], p_interval_ms bigint[], p_ttl_ms bigint[],
  p_overlaps text[], p_catch_ups text[], p_holder text, p_timeout_ms bigint[] default null
) returns table (name text, last_slot timestamptz, database_time timestamptz, last_slot_unstarted boolean)
language plpgsql volatile
set plan_cache_mode = force_custom_plan
set jit = off
as $$
#variable_conflict use_column
declare
  v_bad bigint;
begin
  perform leasehold.check_namespace(p_names);
  perform leasehold.check_job_owner(p_names);
  perform leasehold.check_name(n) from unnest(p_names) as n;
  if p_timeout_ms is not null and cardinality(p_timeout_ms) is distinct from cardinality(p_names) then
    raise exception 'register_jobs needs as many timeouts as names (% names, % timeouts)',
      coalesce(cardinality(p_names), 0), cardinality(p_timeout_ms) using errcode = '22023';
  end if;
  select t into v_bad from unnest(p_timeout_ms) t where t < 1 or t > 31622400000 limit 1;
  if found then
    raise exception 'a job timeout must be between 1 ms and 366 days (got % ms)', v_bad using errcode = '22023';
  end if;
  insert into leasehold.leases (name) select n from unnest(p_names) as n on conflict do nothing;
  update leasehold.leases l set last_slot = greatest(l.last_slot, now())
    from unnest(p_names, p_schedules, p_timezones) as i(name, schedule, timezone) join leasehold.jobs j on j.name = i.name
   where l.name = i.name and l.last_slot is not null and (j.schedule, j.timezone) is distinct from (i.schedule, i.timezone);
  -- a changed definition is an act on the job: recorded
  with written as (
    insert into leasehold.jobs as j (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, timeout_ms, registered_by, owner_role)
    select i.*, p_holder, leasehold.acting_role()
      from unnest(p_names, p_schedules, p_timezones, p_interval_ms, p_ttl_ms, p_overlaps, p_catch_ups, p_timeout_ms) as i
    on conflict (name) do update
       set schedule = excluded.schedule, timezone = excluded.timezone, interval_ms = excluded.interval_ms,
           ttl_ms = excluded.ttl_ms, overlap = excluded.overlap, catch_up = excluded.catch_up, timeout_ms = excluded.timeout_ms,
           registered_by = excluded.registered_by, registered_at = now(), owner_role = coalesce(j.owner_role, excluded.owner_role)
     where (j.schedule, j.timezone, j.interval_ms, j.ttl_ms, j.overlap, j.catch_up, j.timeout_ms)
           is distinct from (excluded.schedule, excluded.timezone, excluded.interval_ms, excluded.ttl_ms, excluded.overlap,
                             excluded.catch_up, excluded.timeout_ms)
    returning j.name, j.schedule, j.ttl_ms, j.overlap, j.timeout_ms, xmax <> 0 as updated
  )
  insert into leasehold.actions (action, job, actor, detail)
  select 'job-changed', w.name, p_holder,
         jsonb_build_object('schedule', w.schedule, 'ttl_ms', w.ttl_ms, 'overlap', w.overlap, 'timeout_ms', w.timeout_ms)
    from written w where w.updated;
  -- last_slot_unstarted: claimed ahead by a holder gone before its start (killed in the lead); the
  -- starting worker's catch-up claims it again (a sole worker's slot ran nowhere otherwise)
  return query
  select l.name, l.last_slot, now(),
         leasehold.unstarted_ahead(l, (select s.started_through from leasehold.worker_starts s where s.holder_key = l.holder_key))
           and leasehold.is_free(l)
    from unnest(p_names) n(name) join leasehold.leases l on l.name = n.name;
end $$;

-- may_run: whether schedule_changes shows job j to a worker of role p_role: j is nobody's, p_role's,
-- a role's it is a member of (or p_role owns the schema or is a superuser); inside p_role's namespaces.
create function leasehold.may_run(p_role text, j leasehold.jobs) returns boolean
language sql stable as $$
  select to_regrole(quote_ident(p_role)) is not null and leasehold.may_act_as(j.owner_role, p_role)
     and leasehold.in_namespace(j.name, leasehold.namespace_prefixes(p_role));
$$;

-- live_runners: the live workers with j's handler that are shown j (not another service's namesake).
create function leasehold.live_runners(j leasehold.jobs) returns integer
language sql stable as $$
  select count(*)::integer from leasehold.worker_handlers w join leasehold.liveness_locks() k on k.key = w.worker_key
   where j.handler = any (w.handlers) and leasehold.may_run(w.role, j);
$$;

-- unhandled_schedules: the caller's live data jobs that no live runner has (each role's first worker records them missed).
create function leasehold.unhandled_schedules()
returns table (job text, handler text, schedule text, timezone text, interval_ms bigint, starting_deadline_ms bigint, since timestamptz, database_time timestamptz)
language sql stable as $$
  select j.name, j.handler, j.schedule, j.timezone, j.interval_ms, j.starting_deadline_ms,
         greatest(j.registered_at, (select l.last_slot from leasehold.leases l where l.name = j.name)), now()
    from leasehold.jobs j
   where j.source = 'data' and j.removed_at is null and j.paused_at is null
     and leasehold.may_act_as(j.owner_role) and leasehold.in_namespace(j.name, leasehold.namespace_prefixes())
     and leasehold.live_runners(j) = 0
   order by j.name limit 10000;
$$;

-- slot_to_answer: whether claim() has more to say of slot p_slot of lease l than "claimed already":
-- the job unknown (l null: a left join) or suspended, the slot not claimed yet, or claimed ahead
-- and never marked started (p_started_through: its holder's mark). SQL, inlined where it is used.
create function leasehold.slot_to_answer(l leasehold.leases, p_slot timestamptz, p_started_through timestamptz) returns boolean
language sql immutable as $$
  select l.name is null or l.suspended is not null or l.last_slot is null or p_slot > l.last_slot
      or (p_slot = l.last_slot and l.token is not null and l.run_slot = l.last_slot and l.acquired_at < l.run_slot
          and l.run_started_at > coalesce(p_started_through, '-infinity'));
$$;

-- unstarted_ahead: whether lease l's last slot was claimed ahead under a liveness key and never
-- marked started (p_started_through: its holder's mark, start_tick()): claim() takes such a slot
-- back at its slot once the lease is free, and register_jobs() and schedule_changes() tell a
-- starting worker so. SQL, inlined where it is used; never null.
create function leasehold.unstarted_ahead(l leasehold.leases, p_started_through timestamptz) returns boolean
language sql immutable as $$
  select coalesce(l.token is not null and l.holder_key is not null and l.run_slot = l.last_slot and l.run_fence = l.fence
                  and l.acquired_at < l.run_slot and l.run_started_at > coalesce(p_started_through, '-infinity'), false);
$$;

-- batch_token: the token of the p_n-th row of one claim() call: 16 bytes of SHA-256 over a seed of
-- 16 random bytes drawn once per call, and p_n. Unguessable without the seed, as a random uuid is;
-- one draw per call, not one per row (each gen_random_uuid() makes a system call: 3.5 us a row measured).
create function leasehold.batch_token(p_seed bytea, p_n bigint) returns uuid
language sql immutable as $$
  select encode(substr(sha256(p_seed || int8send(p_n)), 1, 16), 'hex')::uuid;
$$;

-- claim: the scheduler's claim (docs/sql-api.md): parallel arrays, a fixed number of set-based
-- statements for any number of jobs. Each slot is claimed at most once; a held lease records one
-- skip per (job, slot). A slot claimed ahead whose holder never marked its start (start_tick) is
-- claimed again at its slot once the lease is free: the holder's run is recorded aborted.
create function leasehold.claim(
  p_jobs text[], p_slots timestamptz[], p_ttl_ms bigint[], p_modes text[], p_caps integer[], p_holder text,
  p_holder_key bigint default null, p_every boolean default false, p_ahead_ms bigint default null, p_starts timestamptz[] default null
) returns table (
  job text, slot timestamptz, claimed boolean, reason text, token uuid, fence bigint, expires_at timestamptz,
  previous_slot timestamptz, holder text, holder_fence bigint, holder_slot timestamptz, holder_since timestamptz,
  skip_recorded boolean, buffered boolean, database_time timestamptz, took_over boolean
)
language plpgsql volatile
set lock_timeout = '2s'
set plan_cache_mode = force_custom_plan
set jit = off
-- lease rows are hot: by default 2,500 jobs were hashed against all 27,500 leases (24 ms, probes: 7)
set random_page_cost = 1.1
as $$
#variable_conflict use_column
declare
  v_asked_ttls interval[] := array(select t * interval '1 millisecond' from unnest(p_ttl_ms) t);
  v_ahead interval := p_ahead_ms * interval '1 millisecond';
  v_n integer := coalesce(cardinality(p_jobs), 0);
  -- what step 1 locked (v_slots: the slot claimed, a buffered one may come first; v_wanted: asked for)
  v_at integer[]; v_jobs text[]; v_slots timestamptz[]; v_wanted timestamptz[]; v_ttls interval[]; v_modes text[];
  v_caps integer[]; v_previous timestamptz[]; v_held boolean[]; v_fences bigint[]; v_new_fences bigint[];
  -- takeovers of a run in flight; grants not claim()'s (a run_log row may run); re-claims, refused ones
  v_taken_names text[]; v_taken_fences bigint[]; v_older text[];
  v_re_names text[]; v_re_fences bigint[]; v_re_keys bigint[]; v_re_starts timestamptz[]; v_refused text[];
  -- what step 3 claimed
  c_at integer[]; c_jobs text[]; c_slots timestamptz[]; c_tokens uuid[]; c_fences bigint[]; c_expires timestamptz[];
  c_previous timestamptz[]; c_held boolean[]; c_modes text[];
  v_epoch integer := leasehold.epoch();
  v_incarnation text := leasehold.liveness_incarnation(p_holder_key);
  v_queued boolean;
  v_seed bytea := uuid_send(gen_random_uuid()); -- the tokens of this call (batch_token)
begin
  perform leasehold.check_namespace(p_jobs);
  perform leasehold.check_job_owner(p_jobs); -- another service's jobs are not ours to run (a probe a job)
  perform leasehold.check_holder(p_holder);
  if p_ahead_ms is not null and (p_ahead_ms < 0 or p_ahead_ms > 10000) then
    raise exception 'claim: ahead_ms must be between 0 and 10000 (got %)', p_ahead_ms using errcode = '22023';
  end if;
  if p_starts is not null and cardinality(p_starts) <> v_n then
    raise exception 'claim: as many starts as jobs are needed (% jobs)', v_n using errcode = '22023';
  end if;
  perform leasehold.check_claim_requests(p_jobs, p_slots, v_asked_ttls, p_modes, p_caps);
  if v_n = 0 then return; end if;
  -- A second pass over the slots its peers claimed already (almost always every one): nothing to
  -- claim or report, found with one read of each lease instead of steps 1 and 4's two. The test
  -- is step 4's (slot_to_answer); step 1 claims no slot it leaves out.
  if not p_every and p_ahead_ms is null and not exists (
    select 1 from unnest(p_jobs, p_slots) i(job, slot) left join leasehold.leases l on l.name = i.job
     where leasehold.slot_to_answer(l, i.slot, (select s.started_through from leasehold.worker_starts s where s.holder_key = l.holder_key))) then
    return;
  end if;
  -- queued slots (buffered, catch-up): almost never; an empty table answers without a probe per job
  -- (and, in a statement of its own, without planning `= any (p_jobs)`: 3 ms for 10,000 jobs)
  v_queued := exists (select 1 from leasehold.buffered);
  if v_queued then v_queued := exists (select 1 from leasehold.buffered b where b.job = any (p_jobs)); end if;
  perform leasehold.pin_synchronous_commit();

  -- 1. Lock the rows this call may claim (SKIP LOCKED: workers share a tick's jobs; calls over the
  --    same jobs at once split them where their scans meet. No `order by random()`: it sorted
  --    every locked row, 1-2 us a job, for an order nothing needs).
  select coalesce(array_agg(x.at), '{}'), coalesce(array_agg(x.job), '{}'), coalesce(array_agg(x.claim_slot), '{}'),
         coalesce(array_agg(x.slot), '{}'), coalesce(array_agg(x.ttl), '{}'), coalesce(array_agg(x.mode), '{}'), coalesce(array_agg(x.cap), '{}'),
         coalesce(array_agg(x.last_slot), '{}'), coalesce(array_agg(x.held), '{}'), coalesce(array_agg(x.fence), '{}'),
         array_agg(x.job) filter (where x.run_slot is not null and x.mode <> 'allow' and not x.reclaim),
         array_agg(x.run_fence) filter (where x.run_slot is not null and x.mode <> 'allow' and not x.reclaim),
         array_agg(x.job) filter (where x.mode <> 'allow' and x.run_fence is distinct from x.fence),
         array_agg(x.job) filter (where x.reclaim), array_agg(x.fence) filter (where x.reclaim),
         array_agg(x.holder_key) filter (where x.reclaim), array_agg(x.run_started_at) filter (where x.reclaim)
    into v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_fences,
         v_taken_names, v_taken_fences, v_older, v_re_names, v_re_fences, v_re_keys, v_re_starts
    from (
      select w.at, w.job, w.claim_slot, w.slot, w.ttl, w.mode, w.cap,
             l.last_slot, l.token is not null as held, l.run_slot, l.run_fence, l.fence,
             l.holder_key, l.run_started_at, l.last_slot is not distinct from w.claim_slot as reclaim
        from leasehold.leases l
        left join leasehold.worker_starts s on s.holder_key = l.holder_key
        join (
          select i.at, i.job, i.slot, i.ttl, i.mode, i.cap,
                 case when not v_queued then i.slot else least(i.slot, coalesce(
                   (select min(b.slot) from leasehold.buffered b
                     where b.job = i.job
                       and b.slot > coalesce((select l2.last_slot from leasehold.leases l2 where l2.name = i.job), '-infinity')
                       -- a queued slot whose skip is final never runs: not in front of later ones
                       and not (i.mode = 'exclusive' and i.cap = 0
                                and exists (select 1 from leasehold.skips k where k.job = b.job and k.slot = b.slot))),
                   i.slot)) end as claim_slot
            from unnest(p_jobs, p_slots, v_asked_ttls, p_modes, p_caps) with ordinality as i(job, slot, ttl, mode, cap, at)
        ) w on w.job = l.name
       where case when v_ahead is null then w.claim_slot <= now()
                  -- ahead: due within v_ahead, from a lease free in the plainest sense
                  else w.claim_slot <= now() + v_ahead and w.claim_slot = w.slot and w.mode in ('exclusive', 'replace')
                       and l.token is null and l.run_slot is null and (l.run_fence = l.fence or l.fence = 0) end
         and l.suspended is null
         -- one CASE: the slot guard first, is_free() last (a slot claimed already asks nothing more)
         and case
               when l.last_slot is null or (w.slot > l.last_slot and w.claim_slot > l.last_slot)
                 then w.mode in ('replace', 'allow') or l.token is null or leasehold.is_free(l)
               -- the slot itself again: claimed ahead under a liveness key, never marked started,
               -- and the lease free (a re-claim is never a claim ahead)
               when v_ahead is not null or w.slot is distinct from l.last_slot or w.claim_slot <> w.slot or w.mode = 'allow'
                    or not leasehold.unstarted_ahead(l, s.started_through) then false
               else leasehold.is_free(l)
             end
         for update of l skip locked
    ) x;

  -- A re-claim, under the lock of the holder's worker_starts row (start_tick takes it too): a run
  -- marked started meanwhile is left to it; the others are taken (the latest planned start kept in
  -- taken_through for the holder's next mark) and their runs recorded aborted.
  if v_re_names is not null then
    insert into leasehold.worker_starts (holder_key, started_through)
    select distinct k, '-infinity'::timestamptz from unnest(v_re_keys) k order by 1
    on conflict do nothing;
    perform 1 from leasehold.worker_starts s where s.holder_key = any (v_re_keys) order by s.holder_key for update;
    select array_agg(r.name) into v_refused
      from unnest(v_re_names, v_re_keys, v_re_starts) r(name, key, planned)
      join leasehold.worker_starts s on s.holder_key = r.key
     where r.planned <= s.started_through;
  end if;

  -- 2. Leave out the refused re-claims, and before a takeover the slots with a final skip (a
  --    statement after the lock sees it; step 3 checks too, but the run recorded lost must be
  --    one of a row step 3 claims).
  if v_refused is not null or v_taken_names is not null or v_older is not null then
    select coalesce(array_agg(k.at), '{}'), coalesce(array_agg(k.job), '{}'), coalesce(array_agg(k.claim_slot), '{}'),
           coalesce(array_agg(k.wanted), '{}'), coalesce(array_agg(k.ttl), '{}'), coalesce(array_agg(k.mode), '{}'), coalesce(array_agg(k.cap), '{}'),
           coalesce(array_agg(k.previous_slot), '{}'), coalesce(array_agg(k.held), '{}'), coalesce(array_agg(k.fence), '{}')
      into v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_fences
      from unnest(v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_fences)
             k(at, job, claim_slot, wanted, ttl, mode, cap, previous_slot, held, fence)
     where not (k.job = any (coalesce(v_refused, '{}')))
       and not ((v_taken_names is not null or v_older is not null) and k.mode = 'exclusive' and k.cap = 0
                and exists (select 1 from leasehold.skips s where s.job = k.job and s.slot = k.claim_slot));
  end if;
  if v_refused is not null then
    select array_agg(r.name), array_agg(r.fence), array_agg(r.key), array_agg(r.planned)
      into v_re_names, v_re_fences, v_re_keys, v_re_starts
      from unnest(v_re_names, v_re_fences, v_re_keys, v_re_starts) r(name, fence, key, planned)
     where not (r.name = any (v_refused));
  end if;
  if v_re_names is not null then
    update leasehold.worker_starts s
       set taken_through = greatest(s.taken_through, m.planned), updated_at = now()
      from (select r.key, max(r.planned) as planned from unnest(v_re_keys, v_re_starts) r(key, planned) group by r.key) m
     where s.holder_key = m.key;
    perform leasehold.end_runs(v_re_names, null, v_re_fences, array_fill('aborted'::text, array[cardinality(v_re_names)]), array_fill(
      'not started: its lease was free (expired, or its holder gone) before the start; run by ' || p_holder, array[cardinality(v_re_names)]), null);
  end if;

  -- A takeover: the run in flight, and a run_log row still running under an older grant, end lost.
  if v_taken_names is not null then
    perform leasehold.end_runs(
      array(select t.name from unnest(v_taken_names, v_taken_fences) t(name, fence) where t.name = any (v_jobs)), null,
      array(select t.fence from unnest(v_taken_names, v_taken_fences) t(name, fence) where t.name = any (v_jobs)),
      array_fill('lost'::text, array[cardinality(v_taken_names)]), array_fill('lease taken over by ' || p_holder, array[cardinality(v_taken_names)]), null);
  end if;
  if v_older is not null then
    update leasehold.run_log r set outcome = 'lost', finished_at = now(), error = 'lease taken over by ' || p_holder
     where r.job = any (v_older) and r.job = any (v_jobs) and r.outcome = 'running';
  end if;

  -- 3. Claim what is locked and still claimable. A skip recorded under overlap 'skip' is final:
  --    this snapshot, after the locks, sees every skip a peer committed before step 1's lock.
  v_new_fences := leasehold.fences_after(v_fences, v_epoch);
  with claiming as (
    select k.at, k.job as name, k.claim_slot, k.wanted as wanted_slot, k.ttl, k.mode, k.cap, k.previous_slot, k.held, k.new_fence
      from unnest(v_at, v_jobs, v_slots, v_wanted, v_ttls, v_modes, v_caps, v_previous, v_held, v_new_fences)
             k(at, job, claim_slot, wanted, ttl, mode, cap, previous_slot, held, new_fence)
     where not (k.mode = 'exclusive' and k.cap = 0 and exists (select 1 from leasehold.skips s where s.job = k.job and s.slot = k.claim_slot))
  ),
  -- under overlap 'allow' only the fence and the slot change; every other claim takes the lease
  claimed_lease as (
    update leasehold.leases l
       set fence = c.new_fence, last_slot = c.claim_slot, token = leasehold.batch_token(v_seed, c.at), holder = p_holder,
           holder_key = p_holder_key, acquired_at = now(), expires_at = now() + c.ttl, released_at = null, ttl = c.ttl,
           epoch = v_epoch, holder_incarnation = v_incarnation,
           -- the run, until finish_runs() writes its history row; it starts now, or ahead at its plan
           run_slot = c.claim_slot, run_fence = c.new_fence, run_holder = p_holder,
           run_started_at = case when v_ahead is null then clock_timestamp()
                                 else greatest(clock_timestamp(), coalesce(p_starts[c.at], c.claim_slot), c.claim_slot) end
      from claiming c
     where l.name = c.name and c.mode <> 'allow'
    returning c.at, l.name, c.claim_slot, c.wanted_slot, c.cap, c.mode, l.token, l.fence, l.expires_at, c.previous_slot, c.held
  ),
  claimed_allow as (
    update leasehold.leases l set fence = c.new_fence, last_slot = c.claim_slot
      from claiming c where l.name = c.name and c.mode = 'allow'
    returning c.at, l.name, c.claim_slot, c.wanted_slot, c.cap, c.mode, l.token, l.fence, l.expires_at, c.previous_slot, c.held
  ),
  claimed as (select * from claimed_lease union all select * from claimed_allow),
  unbuffered as (
    delete from leasehold.buffered b using claimed c where v_queued and b.job = c.name and b.slot <= c.claim_slot
  ),
  rebuffered as (
    insert into leasehold.buffered (job, slot)
    select c.name, c.wanted_slot from claimed c
     where v_queued and c.claim_slot < c.wanted_slot
       and (select count(*) from leasehold.buffered b where b.job = c.name and b.slot > c.claim_slot) < c.cap
    on conflict do nothing
  )
  select coalesce(array_agg(c.at), '{}'), coalesce(array_agg(c.name), '{}'), coalesce(array_agg(c.claim_slot), '{}'),
         coalesce(array_agg(c.token), '{}'), coalesce(array_agg(c.fence), '{}'), coalesce(array_agg(c.expires_at), '{}'),
         coalesce(array_agg(c.previous_slot), '{}'), coalesce(array_agg(c.held), '{}'), coalesce(array_agg(c.mode), '{}')
    into c_at, c_jobs, c_slots, c_tokens, c_fences, c_expires, c_previous, c_held, c_modes
    from claimed c;

  -- overlap 'allow': a run_log row from the start (own statement: no run_log trigger otherwise)
  if 'allow' = any (c_modes) then
    insert into leasehold.run_log (job, slot, fence, holder)
    select k.job, k.slot, k.fence, p_holder from unnest(c_jobs, c_slots, c_fences, c_modes) k(job, slot, fence, mode) where k.mode = 'allow';
  end if;

  return query
  select k.job, k.slot, true, 'claimed'::text, case when k.mode <> 'allow' then k.token end, k.fence,
         case when k.mode <> 'allow' then k.expires end, k.previous_slot, p_holder, null::bigint, null::timestamptz,
         null::timestamptz, false, false, now(), k.mode <> 'allow' and k.held
    from unnest(c_jobs, c_slots, c_tokens, c_fences, c_expires, c_previous, c_held, c_modes) k(job, slot, token, fence, expires, previous_slot, held, mode);
  if v_ahead is not null then return; end if; -- the rest is the claim at the slot's

  -- 4. Everything not claimed: say why, record a skip once per slot, buffer it if the policy says
  --    so. Without p_every, a slot already claimed is passed over before anything is asked.
  return query
  with pending as (
    select i.job, i.slot, i.mode, i.cap, l.holder as l_holder, l.fence as l_fence,
           -- the slot of the run holding the lease (a backfill's, say), not the last scheduled one
           case when l.token is null or l.run_fence = l.fence then coalesce(l.run_slot, l.last_slot)
                else coalesce((select r.slot from leasehold.run_log r where r.job = l.name and r.fence = l.fence and r.outcome = 'running'),
                              l.last_slot) end as l_holder_slot,
           l.acquired_at as l_acquired_at, l.expires_at as l_expires_at,
           exists (select 1 from leasehold.skips k where k.job = i.job and k.slot = i.slot) as skip_exists,
           case
             when l.name is null then 'unknown-job'
             when l.suspended = 'paused' then 'paused'
             when l.suspended = 'removed' then 'removed'
             when i.slot > now() then 'slot-not-due'
             -- claimed ahead, not started: ask again when the lease expires
             when i.slot = l.last_slot and i.mode <> 'allow' and leasehold.unstarted_ahead(l, s.started_through)
               then case when leasehold.is_free(l) then 'holder-committing' else 'held-ahead' end
             when l.last_slot is not null and i.slot <= l.last_slot then 'slot-taken'
             when i.mode = 'exclusive' and i.cap = 0
                  and exists (select 1 from leasehold.skips k where k.job = i.job and k.slot = i.slot) then 'slot-skipped'
             -- replace and allow only fail on a row lock: a transient state, not a skip
             when i.mode in ('replace', 'allow') then 'holder-committing'
             when not leasehold.is_free(l) then 'held'
             else 'holder-committing'
           end as why
      from unnest(p_jobs, p_slots, p_modes, p_caps) with ordinality as i(job, slot, mode, cap, at)
      left join leasehold.leases l on l.name = i.job
      left join leasehold.worker_starts s on s.holder_key = l.holder_key
     where i.at not in (select k.at from unnest(c_at) k(at))
       and (p_every or leasehold.slot_to_answer(l, i.slot, s.started_through))
  ),
  -- held, as the newest row version says under a lock no claim passes (a row locked or changed
  -- meanwhile: holder-committing); a slot whose skip is recorded takes no lock, no xid
  held as (
    select p.job, p.slot, p.cap, l.holder, l.fence, p.l_holder_slot as holder_slot, l.acquired_at
      from pending p join leasehold.leases l on l.name = p.job
     where p.why = 'held' and not p.skip_exists
       and (l.last_slot is null or p.slot > l.last_slot)
       and not leasehold.is_free(l)
       for share of l skip locked
  ),
  skipped as (
    insert into leasehold.skips (job, slot, holder, holder_fence, holder_slot, held_for, recorded_by)
    select h.job, h.slot, h.holder, h.fence, h.holder_slot, now() - h.acquired_at, p_holder from held h
    on conflict do nothing
    returning skips.job, skips.slot
  ),
  buffering as (
    insert into leasehold.buffered (job, slot)
    select h.job, h.slot from held h where h.cap > 0 and (select count(*) from leasehold.buffered b where b.job = h.job) < h.cap
    on conflict do nothing
    returning buffered.job, buffered.slot
  ),
  answered as (
    select p.job, p.slot,
           case when p.why = 'held' and not p.skip_exists and not exists (select 1 from held h where h.job = p.job)
                then 'holder-committing' else p.why end as why,
           p.l_holder, p.l_fence, p.l_holder_slot, p.l_acquired_at, p.l_expires_at,
           exists (select 1 from skipped s where s.job = p.job and s.slot = p.slot) as skip_recorded,
           exists (select 1 from buffering b where b.job = p.job and b.slot = p.slot) as buffered
      from pending p
  )
  select a.job, a.slot, false, a.why, null::uuid, null::bigint, case when a.why = 'held-ahead' then a.l_expires_at end,
         null::timestamptz, a.l_holder, a.l_fence, a.l_holder_slot, a.l_acquired_at, a.skip_recorded, a.buffered, now(), false
    from answered a
   where p_every or a.why not in ('slot-taken', 'slot-skipped', 'held') or a.skip_recorded or a.buffered;
end $$;

-- start_tick: before starting them, a worker marks the runs it claimed ahead planned by p_through
-- as started. False: a peer may have claimed one again.
create function leasehold.start_tick(p_holder_key bigint, p_through timestamptz) returns boolean
language plpgsql volatile
set lock_timeout = '2s'
as $$
declare
  v_old timestamptz; v_taken timestamptz; v_n integer;
begin
  if p_holder_key is null or p_through is null then
    raise exception 'start_tick: holder_key and through must not be null' using errcode = '22023';
  end if;
  perform leasehold.pin_synchronous_commit();
  insert into leasehold.worker_starts (holder_key, started_through) values (p_holder_key, '-infinity') on conflict do nothing;
  get diagnostics v_n = row_count;
  select w.started_through, w.taken_through into v_old, v_taken from leasehold.worker_starts w where w.holder_key = p_holder_key for update;
  update leasehold.worker_starts w set started_through = greatest(w.started_through, p_through, clock_timestamp()), updated_at = now()
   where w.holder_key = p_holder_key;
  -- once per key: rows of dead keys unchanged for a week go
  if v_n > 0 then
    delete from leasehold.worker_starts w
     where w.updated_at < now() - interval '7 days' and not exists (select 1 from leasehold.liveness_locks() k where k.key = w.holder_key);
  end if;
  return v_taken is null or v_taken <= v_old;
end $$;

-- report_share: the worker of p_holder_key decided every slot of its share of a tick (claimed,
-- held, taken: nothing left to retry); the share's digest is p_jobs (job, slot) pairs and two sums
-- of a hash of each pair (docs/sql-api.md). Replaces the key's previous report.
create function leasehold.report_share(p_holder_key bigint, p_jobs integer, p_sum_a bigint, p_sum_b bigint) returns void
language plpgsql volatile as $$
declare
  v_first boolean;
begin
  if p_holder_key is null or p_jobs is null or p_jobs < 1 or p_sum_a is null or p_sum_b is null then
    raise exception 'report_share: holder_key, jobs (1 or more) and both sums are needed' using errcode = '22023';
  end if;
  insert into leasehold.share_reports as r (holder_key, jobs, sum_a, sum_b, reported_by)
  values (p_holder_key, p_jobs, p_sum_a, p_sum_b, session_user)
  on conflict (holder_key) do update
     set jobs = excluded.jobs, sum_a = excluded.sum_a, sum_b = excluded.sum_b, reported_by = excluded.reported_by, reported_at = now()
  returning r.xmax = 0 into v_first;
  -- once per key: the reports of keys no longer live go
  if v_first then
    delete from leasehold.share_reports r
     where r.holder_key <> p_holder_key and not exists (select 1 from leasehold.liveness_locks() k where k.key = r.holder_key);
  end if;
end $$;

-- reported_shares: which of p_holder_keys reported (report_share) exactly the share the caller
-- expects of it (element i: p_jobs pairs, the two sums), from a live key and the caller's own login
-- role. Another role's report, or a dead worker's, never spares a peer its second pass.
create function leasehold.reported_shares(p_holder_keys bigint[], p_jobs integer[], p_sums_a bigint[], p_sums_b bigint[]) returns table (holder_key bigint)
language sql stable as $$
  select r.holder_key
    from unnest(p_holder_keys, p_jobs, p_sums_a, p_sums_b) as e(key, jobs, a, b)
    join leasehold.share_reports r on r.holder_key = e.key and r.jobs = e.jobs and r.sum_a = e.a and r.sum_b = e.b
   where r.reported_by = session_user::text and r.holder_key in (select k.key from leasehold.liveness_locks() k);
$$;

-- enqueue_slots: queues slots after last_slot, run in order as the lease is free (catch-up all).
create function leasehold.enqueue_slots(p_job text, p_slots timestamptz[]) returns integer
language sql volatile as $$
  select leasehold.check_namespace(array[p_job]);
  select leasehold.check_job_owner(array[p_job]);
  select leasehold.check_name(p_job);
  with inserted as (
    insert into leasehold.buffered (job, slot)
    select p_job, s from unnest(p_slots) as s where s > coalesce((select l.last_slot from leasehold.leases l where l.name = p_job), '-infinity')
    on conflict do nothing
    returning 1)
  select count(*)::integer from inserted;
$$;

-- record_missed_slots: in one statement (after a downtime every job has some); not the slots that
-- ran, were skipped or lie in a clock step.
create function leasehold.record_missed_slots(p_jobs text[], p_slots timestamptz[], p_reason text, p_holder text)
returns table (job text, slot timestamptz)
language sql volatile
set plan_cache_mode = force_custom_plan
set jit = off
as $$
  select leasehold.check_namespace(p_jobs);
  select leasehold.check_job_owner(p_jobs);
  select leasehold.check_holder(p_holder), leasehold.check_holder(p_reason);
  select leasehold.check_name(j) from unnest(p_jobs) j where j is not null;
  insert into leasehold.missed as m (job, slot, reason, recorded_by)
  select i.job, i.slot, p_reason, p_holder from unnest(p_jobs, p_slots) as i(job, slot)
   where i.job is not null and i.slot is not null
     and not exists (select 1 from leasehold.skips k where k.job = i.job and k.slot = i.slot)
     and not exists (select 1 from leasehold.runs r where r.job = i.job and r.slot = i.slot)
     and not exists (select 1 from leasehold.clock_steps w where i.slot > w.from_time and i.slot <= w.to_time)
  on conflict do nothing
  returning m.job, m.slot;
$$;

-- run_timed_out: the deadline rule of holds_lease: the run granted at p_acquired_at outlived the job's timeout.
create function leasehold.run_timed_out(p_job text, p_acquired_at timestamptz) returns boolean
language sql stable as $$
  select exists (select 1 from leasehold.jobs j
                  where j.name = p_job and j.timeout_ms is not null and now() >= p_acquired_at + j.timeout_ms * interval '1 millisecond');
$$;

create trigger jobs_revision BEFORE INSERT OR UPDATE ON leasehold.jobs FOR EACH ROW EXECUTE FUNCTION leasehold.jobs_revision();
create trigger jobs_notify AFTER INSERT OR UPDATE ON leasehold.jobs FOR EACH STATEMENT EXECUTE FUNCTION leasehold.notify_changes('jobs');
