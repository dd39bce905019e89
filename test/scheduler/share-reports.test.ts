// Share reports (src/worker/share-reports.ts): a worker whose share of a tick is decided reports
// its digest, and a peer's second pass leaves out the shares reported exactly as it sees them.
// What must hold: the digests of one share agree between the worker that owns it and its peers;
// only a live key's report made by the caller's login role matches; a fleet with the same jobs
// asks the database about each job about once per tick instead of once per worker; and every
// slot still runs exactly once. Fleets whose job sets or worker lists differ (no report matches)
// are test/scheduler/tick-shares.test.ts's.
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startWorker, type JobOptions, type Worker } from '../../src/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { SchedulerStore } from '../../src/worker/claims.js';
import { newState } from '../../src/worker/runs.js';
import { planTick } from '../../src/worker/tick-plan.js';
import { defineJob } from '../../src/job/job.js';
import { client, freshDatabase, rawPool, sleep, waitFor } from '../support/db.js';

let url: string;
let pool: pg.Pool;
const workers: Worker[] = [];
const sessions: pg.Client[] = [];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close(); // installs the schema
  pool = rawPool(url, 4);
});
afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
});
afterAll(async () => {
  await Promise.all(sessions.splice(0).map((c) => c.end()));
  await pool?.end();
});

/** A live worker key, held by a session of its own. */
async function liveKey(): Promise<{ key: string; session: pg.Client }> {
  const session = new pg.Client({ connectionString: url });
  await session.connect();
  sessions.push(session);
  const { rows } = await session.query<{ key: string }>('select leasehold.register_liveness(true)::text as key');
  return { key: rows[0]!.key, session };
}

const reported = async (keys: string[], jobs: number[], a: number[], b: number[]) =>
  (await pool.query<{ key: string }>('select holder_key::text as key from leasehold.reported_shares($1::bigint[], $2::integer[], $3::bigint[], $4::bigint[]) order by 1', [keys, jobs, a, b])).rows.map((r) => r.key);

describe('share digests', () => {
  it('agree between the worker that owns a share and each peer that sees it, and differ when the jobs or slots do', () => {
    const logger = silentLogger();
    const slot = new Date(Math.floor(Date.now() / 60_000) * 60_000 - 60_000);
    const states = () =>
      Array.from({ length: 500 }, (_, i) => {
        const state = newState(defineJob({ name: `digest-${i}`, every: '1m', handler: async () => undefined }));
        state.nextSlot = slot;
        return state;
      });
    const now = new Date(slot.getTime() + 10);
    const plans = [0, 1, 2].map((index) => planTick(states(), now, { index, count: 3 }, 0, logger));
    for (const [w, plan] of plans.entries()) {
      expect(plan.mineDigest.jobs).toBe(plan.mine.length);
      for (const [p, peer] of plans.entries()) {
        if (p === w) continue;
        expect(peer.othersDigests[w]).toEqual(plan.mineDigest);
        expect(peer.others.filter((_, i) => peer.othersOwners[i] === w).map((r) => r.job.name).sort()).toEqual(plan.mine.map((r) => r.job.name).sort());
      }
    }
    expect(plans.reduce((n, p) => n + p.mine.length, 0)).toBe(500);
    // one job of share 0 less, or the next slot: another digest
    const gone = plans[0]!.mine[0]!.job.name;
    const fewer = planTick(states().filter((s) => s.job.name !== gone), now, { index: 1, count: 3 }, 0, logger);
    const later = planTick(states().map((s) => ((s.nextSlot = new Date(slot.getTime() + 60_000)), s)), new Date(now.getTime() + 60_000), { index: 1, count: 3 }, 0, logger);
    expect(fewer.othersDigests[0]).not.toEqual(plans[0]!.mineDigest);
    expect(later.othersDigests[0]).not.toEqual(plans[0]!.mineDigest);
  });
});

