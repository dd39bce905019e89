// Hash shares (src/worker/shares.ts) only order the claims of a tick: a stale or wrong worker
// list, dead peers in it, or workers with different job sets can delay a slot to the second
// pass, never run it twice. Several in-process workers with their own connections and
// liveness sessions; every handler call is counted here, by (job, slot).
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startWorker, type JobOptions, type Worker } from '../../src/index.js';
import { trackerOf } from '../../src/lease/tracker.js';
import { silentLogger } from '../../src/observe/logger.js';
import { nameHash, ownerIndex, owns, PeerList } from '../../src/worker/shares.js';
import { client, freshDatabase, rawPool, sleep, waitFor } from '../support/db.js';

let url: string;
const workers: Worker[] = [];
const calls = new Map<string, number>();
const extra: pg.Client[] = [];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
});

afterAll(async () => {
  await Promise.all(extra.splice(0).map((c) => c.end()));
});

const names = (prefix: string, from: number, to: number) => Array.from({ length: to - from }, (_, i) => `${prefix}-${from + i}`);

const jobs = (list: string[]): JobOptions[] =>
  list.map((name) => ({
    name,
    every: '1s',
    handler: async ({ slot }) => {
      const key = `${name}@${slot.toISOString()}`;
      calls.set(key, (calls.get(key) ?? 0) + 1);
    },
  }));

async function worker(list: string[], claimAhead = 'auto'): Promise<Worker> {
  const w = await startWorker({ connectionString: url, jobs: jobs(list), logger: silentLogger(), handleSignals: false, shutdownGrace: '2s', claimAhead });
  workers.push(w);
  return w;
}

/** A worker's liveness session that claims nothing: a peer in every list that never takes its share. */
async function silentPeer(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url, application_name: 'test liveness' });
  await c.connect();
  await c.query('select leasehold.register_liveness(true)');
  extra.push(c);
  return c;
}

async function checkHistory(prefix: string, expected: string[]): Promise<void> {
  const pool = rawPool(url, 2);
  const twice = await pool.query(`select job, slot from leasehold.runs where job like $1 group by job, slot having count(*) > 1`, [`${prefix}-%`]);
  expect(twice.rows).toEqual([]);
  const both = await pool.query(`select r.job, r.slot from leasehold.runs r join leasehold.skips s using (job, slot) where r.job like $1`, [`${prefix}-%`]);
  expect(both.rows).toEqual([]);
  for (const [key, n] of calls) if (key.startsWith(`${prefix}-`)) expect({ key, n }).toEqual({ key, n: 1 });
  // a delay, not a loss: every job ran
  const ran = new Set([...calls.keys()].filter((k) => k.startsWith(`${prefix}-`)).map((k) => k.split('@')[0]));
  expect([...ran].sort()).toEqual([...expected].sort());
}

