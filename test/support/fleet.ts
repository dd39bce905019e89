// A fleet of 10,000 scheduled jobs (or `size`) with 24 hours of history, written with set-based
// SQL, for the dashboard's scale test and its benchmark. Job names are fleet-00001 … fleet-10000.
//
// - fleet-00001 … 00050: every minute (1,440 runs each in 24 h);
// - fleet-00051 … 01000: every 15 minutes (96 runs each);
// - the rest: hourly (24 runs each);
// every 7th run fails, every 50th is lost, every 40th job is running now, every 97th lease has
// expired, every 13th job has a skip and every 29th a missed slot in the last hour.
import type pg from 'pg';

export const FLEET_SIZE = 10_000;

export async function seedFleet(db: pg.Pool | pg.ClientBase, size = FLEET_SIZE): Promise<void> {
  if (!Number.isInteger(size) || size < 1 || size > 99_999) throw new RangeError(`fleet size must be 1 to 99,999 (got ${size})`);
  await db.query(`
    insert into leasehold.jobs (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
    select 'fleet-' || lpad(g::text, 5, '0'),
           case when g <= 50 then '1m' when g <= 1000 then '*/15 * * * *' else '0 * * * *' end,
           null,
           case when g <= 50 then 60000 when g <= 1000 then 900000 else 3600000 end,
           60000, 'skip', 'latest', 'seed'
      from generate_series(1, ${size}) g;

    insert into leasehold.leases (name, token, fence, holder, holder_key, acquired_at, expires_at, last_slot)
    select 'fleet-' || lpad(g::text, 5, '0'),
           case when g % 40 = 0 or g % 97 = 0 then gen_random_uuid() end,
           100000 + g,
           case when g % 40 = 0 or g % 97 = 0 then 'worker-' || (g % 7) end,
           null,
           case when g % 40 = 0 or g % 97 = 0 then now() - interval '20 seconds' end,
           case when g % 97 = 0 then now() - interval '5 seconds' when g % 40 = 0 then now() + interval '1 hour' end,
           date_trunc('hour', now())
      from generate_series(1, ${size}) g;

    insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome, error)
    select j.name, s.slot, s.n, 'worker-' || (s.n % 7), s.slot + interval '1 second',
           s.slot + interval '1 second' + make_interval(secs => 2 + (s.n % 11)),
           case when s.n % 50 = 0 then 'lost' when s.n % 7 = 0 then 'failed' else 'succeeded' end,
           case when s.n % 50 = 0 then 'lease expired' when s.n % 7 = 0 then 'Error: upstream returned 503' end
      from leasehold.jobs j,
           lateral (select k as n, date_trunc('minute', now()) - make_interval(secs => k * j.interval_ms / 1000.0) as slot
                      from generate_series(1, (86400000 / j.interval_ms)::int) k) s
     where j.name like 'fleet-%';

    insert into leasehold.skips (job, slot, holder, holder_fence, holder_slot, held_for, recorded_by)
    select 'fleet-' || lpad(g::text, 5, '0'), date_trunc('minute', now()) - interval '20 minutes', 'worker-3', 5, null, interval '70 seconds', 'worker-4'
      from generate_series(13, ${size}, 13) g;
    insert into leasehold.missed (job, slot, reason, recorded_by)
    select 'fleet-' || lpad(g::text, 5, '0'), date_trunc('minute', now()) - interval '30 minutes', 'no worker claimed it in time', 'seed'
      from generate_series(29, ${size}, 29) g;
    analyze leasehold.runs; analyze leasehold.jobs; analyze leasehold.leases;
  `);
}