describe('report_share and reported_shares', () => {
  // their keys are workers in every list: a fleet test after this one would split by them too
  afterAll(async () => {
    await Promise.all(sessions.splice(0).map((c) => c.end()));
  });

  it('match a live key\'s report exactly, and no other', async () => {
    const [one, two] = [await liveKey(), await liveKey()];
    await pool.query('select leasehold.report_share($1, 3, 10, 20), leasehold.report_share($2, 4, 11, 21)', [one.key, two.key]);
    expect(await reported([one.key, two.key], [3, 4], [10, 11], [20, 21])).toEqual([one.key, two.key].sort());
    expect(await reported([one.key], [2, 3], [10], [20])).toEqual([]); // (unnest pads the shorter arrays with nulls)
    expect(await reported([one.key, two.key], [3, 4], [10, 12], [20, 21])).toEqual([one.key]);
    expect(await reported([one.key, two.key], [3, 4], [10, 11], [20, 22])).toEqual([one.key]);
    // a newer report replaces the older
    await pool.query('select leasehold.report_share($1, 3, 99, 20)', [one.key]);
    expect(await reported([one.key], [3], [10], [20])).toEqual([]);
    expect(await reported([one.key], [3], [99], [20])).toEqual([one.key]);
    // a worker that died: its report spares nobody, and the next key's first report removes it
    await one.session.end();
    sessions.splice(sessions.indexOf(one.session), 1);
    expect(await reported([one.key], [3], [99], [20])).toEqual([]);
    const three = await liveKey();
    await pool.query('select leasehold.report_share($1, 1, 1, 1)', [three.key]);
    const { rows } = await pool.query<{ key: string }>('select holder_key::text as key from leasehold.share_reports order by 1');
    expect(rows.map((r) => r.key)).toEqual([two.key, three.key].sort());
  });

  it('refuses a report without a key, a count or sums (22023), and records nothing', async () => {
    const { key } = await liveKey();
    for (const args of [[null, 1, 1, 1], [key, 0, 1, 1], [key, 1, null, 1], [key, null, 1, 1]]) {
      await expect(pool.query('select leasehold.report_share($1, $2, $3, $4)', args)).rejects.toMatchObject({ code: '22023' });
    }
    expect((await pool.query('select 1 from leasehold.share_reports where holder_key = $1', [key])).rowCount).toBe(0);
  });
});

describe('a fleet with the same jobs', () => {
  // every claim statement's requests, by worker process-wide (the workers share the prototype)
  const asked: number[] = [];
  const original = { claim: SchedulerStore.prototype.claim, claimAhead: SchedulerStore.prototype.claimAhead };
  beforeAll(() => {
    SchedulerStore.prototype.claim = function (this: SchedulerStore, requests, ...rest) {
      asked.push(requests.length);
      return original.claim.call(this, requests, ...rest);
    };
    SchedulerStore.prototype.claimAhead = function (this: SchedulerStore, requests, ...rest) {
      asked.push(requests.length);
      return original.claimAhead.call(this, requests, ...rest);
    };
  });
  afterAll(() => {
    Object.assign(SchedulerStore.prototype, original);
  });

  const jobs = (prefix: string, n: number, calls: Map<string, number>): JobOptions[] =>
    Array.from({ length: n }, (_, i) => ({
      name: `${prefix}-${i}`,
      every: '1s',
      handler: async ({ job, slot }) => {
        const key = `${job}@${slot.toISOString()}`;
        calls.set(key, (calls.get(key) ?? 0) + 1);
      },
    }));

  for (const claimAhead of ['0ms', '300ms']) {
    it(`asks about each job about once a tick, not once per worker, and runs each slot once (claimAhead ${claimAhead})`, async () => {
      const prefix = `same${claimAhead.replace('ms', '')}`;
      const calls = new Map<string, number>();
      const n = 300;
      for (let w = 0; w < 3; w++) {
        workers.push(await startWorker({ connectionString: url, jobs: jobs(prefix, n, calls), logger: silentLogger(), handleSignals: false, shutdownGrace: '2s', claimAhead }));
      }
      // a worker reads the list of live workers every 10 s: until each has read the other two,
      // their shares differ and no report can match; then each job is asked about once a tick
      const perTick = async (seconds: number): Promise<number> => {
        asked.length = 0;
        const from = Date.now();
        await sleep(seconds * 1000);
        return asked.reduce((a, b) => a + b, 0) / ((Date.now() - from) / 1000);
      };
      const deadline = Date.now() + 30_000;
      for (let quiet = 0; quiet < 2 && Date.now() < deadline; ) quiet = (await perTick(1.5)) < 1.5 * n ? quiet + 1 : 0;
      const total = await perTick(4);
      await Promise.all(workers.splice(0).map((w) => w.stop()));
      // without reports each worker asked for every job at each tick: 3 x 300 a tick
      expect(total).toBeLessThan(1.5 * n);
      expect(total).toBeGreaterThan(0.5 * n);
      for (const [key, count] of calls) expect({ key, count }).toEqual({ key, count: 1 });
      const { rows } = await pool.query(`select job, slot from leasehold.runs where job like $1 group by job, slot having count(*) > 1`, [`${prefix}-%`]);
      expect(rows).toEqual([]);
    });
  }
});
