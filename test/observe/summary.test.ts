// leasehold.fleet_summary() (sql/baseline/5_reads.sql) answers from per-minute run counts and the
// jobs that had a slow run, kept by statement triggers on runs. Its numbers must be what a pass
// over a day of runs gives, after every way runs change: claims and finishes on several
// connections at once (several shards), rows written finished in one go, updates, prune
// deletes, the window's edge minute, a ring bucket still holding a minute 25 hours old, and a
// TRUNCATE (repaired by refresh_run_counts()).
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { fleetSummary } from '../../src/monitor/queries.js';
import { CREEP_WARNING_RATIO } from '../../src/monitor/status.js';
import { client, connections, freshDatabase, rawPool } from '../support/db.js';

let url: string;
let owner: pg.Pool;

// The definition, as the schema-13 summary computed it: one pass over 24 h of runs.
const DIRECT = `
with recent as (
  select job, percentile_cont(0.95) within group (order by extract(epoch from finished_at - started_at)) as p95
    from leasehold.runs where finished_at is not null and started_at > now() - interval '24 hours' group by job
), ratios as (
  select r.p95 * 1000 / j.interval_ms as ratio from recent r join leasehold.jobs j on j.name = r.job where j.interval_ms > 0
)
select (select count(*) from leasehold.jobs)::int as jobs,
       (select count(*) from leasehold.jobs j join leasehold.lease_status l on l.name = j.name where l.state = 'held')::int as running,
       (select count(*) from leasehold.jobs j join leasehold.lease_status l on l.name = j.name where l.state = 'expired')::int as expired,
       (select count(distinct r.job) from leasehold.runs r join leasehold.jobs j on j.name = r.job
         where r.outcome in ('failed', 'lost', 'timed-out') and r.finished_at is not null and r.started_at > now() - interval '24 hours')::int as failing,
       (select count(*) from ratios where ratio >= $1 and ratio < 1)::int as creeping,
       (select count(*) from ratios where ratio >= 1)::int as over_interval,
       (select count(*) from leasehold.runs where finished_at is not null and started_at > now() - interval '24 hours')::int as runs_24h,
       (select count(*) from leasehold.runs where outcome = 'failed' and finished_at is not null and started_at > now() - interval '24 hours')::int as failed_24h,
       (select count(*) from leasehold.runs where outcome = 'lost' and finished_at is not null and started_at > now() - interval '24 hours')::int as lost_24h,
       (select count(*) from leasehold.skips where recorded_at > now() - interval '24 hours')::int as skips_24h,
       (select count(*) from leasehold.missed where recorded_at > now() - interval '24 hours')::int as missed_24h,
       (select count(*) from leasehold.runs where outcome = 'timed-out' and finished_at is not null and started_at > now() - interval '24 hours')::int as timed_out_24h`;

/** Both computations in one transaction (one now()), as plain numbers. */
async function both(): Promise<{ direct: Record<string, number>; summary: Record<string, number> }> {
  const c = await owner.connect();
  try {
    await c.query('begin isolation level repeatable read');
    const direct = (await c.query<Record<string, number>>(DIRECT, [CREEP_WARNING_RATIO])).rows[0]!;
    const row = (await c.query<Record<string, string | number>>('select * from leasehold.fleet_summary($1)', [CREEP_WARNING_RATIO])).rows[0]!;
    await c.query('commit');
    return { direct, summary: Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Number(v)])) };
  } finally {
    // discarded, not pooled: a failed expectation may have left it inside a transaction
    c.release(true);
  }
}

async function expectSame(atLeast: Partial<Record<string, number>> = {}): Promise<Record<string, number>> {
  const { direct, summary } = await both();
  expect(summary).toEqual(direct);
  for (const [k, v] of Object.entries(atLeast)) expect(summary[k], k).toBeGreaterThanOrEqual(v!);
  return summary;
}

async function job(name: string, intervalMs: number): Promise<void> {
  await owner.query(
    `insert into leasehold.jobs (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
     values ($1, 'every', null, $2, 30000, 'skip', 'latest', 'test')`,
    [name, intervalMs],
  );
  await owner.query('insert into leasehold.leases (name, fence) values ($1, 0)', [name]);
}

