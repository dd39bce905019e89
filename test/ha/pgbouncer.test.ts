// The TypeScript client through a real PgBouncer in transaction pooling mode (docs/pgbouncer.md):
// lease calls and fenced transactions through the pooler, liveness on a direct connection or off.
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { LeaseLostError } from '../../src/index.js';
import { timedQuery } from '../../src/db/handle.js';
import { runsUnnamed } from '../../src/db/prepared.js';
import { client, freshDatabase, rawPool, sleep, waitFor } from '../support/db.js';
import { JsonLinesProcess } from '../support/processes.js';
import { findPgBouncer, startPgBouncer, type PgBouncer } from '../support/pgbouncer.js';

const BINARY = findPgBouncer();
const missing = BINARY ? '' : ' [SKIPPED: no pgbouncer binary on PATH or in /usr/sbin (Debian package pgbouncer)]';
const HOLDER = fileURLToPath(new URL('../fixtures/pooled-holder.ts', import.meta.url));

let direct: string;
let bouncer: PgBouncer | undefined;
let pooled: string;
const started: JsonLinesProcess[] = [];

beforeAll(async () => {
  direct = await freshDatabase();
  await (await client(direct, { liveness: false })).close(); // schema in place before the pooled clients start
  await rawPool(direct, 1).query('create table fenced_writes (name text, fence bigint, holder text, value text)');
  if (!BINARY) return;
  bouncer = await startPgBouncer(BINARY, direct);
  pooled = bouncer.url();
});

afterAll(async () => {
  await Promise.all(started.splice(0).map((p) => p.kill()));
  await bouncer?.stop();
});

async function fencedWrites(name: string): Promise<Array<{ fence: string; holder: string }>> {
  const { rows } = await rawPool(direct, 2).query<{ fence: string; holder: string }>(
    'select fence, holder from fenced_writes where name = $1 order by fence',
    [name],
  );
  return rows;
}

