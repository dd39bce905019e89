// Durations longer than 2^31 ms (24.8 days) reach PostgreSQL intact. Before PostgreSQL 15 the
// interval parser overflows on text such as '2592000000 milliseconds' (30 days), which is how
// the client sent them until it sent milliseconds times an interval: every worker's history
// pruning, with the default 30-day retention, then failed at start and on each hour (only a
// warning in the log), and define() refused an `every` of 30 days. `npm run test:versions`
// runs this file on PostgreSQL 14 to 17.
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { startWorker } from '../../src/index.js';
import { client, freshDatabase, rawPool, waitFor } from '../support/db.js';

const DAY = 86_400_000;
let url: string;

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close(); // installs the schema
});

describe('a worker with the default history retention (30 days)', () => {
  it('prunes history older than 30 days when it starts, and keeps the rest', async () => {
    const pool = rawPool(url, 1);
    // 31 days old: pruned; 29 days old: kept (the database's now(), as prune_history reads it)
    await pool.query(`
      insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome)
      select 'history', now() - make_interval(days => d, mins => g), 10 * d + g, 'w', now() - make_interval(days => d, mins => g),
             now() - make_interval(days => d, mins => g) + interval '1 second', 'succeeded'
        from unnest(array[31, 29]) d, generate_series(1, 5) g;
      insert into leasehold.skips (job, slot, holder, recorded_by, recorded_at)
      select 'history', now() - make_interval(days => d, mins => g), 'w', 'w', now() - make_interval(days => d, mins => g)
        from unnest(array[31, 29]) d, generate_series(1, 3) g;
      insert into leasehold.missed (job, slot, reason, recorded_by, recorded_at)
      select 'history', now() - make_interval(days => d, mins => g), 'seeded', 'w', now() - make_interval(days => d, mins => g)
        from unnest(array[31, 29]) d, generate_series(1, 2) g;
    `);
    const logged: Array<{ level: string; event: unknown; deleted?: unknown; err?: unknown }> = [];
    const log = (level: string) => (fields: object) => void logged.push({ level, ...(fields as { event?: unknown }) } as (typeof logged)[number]);
    const worker = await startWorker({
      connectionString: url,
      jobs: [{ name: `hourly-${randomUUID()}`, every: '1h', handler: async () => undefined }],
      logger: { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') },
      handleSignals: false,
      shutdownGrace: '2s',
    });
    try {
      await waitFor(() => logged.some((l) => String(l.event).startsWith('history:')), 15_000, 50);
    } finally {
      await worker.stop();
    }
    expect(logged.filter((l) => String(l.event).startsWith('history:'))).toEqual([expect.objectContaining({ level: 'info', event: 'history:pruned', deleted: 10 })]);
    const { rows } = await pool.query<{ runs: number; skips: number; missed: number }>(`
      select (select count(*) from leasehold.run_log where job = 'history' and finished_at > now() - interval '30 days')::int as runs,
             (select count(*) from leasehold.skips where job = 'history' and recorded_at > now() - interval '30 days')::int as skips,
             (select count(*) from leasehold.missed where job = 'history' and recorded_at > now() - interval '30 days')::int as missed`);
    const { rows: all } = await pool.query<{ n: number }>(`
      select ((select count(*) from leasehold.run_log where job = 'history') + (select count(*) from leasehold.skips where job = 'history')
              + (select count(*) from leasehold.missed where job = 'history'))::int as n`);
    expect(rows[0]).toEqual({ runs: 5, skips: 3, missed: 2 });
    expect(all[0]!.n).toBe(10);
  });
});

describe('a schedule defined as data with durations of 30 days and more', () => {
  it('stores every, startingDeadline and timeout to the millisecond', async () => {
    const lh = await client(url, { liveness: false });
    const name = `monthly-${randomUUID()}`;
    await lh.control.define({ name, handler: 'h', by: 'test', every: '30d', startingDeadline: '40d', timeout: '366d' });
    expect(await lh.control.get(name)).toMatchObject({ schedule: '30d', intervalMs: 30 * DAY, startingDeadlineMs: 40 * DAY, timeoutMs: 366 * DAY });
  });
});