/** Finished runs written in one statement (the way a write-once history would), `ago` and `took` in seconds. */
async function finished(db: pg.Pool | pg.Client, name: string, runs: Array<{ ago: number; took: number; outcome?: string }>): Promise<void> {
  await db.query(
    `insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome)
     select $1, now() - r.ago * interval '1 second', 1000000 + nextval('leasehold.run_log_id_seq'), 'test',
            now() - r.ago * interval '1 second', now() - (r.ago - r.took) * interval '1 second', r.outcome
       from unnest($2::float8[], $3::float8[], $4::text[]) r(ago, took, outcome)`,
    [name, runs.map((r) => r.ago), runs.map((r) => r.took), runs.map((r) => r.outcome ?? 'succeeded')],
  );
}

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  owner = rawPool(url, 4);
  for (const [name, interval] of [['fine', 60_000], ['creep', 10_000], ['over', 10_000], ['mixed', 10_000], ['edge', 60_000], ['live', 1_000], ['capped', 60_000]] as const) {
    await job(name, interval);
  }
  // one lease held, one expired while held
  await owner.query(`update leasehold.leases set token = gen_random_uuid(), holder = 'w', acquired_at = now(), expires_at = now() + interval '1 hour' where name = 'fine'`);
  await owner.query(`update leasehold.leases set token = gen_random_uuid(), holder = 'w', acquired_at = now() - interval '1 hour', expires_at = now() - interval '1 minute' where name = 'over'`);
});

