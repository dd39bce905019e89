-- leasehold migration 0020: a stored clock step window also clears the missed slots inside it.
--
-- Additive: record_clock_step() keeps its arguments and result. Until now the rule "slots a
-- forward step of the database clock jumped over are never recorded missed" held only when the
-- window was stored before anyone asked record_missed() about those slots. A worker that did not
-- see the step itself (started a moment before it, its clock not sampled across it) claims the
-- first slot after the step, finds the job's previous slot minutes back, and records every slot
-- in between as missed; the workers that did see the step store its window a few milliseconds
-- later, at their own next claim. The fault suite's replicated tier found it: 200 slots of a
-- +240 s step recorded missed by a worker spawned 1.5 s before the step.
--
-- Now storing (or widening) a window deletes the missed rows inside it, so the result no longer
-- depends on which worker spoke first: the history ends as if the window had been stored first.
-- Only rows recorded after the window's start are touched (a slot inside the window can only be
-- recorded once the database clock has passed it, that is after the step); rows of earlier
-- downtime stay.

create or replace function leasehold.record_clock_step(p_from timestamptz, p_to timestamptz, p_holder text)
returns boolean
language plpgsql volatile
-- a custom plan per call: a generic one would not know how recent the window is, and read all of missed
set plan_cache_mode = force_custom_plan
as $$
declare
  v_new  boolean;
  v_from timestamptz;
  v_to   timestamptz;
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
  v_new := not found;
  if v_new then
    insert into leasehold.clock_steps (from_time, to_time, recorded_by) values (p_from, p_to, p_holder);
    -- bounded: the oldest windows go (their slots are long recorded or pruned)
    delete from leasehold.clock_steps
     where id <= (select id from leasehold.clock_steps order by id desc offset 1000 limit 1);
  end if;
  -- The slots of the window (as merged with the stored ones it overlaps: one interval) never
  -- existed: delete what record_missed() would have refused had the window been here first.
  -- Bounds as values, so that the BRIN index on recorded_at reads only the rows recorded since
  -- the step began, however long the missed history is.
  select min(w.from_time), max(w.to_time) into v_from, v_to
    from leasehold.clock_steps w
   where w.from_time <= p_to and p_from <= w.to_time;
  delete from leasehold.missed m
   where m.recorded_at >= v_from and m.slot > v_from and m.slot <= v_to;
  return v_new;
end $$;
