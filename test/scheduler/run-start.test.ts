// A run's started_at is when its lease was granted, not when the claiming
// transaction began. A claim in READ COMMITTED can see a release that committed after its
// transaction (or its plpgsql function call) began, while now() stays at that beginning; the
// history then showed the next run starting before the previous one finished. Each case here
// claims in a transaction that began before the previous holder finished, which is that
// interleaving made deterministic.
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { client, freshDatabase, rawPool } from '../support/db.js';

let pool: pg.Pool;

beforeAll(async () => {
  const url = await freshDatabase();
  await (await client(url, { liveness: false })).close(); // installs the schema
  pool = rawPool(url, 4);
});
afterAll(async () => {
  await pool?.end();
});

const register = (job: string, overlap: string) =>
  pool.query(`select leasehold.register_jobs(array[$1], array['* * * * *'], array[null::text], array[60000::bigint], array[30000::bigint], array[$2], array['none'], 'test')`, [
    job,
    overlap,
  ]);

type Claimed = { job: string; claimed: boolean; token: string; fence: string };
const claimDue = (db: pg.ClientBase | pg.Pool, job: string, slot: Date, holder: string) =>
  db.query<Claimed>(
    `select job, claimed, token, fence from leasehold.claim(array[$1::text], array[$2::timestamptz], array[(extract(epoch from interval '30 seconds'::interval) * 1000)::bigint], array['exclusive'::text], array[0::int], $3, null)`,
    [job, slot, holder],
  );

const runsOf = async (job: string) =>
  (await pool.query<{ fence: string; started_at: Date; finished_at: Date | null }>('select fence, started_at, finished_at from leasehold.runs where job = $1 order by fence', [job])).rows;

/**
 * Begins a transaction on its own connection, lets `before` finish while it is open, then runs
 * `claim` in it. A failed claim rolls back and discards the connection: a transaction left open
 * on a pooled connection would swallow the next test's statements.
 */
async function claimInOlderTransaction(before: () => Promise<void>, claim: (c: pg.PoolClient) => Promise<void>): Promise<Date> {
  const c = await pool.connect();
  try {
    await c.query('begin');
    const { rows } = await c.query<{ now: Date }>('select now()');
    await sleep(20); // the clock moves on: a start read from now() would be visibly too early
    await before();
    await claim(c);
    await c.query('commit');
    c.release();
    return rows[0]!.now;
  } catch (error) {
    await c.query('rollback').catch(() => undefined);
    c.release(true);
    throw error;
  }
}

const second = (offsetS: number) => new Date(Math.floor(Date.now() / 1000) * 1000 + offsetS * 1000);

describe("a run's started_at", () => {
  it('is never before the previous run finished, for a slot claimed by claim_due()', async () => {
    await register('handover', 'skip');
    const [first] = (await claimDue(pool, 'handover', second(-60), 'worker-a')).rows;
    expect(first).toMatchObject({ claimed: true });
    // the slot is taken before the transaction begins, so it is due by that transaction's
    // now(); taken later, a second boundary passing meanwhile made it 'slot-not-due' (CI, loaded)
    const slot = second(0);
    const began = await claimInOlderTransaction(
      async () => {
        await pool.query(`select * from leasehold.finish_runs(array['handover'::text], array[$1::bigint], array[$2::uuid], array['succeeded'::text], array[null::text], array[1::int])`, [first!.fence, first!.token]);
      },
      async (c) => {
        expect((await claimDue(c, 'handover', slot, 'worker-b')).rows).toMatchObject([{ claimed: true }]);
      },
    );
    const [previous, next] = await runsOf('handover');
    expect(previous!.finished_at!.getTime()).toBeGreaterThan(began.getTime());
    expect(next!.started_at.getTime()).toBeGreaterThanOrEqual(previous!.finished_at!.getTime());
  });

  it('is never before the previous run finished, for a run now claimed by claim_requests()', async () => {
    await register('handover-now', 'buffer-all');
    const [held] = (await claimDue(pool, 'handover-now', second(-60), 'worker-a')).rows;
    expect(held).toMatchObject({ claimed: true });
    await pool.query(`select leasehold.run_now('handover-now', 'alice')`);
    // held: the request waits (buffer-all)
    expect((await pool.query(`select * from leasehold.claim_requests(array['handover-now'], 'worker-b')`)).rows).toEqual([]);
    await claimInOlderTransaction(
      async () => {
        await pool.query(`select * from leasehold.finish_runs(array['handover-now'::text], array[$1::bigint], array[$2::uuid], array['succeeded'::text], array[null::text], array[1::int])`, [held!.fence, held!.token]);
      },
      async (c) => {
        expect((await c.query(`select kind, claimed from leasehold.claim_requests(array['handover-now'], 'worker-b')`)).rows).toEqual([{ kind: 'manual', claimed: true }]);
      },
    );
    const [previous, next] = await runsOf('handover-now');
    expect(next!.started_at.getTime()).toBeGreaterThanOrEqual(previous!.finished_at!.getTime());
  });
});
