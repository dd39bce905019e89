-- leasehold migration 0023: fences that stay unique when two standbys are promoted one after
-- the other, each on its own fork of history.
--
-- Additive for callers: every function keeps its arguments and rows; only the values of the
-- fences granted after a promotion change (they are larger).
--
-- Until now a grant on timeline t started its fences at (t - 1) << 40. The timeline number is
-- unique along one line of history, not across forks: a primary P with two standbys, P dies, S1
-- is promoted (timeline 2) and grants, S1 dies before S2 followed it, S2 is promoted - also
-- timeline 2, since it never saw S1's history - and grants the same fence again.
--
-- Now each fork has a base of its own, fixed by the first grant on it and kept in
-- leasehold.forks: the database clock at that grant, in milliseconds since 2020, times 1024
-- (and never below the old (t - 1) << 40). A fork's rows are replicated with it, so a server
-- finds its own timeline's row exactly when it is on the fork that wrote it: a server promoted
-- from another line of history has no row for its timeline yet and makes one. A later fork's
-- base is above every fence of an earlier one as long as the later fork's first grant reads a
-- later clock than the earlier fork's last grant (a promotion follows the old primary's death
-- by seconds; the servers' clocks agree to milliseconds) and no name was granted more than
-- 1,024 times a millisecond. Along one line of history greatest(old + 1, base) keeps every
-- name's fences growing whatever the clocks say. Timeline 1 has no fork and keeps 1, 2, 3, ...
-- Fences stay below 2^53 until 2298.

create table leasehold.forks (
  timeline   integer primary key,
  base       bigint not null,
  first_grant timestamptz not null default now()
);
comment on table leasehold.forks is
  'The fence base of each timeline this line of history has granted on: fixed at its first grant (see sql/0023_fork_epochs.sql).';

-- fork_base: the fence base of timeline p_timeline on this server's line of history, made at
-- the first grant on it. 0 on timeline 1.
create function leasehold.fork_base(p_timeline integer) returns bigint
language plpgsql volatile as $$
declare
  v_base bigint;
begin
  if p_timeline <= 1 then
    return 0;
  end if;
  select f.base into v_base from leasehold.forks f where f.timeline = p_timeline;
  if found then
    return v_base;
  end if;
  -- concurrent first grants: one row wins, and both read it (do update returns the existing row)
  insert into leasehold.forks as f (timeline, base)
  values (p_timeline,
          greatest((p_timeline - 1)::bigint << 40,
                   ((extract(epoch from now()) * 1000)::bigint - 1577836800000) * 1024))
  on conflict (timeline) do update set base = f.base
  returning f.base into v_base;
  return v_base;
end $$;

-- fences_after: the one rule for every new fence (next_fence, fence_after, every claim).
create or replace function leasehold.fences_after(p_old bigint[], p_epoch integer) returns bigint[]
language sql volatile as $$
  select coalesce(array_agg(greatest(coalesce(o.old, 0) + 1, b.base) order by o.n), '{}')
    from (select leasehold.fork_base(p_epoch) as base) b, unnest(p_old) with ordinality as o(old, n);
$$;

create or replace function leasehold.fence_after(p_old bigint, p_epoch integer) returns bigint
language sql volatile as $$
  select (leasehold.fences_after(array[p_old], p_epoch))[1];
$$;

insert into leasehold.access (object, level) values ('forks', 'owner'), ('fork_base', 'owner');
