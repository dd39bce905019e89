// A forward database clock step is remembered by the database, not only by the workers that
// saw it: a worker started after the step must not record the slots it jumped over as missed.
// The server is a PostgreSQL of this test's own under libfaketime (offset read from a file).
import pg from 'pg';
import { expect, it } from 'vitest';
import { startWorker, type Worker } from '../../src/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { waitFor } from '../support/db.js';
import { steppedServer } from '../support/stepped-server.js';

const server = steppedServer('leasehold-steps-');

const STEP_S = 600;

it.skipIf(!server.libfaketime)('a worker started after a forward step records none of the jumped-over slots as missed (uses libfaketime)', async () => {
  const url = server.url;
  server.set('+0s');
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  const workers: Worker[] = [];
  const start = async (job: string) => {
    const worker = await startWorker({
      connectionString: url,
      logger: silentLogger(),
      queryTimeout: '2s',
      handleSignals: false,
      shutdownGrace: '2s',
      jobs: [{ name: job, every: '1s', ttl: '10s', handler: async () => undefined }],
    });
    workers.push(worker);
    return worker;
  };
  const lastSlot = async (job: string) =>
    (await pool.query<{ last_slot: Date | null }>('select last_slot from leasehold.leases where name = $1', [job])).rows[0]?.last_slot ?? null;
  try {
    // "late" has run before the step, then nobody runs it until after the step
    const early = await start('late');
    await waitFor(async () => (await lastSlot('late')) !== null, 15_000);
    await early.stop();
    // two workers of other jobs are running when the database clock steps forward
    const a = await start('watch-a');
    const b = await start('watch-b');
    await waitFor(async () => (await lastSlot('watch-a')) !== null && (await lastSlot('watch-b')) !== null, 15_000);
    const before = await lastSlot('late');
    server.set(`+${STEP_S}s`);
    // both noticed it; the fleet stores one window
    const windows = async () =>
      (await pool.query<{ from_time: Date; to_time: Date; recorded_by: string }>('select from_time, to_time, recorded_by from leasehold.clock_steps')).rows;
    await waitFor(async () => (await windows()).length > 0, 15_000, 50);
    await a.stop();
    await b.stop();
    const stored = await windows();
    expect(stored).toHaveLength(1);
    const window = stored[0]!;
    expect(window.to_time.getTime() - window.from_time.getTime()).toBeGreaterThan((STEP_S - 10) * 1000);
    expect(window.from_time.getTime()).toBeGreaterThan(before!.getTime());

    // A worker started after the step: "late"'s last slot is ~600 slots behind the database's now.
    const missedBefore = Number((await pool.query<{ n: string }>(`select count(*) as n from leasehold.missed where job = 'late'`)).rows[0]?.n);
    expect(missedBefore).toBe(0);
    const later = await start('late');
    const events: Date[] = [];
    later.on('slot:missed', (event) => events.push(...event.slots));
    // it catches up and then claims the next slots: the missed slots are recorded by then
    await waitFor(async () => (await lastSlot('late'))!.getTime() > window.to_time.getTime() + 2_000, 20_000);
    await later.stop();
    const missed = (await pool.query<{ slot: Date }>(`select slot from leasehold.missed where job = 'late' order by slot`)).rows.map((r) => r.slot);
    const inside = missed.filter((slot) => slot > window.from_time && slot <= window.to_time);
    expect(inside.map((slot) => slot.toISOString())).toEqual([]);
    // the real downtime before the step (a few seconds) may be missed, nothing more
    expect(missed.length).toBeLessThan(30);
    expect(events.filter((slot) => slot > window.from_time && slot <= window.to_time)).toEqual([]);

    // Bad input is refused with a clear error and stores nothing.
    await expect(pool.query(`select leasehold.record_clock_step(now(), now() - interval '1 s', 'x')`)).rejects.toMatchObject({ code: '22023' });
    await expect(pool.query(`select leasehold.record_clock_step(null, now(), 'x')`)).rejects.toMatchObject({ code: '22023' });
    expect(await windows()).toHaveLength(1);
    // an overlapping report merges into the stored window
    const merged = await pool.query<{ stored: boolean }>(`select leasehold.record_clock_step($1, $2, 'x') as stored`, [
      new Date(window.from_time.getTime() - 1_000),
      new Date(window.to_time.getTime() - 1_000),
    ]);
    expect(merged.rows[0]?.stored).toBe(false);
    const after = await windows();
    expect(after).toHaveLength(1);
    expect(after[0]!.from_time.getTime()).toBe(window.from_time.getTime() - 1_000);
    expect(after[0]!.to_time.getTime()).toBe(window.to_time.getTime());
  } finally {
    await Promise.allSettled(workers.map((w) => w.stop()));
    await pool.end();
    server.set('+0s');
  }
}, 120_000);
