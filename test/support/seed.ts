// A seeded history for the operator surfaces (status, runs, metrics, dashboard): written with
// SQL into the tables the runtime writes, at times relative to the database's now().
import type pg from 'pg';

/**
 * Jobs:
 * - "report": every 60 s, 20 succeeded runs of ~50 s (p95 > 80% of the interval: creeping),
 *   one failed run, 3 skips held by worker-b, currently running (held by worker-a);
 * - "cleanup": every 5 min, 10 quick succeeded runs, one lost run, 2 missed slots; idle.
 */
export async function seedHistory(db: pg.Pool | pg.ClientBase): Promise<void> {
  await db.query(`
    insert into leasehold.jobs (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
    values ('report', '1m', null, 60000, 30000, 'skip', 'latest', 'seed'),
           ('cleanup', '*/5 * * * *', 'Europe/Berlin', 300000, 30000, 'buffer-one', 'latest', 'seed')
    on conflict (name) do nothing;

    insert into leasehold.leases (name, token, fence, holder, acquired_at, expires_at, last_slot)
    values ('report', gen_random_uuid(), 23, 'worker-a', now() - interval '40 seconds', now() + interval '20 seconds',
            date_trunc('minute', now()) - interval '1 minute'),
           ('cleanup', null, 11, 'worker-b', now() - interval '4 minutes', null, date_trunc('minute', now()) - interval '5 minutes')
    on conflict (name) do nothing;

    insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome, error)
    select 'report', s.slot, 1 + g, case when g % 2 = 0 then 'worker-a' else 'worker-b' end,
           s.slot + interval '1 second', s.slot + interval '1 second' + make_interval(secs => 45 + (g % 8)),
           'succeeded', null
      from generate_series(1, 20) g,
           lateral (select date_trunc('minute', now()) - make_interval(mins => 60 - g * 2) as slot) s;
    insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome, error)
    values ('report', date_trunc('minute', now()) - interval '10 minutes', 22, 'worker-b',
            date_trunc('minute', now()) - interval '10 minutes' + interval '1 second',
            date_trunc('minute', now()) - interval '10 minutes' + interval '12 seconds', 'failed', 'Error: upstream returned 503'),
           ('report', date_trunc('minute', now()) - interval '1 minute', 23, 'worker-a',
            now() - interval '40 seconds', null, 'running', null);

    insert into leasehold.skips (job, slot, holder, holder_fence, holder_slot, held_for, recorded_by)
    select 'report', date_trunc('minute', now()) - make_interval(mins => m), 'worker-b', 20,
           date_trunc('minute', now()) - make_interval(mins => m + 1), interval '65 seconds', 'worker-c'
      from (values (3), (5), (7)) v(m);

    insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome, error)
    select 'cleanup', date_trunc('minute', now()) - make_interval(mins => 5 * g), g, 'worker-b',
           date_trunc('minute', now()) - make_interval(mins => 5 * g) + interval '1 second',
           date_trunc('minute', now()) - make_interval(mins => 5 * g) + interval '3 seconds',
           case when g = 4 then 'lost' else 'succeeded' end,
           case when g = 4 then 'lease taken over by worker-c' end
      from generate_series(1, 11) g;

    insert into leasehold.missed (job, slot, reason, recorded_by)
    values ('cleanup', date_trunc('minute', now()) - interval '65 minutes', 'no worker claimed it in time', 'seed'),
           ('cleanup', date_trunc('minute', now()) - interval '70 minutes', 'no worker claimed it in time', 'seed');
  `);
}