describe('fleet_summary equals a pass over a day of runs', () => {
  it('with finished rows written in one statement, across the window edge and with slow jobs', async () => {
    const day = 86_400;
    await finished(owner, 'fine', Array.from({ length: 50 }, (_, i) => ({ ago: 60 + i * 1_800, took: 1, outcome: i % 10 === 0 ? 'failed' : 'succeeded' })));
    await finished(owner, 'creep', Array.from({ length: 20 }, (_, i) => ({ ago: 100 + i * 600, took: 9 }))); // p95 0.9 of 10 s
    await finished(owner, 'over', Array.from({ length: 20 }, (_, i) => ({ ago: 100 + i * 600, took: 12 }))); // p95 1.2
    await finished(owner, 'mixed', [...Array.from({ length: 40 }, (_, i) => ({ ago: 100 + i * 600, took: 1 })), { ago: 5_000, took: 30, outcome: 'lost' }]);
    // around the old edge of the window: inside by seconds, outside by seconds, in the partial minute
    await finished(owner, 'edge', [day - 20, day - 5, day + 5, day + 20, day - 70, day + 70, day + 3_000].map((ago) => ({ ago, took: 1 })));
    // every run outlives the job's timeout: failing, though nothing failed or was lost
    await finished(owner, 'capped', Array.from({ length: 6 }, (_, i) => ({ ago: 30 + i * 3_600, took: 2, outcome: 'timed-out' })));
    const s = await expectSame({ failing: 3, lost_24h: 1, runs_24h: 106 });
    expect(s).toMatchObject({ jobs: 7, running: 1, expired: 1, creeping: 1, over_interval: 1, failing: 3, timed_out_24h: 6 });
    expect(await fleetSummary(owner)).toMatchObject({ failing: 3, timedOut24h: 6 });
    expect((await fleetSummary(owner)).runs24h).toBe(s.runs_24h);
  });

  it('with runs claimed running and finished by finish_runs on four connections at once (four shards)', async () => {
    const clients = await connections(url, 4);
    try {
      // 'live' runs: inserted running (as a claim does), then finished in parallel batches
      await Promise.all(
        clients.map((c, w) =>
          c.query(
            `insert into leasehold.run_log (job, slot, fence, holder, started_at)
             select 'live', now() - g * interval '1 second', 2000000 + $1 * 1000 + g, 'w' || $1, now() - g * interval '1 second'
               from generate_series(1, 200) g`,
            [w],
          ),
        ),
      );
      await expectSame();
      await Promise.all(
        clients.map(async (c, w) => {
          for (let part = 0; part < 4; part++) {
            const fences = Array.from({ length: 50 }, (_, i) => 2_000_000 + w * 1000 + part * 50 + i + 1);
            await c.query(
              `select count(*) from leasehold.finish_runs(array_fill('live'::text, array[50]), $1::bigint[], array_fill(null::uuid, array[50]),
                 array_fill($2::text, array[50]), array_fill(null::text, array[50]), array_fill(1, array[50]))`,
              [fences, part === 3 ? 'failed' : 'succeeded'],
            );
          }
        }),
      );
      const { rows } = await owner.query<{ shards: number }>('select count(distinct shard)::int as shards from leasehold.run_counts');
      expect(rows[0]!.shards).toBeGreaterThanOrEqual(2);
      await expectSame({ runs_24h: 900 });
    } finally {
      await Promise.all(clients.map((c) => c.end()));
    }
  });

  it('after updates of finished runs (outcome changed, a run reopened) and prune deletes', async () => {
    await owner.query(`update leasehold.run_log set outcome = 'failed' where job = 'mixed' and outcome = 'succeeded' and started_at > now() - interval '2 hours'`);
    await owner.query(`update leasehold.run_log set finished_at = null, outcome = 'running' where id = (select min(id) from leasehold.run_log where job = 'fine')`);
    await owner.query(`update leasehold.run_log set started_at = started_at - interval '2 days' where job = 'edge' and started_at > now() - interval '23 hours'`);
    await expectSame();
    await owner.query(`select leasehold.prune_history('3 hours')`);
    const after = await expectSame();
    expect(after.runs_24h).toBeGreaterThan(0);
    await owner.query(`delete from leasehold.run_log where job = 'live' and fence % 3 = 0`);
    await expectSame();
  });

  it('ignores minutes outside the window and takes over a bucket that still holds a minute 25 hours old', async () => {
    await owner.query('truncate leasehold.run_log');
    await owner.query('select leasehold.refresh_run_counts()');
    await finished(owner, 'fine', [{ ago: 3_600, took: 1 }]);
    const nowMinute = Number((await owner.query<{ m: string }>('select floor(extract(epoch from now()) / 60)::bigint::text as m')).rows[0]!.m);
    const before = await expectSame({ runs_24h: 1 });
    // what a ring keeps after a day: in every shard, a minute just outside the window, and in
    // the buckets of this minute and the next, the minute 1,500 minutes (25 h) before them
    await owner.query(
      `insert into leasehold.run_counts (bucket, shard, minute, runs)
       select (m % 1500)::smallint, s::smallint, m, n
         from generate_series(0, 63) s,
              (values ($1::bigint - 1441, 777), ($1::bigint - 1500, 999), ($1::bigint + 1 - 1500, 999)) v(m, n)
       on conflict (bucket, shard) do nothing`,
      [nowMinute],
    );
    expect((await both()).summary).toEqual(before);
    // runs finishing now land in those buckets: each takes its bucket over rather than adding to 999
    await finished(owner, 'fine', [{ ago: 1, took: 0.5 }, { ago: 2, took: 0.5 }]);
    const after = await expectSame();
    expect(after.runs_24h).toBe(before.runs_24h! + 2);
  });

  it('after a TRUNCATE (not seen by the triggers) once refresh_run_counts() has run', async () => {
    await owner.query('truncate leasehold.run_log');
    await finished(owner, 'creep', Array.from({ length: 10 }, (_, i) => ({ ago: 100 + i * 600, took: 9.5 })));
    await owner.query('select leasehold.refresh_run_counts()');
    const s = await expectSame({ creeping: 1, runs_24h: 10 });
    expect(s.over_interval).toBe(0);
  });

  it('refuses a warning ratio the slow-run marks cannot answer', async () => {
    await expect(owner.query('select * from leasehold.fleet_summary(0.4)')).rejects.toThrow(/p_warn_ratio must be from 0.5/);
    await expect(owner.query('select * from leasehold.fleet_summary(1)')).rejects.toThrow(/p_warn_ratio/);
  });
});