describe('hash shares', () => {
  it('name one first worker per login role for the chores of a service (unhandled schedules)', () => {
    const list = new PeerList(async () => []);
    list.setKeys([{ key: '1', role: 'billing' }, { key: '2', role: 'shop' }, { key: '3', role: 'billing' }, { key: '4', role: 'shop' }]);
    expect(['1', '2', '3', '4'].map((k) => list.isFirstOfRole(k))).toEqual([true, true, false, false]);
    expect(list.isFirst('2')).toBe(false);
    expect(list.isFirstOfRole('9')).toBe(false); // not in the list: never first
    expect(list.isFirstOfRole(null)).toBe(false);
  });

  it('are the same in every worker that reads the same list, whatever its order', () => {
    const keys = ['5', '-3', '42', '7'];
    const a = new PeerList(async () => keys);
    const b = new PeerList(async () => [...keys].reverse());
    a.setKeys(keys);
    b.setKeys([...keys].reverse());
    const items = names('h', 0, 200);
    const mine = (list: PeerList, key: string) => items.filter((name) => owns(list.share(key), nameHash(name)));
    expect(mine(a, '5')).toEqual(mine(b, '5'));
    const shares = ['-3', '42', '5', '7'].map((k) => mine(a, k));
    expect(shares.flat().sort()).toEqual([...items].sort());
    expect(ownerIndex('h-1', keys)).toBe(nameHash('h-1') % 4);
    // not in the list: every item is its own (the previous claim path)
    expect(mine(a, '999')).toHaveLength(items.length);
  });

  // as each worker claims at its slots ('auto', which a tick this small never takes ahead), and
  // as each claims its share 300 ms ahead of them
  for (const [claimAhead, tag] of [
    ['auto', ''],
    ['300ms', ' (claiming ahead)'],
  ] as const) {
    const prefix = (name: string) => (claimAhead === 'auto' ? name : `ahead${name}`);

    it(`workers with different job sets and dead peers in their list run each slot once, and every job${tag}`, async () => {
      const all = names(prefix('mix'), 0, 60);
      await silentPeer();
      await silentPeer();
      await Promise.all([worker(all.slice(0, 40), claimAhead), worker(all.slice(20, 60), claimAhead), worker(all, claimAhead), worker(all.slice(10, 30), claimAhead)]);
      await waitFor(() => new Set([...calls.keys()].filter((k) => k.startsWith(`${prefix('mix')}-`)).map((k) => k.split('@')[0])).size === all.length, 20_000, 50);
      await sleep(2_500);
      await Promise.all(workers.splice(0).map((w) => w.stop()));
      await checkHistory(prefix('mix'), all);
    });

    it(`a stale or wrong list in each worker (peers that left, peers it does not know, a different order) only delays${tag}`, async () => {
      // every PeerList refresh reads a list made up for it: its own key or not, dead keys, any length
      const original = PeerList.prototype.refresh;
      const sessions = await Promise.all([silentPeer(), silentPeer()]);
      const dead = (await Promise.all(sessions.map((c) => c.query<{ key: string }>('select k.key::text as key from leasehold.liveness_locks() k where k.pid = pg_backend_pid()'))))
        .map((r) => r.rows[0]!.key);
      // the silent peers leave: their keys are now stale
      await Promise.all(sessions.map((c) => c.end()));
      extra.splice(extra.indexOf(sessions[0]!), 1);
      extra.splice(extra.indexOf(sessions[1]!), 1);
      let turn = 0;
      PeerList.prototype.refresh = function (this: PeerList, ownKey: string | null) {
        turn++;
        const pick = [dead[0]!, dead[1]!, String(turn * 7919), '1', '2'].slice(0, turn % 5);
        this.setKeys(turn % 3 === 0 || ownKey === null ? pick : [ownKey, ...pick]);
        return Promise.resolve();
      };
      try {
        const all = names(prefix('stale'), 0, 40);
        await Promise.all([worker(all, claimAhead), worker(all, claimAhead), worker(all.slice(0, 25), claimAhead), worker(all.slice(15), claimAhead)]);
        await waitFor(() => new Set([...calls.keys()].filter((k) => k.startsWith(`${prefix('stale')}-`)).map((k) => k.split('@')[0])).size === all.length, 20_000, 50);
        await sleep(3_000);
        await Promise.all(workers.splice(0).map((w) => w.stop()));
        await checkHistory(prefix('stale'), all);
      } finally {
        PeerList.prototype.refresh = original;
      }
    });
  }
});

const trackerKey = (w: Worker) => trackerOf(w.leasehold).livenessKey();

/** The number of slots each claim statement of this process asked for, over `ms`. */
async function claimSizes(ms: number): Promise<number[]> {
  const perCall: number[] = [];
  const store = (await import('../../src/worker/claims.js')).SchedulerStore.prototype;
  const claim = store.claim;
  store.claim = async function (this: typeof store, ...args: Parameters<typeof claim>) {
    perCall.push(args[0].length);
    return claim.apply(this, args);
  };
  try {
    await sleep(ms);
  } finally {
    store.claim = claim;
  }
  return perCall;
}