describe.concurrent('through PgBouncer (pool_mode = transaction)', () => {
  it.skipIf(!BINARY)(`liveness on a direct connection: acquire, skip, renew, fenced transaction, run with heartbeats, release${missing}`, async () => {
    const a = await client(pooled, { holder: 'pooled-a', liveness: { connectionString: direct } });
    const b = await client(pooled, { holder: 'pooled-b', liveness: { connectionString: direct } });
    const first = await a.acquire('job', { ttl: '30s' });
    if (!first.acquired) throw new Error('expected to acquire');
    expect(first.lease.fence).toBe(1);
    expect(await b.acquire('job', { ttl: '30s' })).toMatchObject({ acquired: false, reason: 'held', holder: 'pooled-a', fence: 1 });
    const { rows } = await rawPool(direct, 1).query(`select holder, holder_alive from leasehold.lease_status where name = 'job'`);
    expect(rows).toEqual([{ holder: 'pooled-a', holder_alive: true }]); // the direct liveness session is seen
    expect(await first.lease.renew()).toBeInstanceOf(Date);
    await first.lease.transaction((c) => c.query(`insert into fenced_writes values ('job', $1, 'pooled-a', 'first')`, [first.lease.fence]));
    expect(await first.lease.release()).toBe(true);

    // run(): heartbeats every ttl/3 through the pooler keep a 600 ms lease for a 1.2 s handler
    const ran = await b.run('job', { ttl: '600ms' }, async (ctx) => {
      await sleep(1_200);
      await ctx.transaction((c) => c.query(`insert into fenced_writes values ('job', $1, 'pooled-b', 'second')`, [ctx.fence]));
      return ctx.signal.aborted;
    });
    expect(ran).toMatchObject({ ran: true, value: false, fence: 2 });
    expect(ran).not.toHaveProperty('lost');
    expect(await fencedWrites('job')).toEqual([
      { fence: '1', holder: 'pooled-a' },
      { fence: '2', holder: 'pooled-b' },
    ]);
  });

  it.skipIf(!BINARY)(`liveness: false: the same lease path works${missing}`, async () => {
    const a = await client(pooled, { holder: 'nolive-a', liveness: false });
    const b = await client(pooled, { holder: 'nolive-b', liveness: false });
    const first = await a.acquire('nolive', { ttl: '30s', heartbeat: true });
    if (!first.acquired) throw new Error('expected to acquire');
    expect(await b.acquire('nolive', { ttl: '30s' })).toMatchObject({ acquired: false, reason: 'held', holder: 'nolive-a' });
    expect(await first.lease.renew('20s')).toBeInstanceOf(Date);
    await first.lease.transaction((c) => c.query(`insert into fenced_writes values ('nolive', $1, 'nolive-a', 'x')`, [first.lease.fence]));
    expect(await first.lease.release()).toBe(true);
    const second = await b.acquire('nolive', { ttl: '30s' });
    expect(second).toMatchObject({ acquired: true, lease: { fence: 2 } });
    const { rows } = await rawPool(direct, 1).query(`select holder_alive from leasehold.lease_status where name = 'nolive'`);
    expect(rows).toEqual([{ holder_alive: null }]); // no liveness key: only the TTL frees it
  });

  it.skipIf(!BINARY)(
    `a killed holder: freed at once with liveness on a direct connection or a session-mode pool, by its TTL without liveness${missing}`,
    async () => {
      const database = new URL(direct).pathname.slice(1);
      const leases = [
        { holder: 'doomed-direct', name: 'killed-direct', ttl: '30s', liveness: direct },
        // In session mode the server connection is the client's until it disconnects, and
        // PgBouncer's server_reset_query (DISCARD ALL) drops the advisory lock before reusing it.
        { holder: 'doomed-session', name: 'killed-session', ttl: '30s', liveness: bouncer!.url(`${database}_session`) },
        { holder: 'doomed-nolive', name: 'killed-ttl', ttl: '1500ms', liveness: 'off' },
      ];
      const proc = await JsonLinesProcess.startScript(HOLDER, { LEASE_URL: pooled, LEASES: JSON.stringify(leases) });
      started.push(proc);
      expect(proc.lines[0]).toEqual({ event: 'ready', fences: { 'killed-direct': 1, 'killed-session': 1, 'killed-ttl': 1 } });
      const heir = await client(pooled, { holder: 'heir', liveness: false });
      for (const lease of leases) expect(await heir.acquire(lease.name, { ttl: '30s' })).toMatchObject({ acquired: false, holder: lease.holder });

      const killedAt = Date.now();
      proc.signal('SIGKILL');
      let lastUntil = 0;
      const takeOver = (name: string) =>
        waitFor(async () => {
          const r = await heir.acquire(name, { ttl: '30s' });
          if (r.acquired) return { lease: r.lease, afterMs: Date.now() - killedAt };
          if (name === 'killed-ttl') lastUntil = Math.max(lastUntil, r.until?.getTime() ?? 0);
          return undefined;
        }, 15_000, 20);
      const [viaDirect, viaSession, byTtl] = await Promise.all(['killed-direct', 'killed-session', 'killed-ttl'].map(takeOver));
      expect(viaDirect!.afterMs).toBeLessThan(10_000); // their TTL was 30 s
      expect(viaSession!.afterMs).toBeLessThan(10_000);
      expect(lastUntil).toBeGreaterThan(0);
      expect(byTtl!.lease.acquiredAt.getTime()).toBeGreaterThanOrEqual(lastUntil); // not before its expiry, by the database clock
      expect([viaDirect, viaSession, byTtl].map((t) => t!.lease.fence)).toEqual([2, 2, 2]);
    },
  );

  it.skipIf(!BINARY)(`a stale fenced transaction through PgBouncer is refused after a takeover${missing}`, async () => {
    const a = await client(pooled, { holder: 'stale-a', liveness: false });
    const b = await client(pooled, { holder: 'stale-b', liveness: false });
    const old = await a.acquire('stale', { ttl: '30s' });
    if (!old.acquired) throw new Error('expected to acquire');
    expect(await b.forceRelease('stale')).toMatchObject({ released: true, previousHolder: 'stale-a', fence: 2 });
    expect(await b.acquire('stale', { ttl: '30s' })).toMatchObject({ acquired: true, lease: { fence: 3 } });
    const refused = old.lease.transaction((c) => c.query(`insert into fenced_writes values ('stale', 1, 'stale-a', 'stale')`));
    await expect(refused).rejects.toBeInstanceOf(LeaseLostError);
    await expect(refused).rejects.toMatchObject({ reason: 'fence-mismatch' });
    await expect(refused).rejects.toThrow(/fence is now 3, held by stale-b/);
    expect(await fencedWrites('stale')).toEqual([]);
  });

  it.skipIf(!BINARY)(
    `a liveness lock misrouted through the pooler does not let an acquire on the same server connection take a live holder's lease${missing}`,
    async () => {
      // One server connection: the misrouted liveness lock and the challenger's acquire share it,
      // and an advisory lock never conflicts with its own session. With a bigger pool it happens
      // whenever the pooler hands that server connection to an acquire.
      const single = bouncer!.url(`${new URL(direct).pathname.slice(1)}_single`);
      // what a client with liveness on a pooled URL does: its liveness lock lands on a server
      // connection of the pool, and its lease records that key
      const misrouted = new pg.Client({ connectionString: single });
      await misrouted.connect();
      try {
        const key = (await misrouted.query<{ key: string }>('select leasehold.register_liveness(false)::text as key')).rows[0]?.key;
        const granted = await misrouted.query(`select acquired from leasehold.acquire('misrouted', '30 s', 'liveness-via-pooler', $1::bigint)`, [key]);
        expect(granted.rows).toEqual([{ acquired: true }]);
      } finally {
        await misrouted.end();
      }
      // leasehold.holder_gone() sees that the lock belongs to the acquiring session itself
      const challenger = await client(single, { holder: 'challenger', liveness: false });
      const taken = await challenger.acquire('misrouted', { ttl: '30s' });
      expect(taken).toMatchObject({ acquired: false, reason: 'held', holder: 'liveness-via-pooler' });

      // the client itself notices: its liveness witness lands on the server connection that holds
      // its lock, so it turns liveness off (liveness:unusable) and acquires by TTL alone
      const errors: string[] = [];
      const logger = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: (fields: object) => void errors.push(String((fields as { event?: unknown }).event)) };
      const misconfigured = await client(single, { holder: 'liveness-via-pooler', logger });
      await waitFor(() => errors.includes('liveness:unusable'), 10_000);
      const later = await misconfigured.acquire('after-liveness-off', { ttl: '30s' });
      if (!later.acquired) throw new Error('expected to acquire');
      const { rows } = await rawPool(direct, 1).query(`select holder_key from leasehold.leases where name = 'after-liveness-off'`);
      expect(rows).toEqual([{ holder_key: null }]);
      await later.lease.transaction((c) => c.query('select 1'));
    },
  );

  it.skipIf(!BINARY)(`named statements: a second client on the same server session falls back to unnamed ones, nothing fails${missing}`, async () => {
    const single = bouncer!.url(`${new URL(direct).pathname.slice(1)}_single`);
    const [one, two] = [new pg.Pool({ connectionString: single, max: 1 }), new pg.Pool({ connectionString: single, max: 1 })];
    try {
      const text = 'select $1::int * 2 as n';
      expect((await timedQuery(one, text, [1], 5_000, 'pooled', { prepared: true })).rows).toEqual([{ n: 2 }]);
      // the one server session has the name already (from the other client): 42P05, then unnamed
      expect((await timedQuery(two, text, [2], 5_000, 'pooled', { prepared: true })).rows).toEqual([{ n: 4 }]);
      expect([runsUnnamed(one), runsUnnamed(two)]).toEqual([false, true]);
      // and the library's clients on that one session: acquire, decline, release
      const a = await client(single, { holder: 'named-a', liveness: false });
      const b = await client(single, { holder: 'named-b', liveness: false });
      const first = await a.acquire('named', { ttl: '30s' });
      if (!first.acquired) throw new Error('expected to acquire');
      expect(await b.acquire('named', { ttl: '30s' })).toMatchObject({ acquired: false, reason: 'held', holder: 'named-a' });
      expect(await first.lease.release()).toBe(true);
      expect(await b.acquire('named', { ttl: '30s' })).toMatchObject({ acquired: true });
    } finally {
      await Promise.all([one.end(), two.end()]);
    }
  });

  it.skipIf(!BINARY)(`the traffic really went through PgBouncer in transaction mode${missing}`, async () => {
    const admin = new pg.Client({ connectionString: bouncer!.url('pgbouncer') });
    admin.on('error', () => undefined);
    await admin.connect();
    try {
      const database = new URL(direct).pathname.slice(1);
      const pools = (await admin.query<{ database: string; pool_mode: string }>('SHOW POOLS')).rows.filter((r) => r.database === database);
      expect(pools.map((p) => p.pool_mode)).toEqual(['transaction']);
      const counted = await client(pooled, { liveness: false });
      await counted.acquire('counted', { ttl: '1s' });
      const stats = (await admin.query<{ database: string; total_xact_count: string }>('SHOW STATS')).rows.find((r) => r.database === database);
      expect(Number(stats?.total_xact_count)).toBeGreaterThan(0);
    } finally {
      await admin.end();
    }
  });
});
