-- leasehold migration 0021: the live workers' list names scheduler workers only.
--
-- Additive: two new functions; register_liveness() and liveness_locks() are unchanged.
-- A worker claims its hash share of a tick first and the other workers' shares after a short
-- delay; which workers are alive it read from liveness_locks(), that is from every exclusive
-- bigint advisory lock in the database. That list also named sessions that are not workers:
-- plain clients' liveness sessions (a web process that only calls run(), `leasehold exec`), an
-- application's own advisory locks (migration tools hold one while they run), and this
-- schema's own transaction-level locks (register_jobs' revision lock while a worker starts).
-- Each such session took a share no worker claimed first: at 10,000 jobs on 4 workers, a worker
-- that started while a peer was registering split by 5 and left 2,000 slots a tick to the
-- second pass, up to 2 s late; an application's lock held for a deploy did so every tick.
--
-- Now a worker registers with register_worker_liveness(): a liveness key like any other
-- (liveness_locks(), holder_gone() and lease_status see it; leases taken under it are freed at
-- once when its session ends), drawn from the range whose bits 47-62 are worker_key_tag().
-- worker_keys() lists the live keys of that range. Another session lands in it only by taking
-- an advisory lock in that range (1 in 65,536 of random keys); none of this schema's fixed
-- lock keys is in it. Workers of an older library still register with register_liveness():
-- newer workers leave them out of their list, which moves their shares to the second pass
-- while both versions run, never a slot to two workers (the database decides each claim).

-- The tag of worker liveness keys (bits 47-62); 'LH'. Private: the two functions below use it.
create function leasehold.worker_key_tag() returns bigint
language sql immutable as $$
  select 19528::bigint;
$$;

-- register_worker_liveness: register_liveness() for a scheduler worker. Run once on the
-- worker's dedicated session; the key it returns is used as register_liveness()'s is.
create function leasehold.register_worker_liveness() returns bigint
language plpgsql volatile as $$
declare
  k bigint;
begin
  loop
    k := (leasehold.worker_key_tag() << 47) | floor(random() * 140737488355328)::bigint;
    if pg_try_advisory_lock(k) then
      return k;
    end if;
  end loop;
end $$;

-- worker_keys: the liveness keys of the workers alive in this database right now.
create function leasehold.worker_keys() returns table (pid integer, key bigint)
language sql volatile as $$
  select k.pid, k.key from leasehold.liveness_locks() k where k.key >> 47 = leasehold.worker_key_tag();
$$;

insert into leasehold.access (object, level) values
  ('worker_key_tag', 'owner'), ('register_worker_liveness', 'client'), ('worker_keys', 'reader');