describe('the list of workers', () => {
  it('holds workers only: not a plain client, an application advisory lock or a transaction-level lock of the schema', async () => {
    await Promise.all(extra.splice(0).map((c) => c.end()));
    const pool = rawPool(url, 2);
    // an application's session-level lock on a bigint, as migration tools take one
    const app = new pg.Client({ connectionString: url, application_name: 'app' });
    await app.connect();
    extra.push(app);
    await app.query('select pg_advisory_lock(7241865325823964)');
    // a client with its liveness session (a web process calling run(), leasehold exec)
    const plain = await client(url);
    // a transaction holding register_jobs' revision lock (what a starting worker holds a moment)
    const open = new pg.Client({ connectionString: url, application_name: 'open' });
    await open.connect();
    extra.push(open);
    await open.query('begin');
    await open.query(
      `select count(*) from leasehold.register_jobs(array['list-x'], array['1h'], array[null], array[3600000::bigint], array[30000::bigint],
         array['skip'], array['none'], 'test')`,
    );
    try {
      const lockRows = await pool.query<{ n: number }>('select count(*)::int as n from leasehold.liveness_locks()');
      expect(lockRows.rows[0]!.n).toBe(3);
      expect((await pool.query('select pid, key from leasehold.liveness_locks() where worker')).rows).toEqual([]);
      await open.query('commit');
      // then an application's transaction-level lock, open while the worker starts and ticks
      await open.query('begin');
      await open.query('select pg_advisory_xact_lock(-42)');
      expect((await pool.query<{ n: number }>('select count(*)::int as n from leasehold.liveness_locks()')).rows[0]!.n).toBe(3);
      const all = names('list', 0, 40);
      const w = await worker(all);
      const keys = (await pool.query<{ key: string }>('select key::text from leasehold.liveness_locks() where worker')).rows.map((r) => r.key);
      expect(keys).toEqual([trackerKey(w)]);
      // alone in its list, the worker claims all 40 in one statement at every tick (with the
      // three other sessions counted as peers it split by 4 and sent a second pass each tick)
      const sizes = await claimSizes(3_500);
      expect(sizes.length, JSON.stringify(sizes)).toBeGreaterThanOrEqual(2);
      expect(sizes.every((n) => n === all.length), JSON.stringify(sizes)).toBe(true);
      await Promise.all(workers.splice(0).map((x) => x.stop()));
      await checkHistory('list', all);
    } finally {
      await open.query('rollback');
      await plain.close();
    }
  });

  it('a worker key is a liveness key: a worker killed with leases frees them at once', async () => {
    const pool = rawPool(url, 2);
    const c = new pg.Client({ connectionString: url, application_name: 'test liveness' });
    await c.connect();
    const key = (await c.query<{ key: string }>('select leasehold.register_liveness(true)::text as key')).rows[0]!.key;
    try {
      expect(BigInt(key) >> 47n).toBe(19528n);
      const live = await pool.query<{ key: string }>('select key::text from leasehold.liveness_locks() where worker');
      expect(live.rows.map((r) => r.key)).toContain(key);
      const got = await pool.query<{ acquired: boolean }>(`select acquired from leasehold.acquire('list-lease', interval '1 hour', 'w', $1::bigint)`, [key]);
      expect(got.rows[0]!.acquired).toBe(true);
      expect((await pool.query<{ gone: boolean }>('select leasehold.holder_gone($1::bigint) as gone', [key])).rows[0]!.gone).toBe(false);
    } finally {
      await c.end();
    }
    await waitFor(async () => (await pool.query('select 1 from leasehold.liveness_locks() where worker and key = $1::bigint', [key])).rowCount === 0, 5_000, 20);
    const again = await pool.query<{ acquired: boolean }>(`select acquired from leasehold.acquire('list-lease', interval '1 hour', 'other')`);
    expect(again.rows[0]!.acquired).toBe(true);
  });
});

