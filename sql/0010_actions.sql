-- leasehold migration 0010: who did what to a job.
--
-- Additive. Schedules defined at run time, pauses and resumes, manual runs and backfills are
-- acts of an application or a person, not steps of the protocol. Each is recorded once, here,
-- by the function that performs it, in the same transaction: with the name the caller gave
-- (p_by: 'alice', 'billing-api') and the login role that called it, which the caller cannot
-- choose (session_user: the functions run as their owner once secure_schema() has run, so
-- current_user would name the owner).

create table leasehold.actions (
  id       bigint generated always as identity primary key,
  at       timestamptz not null default now(),
  action   text not null,
  job      text,
  actor    text not null,
  db_role  text not null default session_user,
  detail   jsonb not null default '{}'::jsonb
);
comment on table leasehold.actions is
  'Acts on jobs by applications and operators (defined, removed, paused, resumed, run now, backfill): who, when, what.';
create index actions_job_at on leasehold.actions (job, at desc);
create index actions_at_brin on leasehold.actions using brin (at) with (pages_per_range = 32);

-- record_action: one row per act. p_by is checked like a holder name (1-200 characters, no
-- control or invisible characters): it ends up in logs and on the dashboard.
create function leasehold.record_action(p_action text, p_job text, p_by text, p_detail jsonb default '{}'::jsonb)
returns bigint
language plpgsql volatile as $$
declare
  v_id bigint;
begin
  perform leasehold.check_holder(p_by);
  insert into leasehold.actions (action, job, actor, detail)
  values (p_action, p_job, p_by, coalesce(p_detail, '{}'::jsonb))
  returning id into v_id;
  return v_id;
end $$;

insert into leasehold.access (object, level) values
  ('actions', 'reader'),
  -- a step of the functions that perform the acts, never called directly
  ('record_action', 'owner');