describe('a peer that leaves', () => {
  it('drops out of the list at the first tick whose second pass took its share over, not at the next periodic read', async () => {
    const all = names('gone', 0, 40);
    // the earlier tests' silent peers leave first: this one is the only other session
    await Promise.all(extra.splice(0).map((c) => c.end()));
    const peer = await silentPeer();
    await worker(all);
    // while the silent peer lives, its share goes to the second pass every tick
    await waitFor(() => [...calls.keys()].some((k) => k.startsWith('gone-')), 5_000, 20);
    await peer.end();
    extra.splice(extra.indexOf(peer), 1);
    // the list is read every 10 s otherwise; 3.5 s is a few ticks
    const perCall = await claimSizes(3_500);
    // the first tick after the peer left may still split; the ones after claim all 40 at once
    expect(perCall.filter((n) => n === all.length).length, JSON.stringify(perCall)).toBeGreaterThanOrEqual(2);
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    await checkHistory('gone', all);
  });
});

describe('claim_due', () => {
  it('decides as claim() does and returns only the rows the caller must act on', async () => {
    const pool = rawPool(url, 2);
    const list = names('due', 0, 6);
    await pool.query(
      `select leasehold.register_jobs($1, array_fill('* * * * *'::text, array[6]), array_fill(null::text, array[6]),
         array_fill(60000::bigint, array[6]), array_fill(30000::bigint, array[6]), array_fill('skip'::text, array[6]),
         array_fill('none'::text, array[6]), 'test')`,
      [list],
    );
    const slot = new Date(Math.floor(Date.now() / 1000) * 1000 - 10_000);
    type Row = { job: string; claimed: boolean; reason: string; skip_recorded: boolean };
    const call = async (fn: 'claim' | 'claim_due', jobs: string[], at: Date, holder: string) =>
      (
        await pool.query<Row>(
          `select job, claimed, reason, skip_recorded from leasehold.claim($1::text[], array_fill($2::timestamptz, array[cardinality($1::text[])]),
             array_fill(30000::bigint, array[cardinality($1::text[])]), array_fill('exclusive'::text, array[cardinality($1::text[])]),
             array_fill(0, array[cardinality($1::text[])]), $3, null, ${fn === 'claim'})
            order by job`,
          [jobs, at, holder],
        )
      ).rows;
    // a: claims due-0..2 at one slot; b then asks for all six at the next: due-0..2 are still
    // held by a (b records one skip each), due-3..5 are b's
    const next = new Date(slot.getTime() + 1_000);
    expect((await call('claim_due', list.slice(0, 3), slot, 'a')).map((r) => r.reason)).toEqual(['claimed', 'claimed', 'claimed']);
    const b = await call('claim_due', list, next, 'b');
    expect(b.map((r) => [r.job, r.reason, r.skip_recorded])).toEqual([
      ['due-0', 'held', true], ['due-1', 'held', true], ['due-2', 'held', true],
      ['due-3', 'claimed', false], ['due-4', 'claimed', false], ['due-5', 'claimed', false],
    ]);
    // c asks again: nothing to act on (slot-taken and skips already recorded); claim() says why for each
    expect(await call('claim_due', list, next, 'c')).toEqual([]);
    expect((await call('claim', list, next, 'c')).map((r) => r.reason)).toEqual(['slot-skipped', 'slot-skipped', 'slot-skipped', 'slot-taken', 'slot-taken', 'slot-taken']);
    // not due and unknown jobs still come back
    const later = new Date(Date.now() + 60_000);
    expect((await call('claim_due', ['due-0', 'no-such-job'], later, 'c')).map((r) => r.reason).sort()).toEqual(['slot-not-due', 'unknown-job']);
  });
});
