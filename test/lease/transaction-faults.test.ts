// Fenced transactions under faults, on real connections: a network black hole (through the
// fault proxy), COMMIT without an answer, a killed backend, serialization failures, a
// read-only server, and user code that tries to COMMIT on its own.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { FaultProxy } from '../../faults/proxy.js';
import {
  LeaseLostError,
  OutcomeUnknownError,
  silentLogger,
  startWorker,
  TransactionFailedError,
  type Lease,
  type Leasehold,
} from '../../src/index.js';
import { TransactionControlError } from '../../src/errors.js';
import { client, freshDatabase, rawPool, sleep } from '../support/db.js';

let url: string;
let proxy: FaultProxy;
let proxied: string;

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  await rawPool(url, 2).query('create table writes (name text, fence bigint, value text)');
  const target = new URL(url);
  proxy = new FaultProxy(Number(target.port || 5432), target.hostname);
  target.port = String(await proxy.listen());
  proxied = target.toString();
});

afterAll(async () => {
  await proxy?.close();
});

async function take(leasehold: Leasehold, name: string, ttl: string | number = '30s'): Promise<Lease> {
  const result = await leasehold.acquire(name, { ttl });
  if (!result.acquired) throw new Error(`expected to acquire ${name}`);
  return result.lease;
}

async function count(name: string): Promise<number> {
  const { rows } = await rawPool(url, 2).query<{ n: number }>('select count(*)::int as n from writes where name = $1', [name]);
  return rows[0]?.n ?? -1;
}

async function timed<T>(promise: Promise<T>): Promise<{ ms: number; error: unknown }> {
  const started = Date.now();
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  return { ms: Date.now() - started, error };
}

describe('under a network black hole', () => {
  it('times out BEGIN, destroys the connection, and the next transaction does not wait behind it', async () => {
    const leasehold = await client(proxied, { liveness: false, queryTimeout: '1s' });
    const lease = await take(leasehold, 'blackhole-begin');
    await lease.transaction((c) => c.query('select 1')); // the work pool now has an idle connection
    expect(leasehold.pool.totalCount).toBe(1);
    proxy.setMode('blackhole');
    try {
      const { ms, error } = await timed(lease.transaction((c) => c.query(`insert into writes values ('blackhole-begin', $1, 'x')`, [lease.fence])));
      expect(error).toBeInstanceOf(TransactionFailedError);
      expect(error).toMatchObject({ code: 'TRANSACTION_FAILED', failure: 'timeout', leaseHeld: true, retryable: true });
      expect(ms).toBeLessThan(4_000); // 1 s timeout, generous margin for a loaded machine
      expect(leasehold.pool.totalCount).toBe(0); // destroyed, not back in the pool
    } finally {
      proxy.setMode('pass');
    }
    const { ms, error } = await timed(lease.transaction((c) => c.query(`insert into writes values ('blackhole-begin', $1, 'y')`, [lease.fence])));
    expect(error).toBeUndefined();
    expect(ms).toBeLessThan(4_000);
    expect(await count('blackhole-begin')).toBe(1);
  });

  it('reports a COMMIT without an answer as OutcomeUnknownError and never reuses that connection', async () => {
    const leasehold = await client(proxied, { liveness: false, queryTimeout: '1s', poolSize: 1 });
    const lease = await take(leasehold, 'blackhole-commit');
    let error: unknown;
    try {
      ({ error } = await timed(
        lease.transaction(async (c) => {
          await c.query(`insert into writes values ('blackhole-commit', $1, 'x')`, [lease.fence]);
          proxy.setMode('blackhole'); // the COMMIT goes out and nothing comes back
        }),
      ));
    } finally {
      proxy.setMode('pass');
    }
    expect(error).toBeInstanceOf(OutcomeUnknownError);
    expect(error).toMatchObject({ code: 'OUTCOME_UNKNOWN', leaseName: 'blackhole-commit', fence: lease.fence });
    expect((error as Error).message).toMatch(/still held by this process/);
    expect(leasehold.pool.totalCount).toBe(0);
    // a pool of one: had the stuck connection gone back, this would queue behind its COMMIT
    const next = await timed(lease.transaction((c) => c.query(`insert into writes values ('blackhole-commit', $1, 'y')`, [lease.fence])));
    expect(next.error).toBeUndefined();
    expect(next.ms).toBeLessThan(4_000);
  });

  it('times out a statement of the caller that hangs, with statementTimeout', async () => {
    const leasehold = await client(proxied, { liveness: false, queryTimeout: '1s' });
    const lease = await take(leasehold, 'blackhole-statement');
    let error: unknown;
    try {
      ({ error } = await timed(
        lease.transaction(
          async (c) => {
            proxy.setMode('blackhole');
            await c.query(`insert into writes values ('blackhole-statement', $1, 'x')`, [lease.fence]);
          },
          { statementTimeout: 500 },
        ),
      ));
    } finally {
      proxy.setMode('pass');
    }
    expect(error).toMatchObject({ code: 'TRANSACTION_FAILED', failure: 'timeout', leaseHeld: true });
    expect(leasehold.pool.totalCount).toBe(0);
    expect(await count('blackhole-statement')).toBe(0);
  });
});

describe('typed errors inside lease.transaction()', () => {
  it('says the connection broke, nothing was written and the lease is still held', async () => {
    const leasehold = await client(url, { liveness: false });
    const lease = await take(leasehold, 'killed');
    const error = await lease
      .transaction(async (c) => {
        await c.query(`insert into writes values ('killed', $1, 'x')`, [lease.fence]);
        const { rows } = await c.query<{ pid: number }>('select pg_backend_pid() as pid');
        await rawPool(url, 2).query('select pg_terminate_backend($1)', [rows[0]?.pid]);
        await c.query(`insert into writes values ('killed', $1, 'y')`, [lease.fence]);
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransactionFailedError);
    expect(error).toMatchObject({ failure: 'connection-lost', leaseHeld: true, leaseName: 'killed', fence: lease.fence });
    expect((error as Error).message).toMatch(/Nothing it wrote was committed.*still held/);
    expect(lease.lost).toBe(false);
    expect(await count('killed')).toBe(0);
    await lease.transaction((c) => c.query(`insert into writes values ('killed', $1, 'z')`, [lease.fence]));
    expect(await count('killed')).toBe(1);
  });

  it('reports a serialization failure (40001) under SERIALIZABLE defaults as retryable, nothing written', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 4, options: '-c default_transaction_isolation=serializable' });
    pool.on('error', () => undefined);
    try {
      const leasehold = await client(url, { liveness: false, pool });
      const a = await take(leasehold, 'skew-a');
      const b = await take(leasehold, 'skew-b');
      let readA!: () => void;
      let readB!: () => void;
      const aRead = new Promise<void>((resolve) => (readA = resolve));
      const bRead = new Promise<void>((resolve) => (readB = resolve));
      // write skew: each reads what the other writes
      const first = a.transaction(async (c) => {
        await c.query(`select count(*) from writes where name = 'skew-b'`);
        readA();
        await bRead;
        await c.query(`insert into writes values ('skew-a', $1, 'a')`, [a.fence]);
      });
      const second = b.transaction(async (c) => {
        await c.query(`select count(*) from writes where name = 'skew-a'`);
        readB();
        await aRead;
        await first.catch(() => undefined);
        await c.query(`insert into writes values ('skew-b', $1, 'b')`, [b.fence]);
      });
      const results = await Promise.allSettled([first, second]);
      const failures = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => r.reason as unknown);
      expect(failures).toHaveLength(1);
      expect(failures[0]).toBeInstanceOf(TransactionFailedError);
      expect(failures[0]).toMatchObject({ failure: 'serialization-failure', retryable: true, leaseHeld: true });
      expect(failures[0]).toHaveProperty('cause.code', '40001');
      expect((await count('skew-a')) + (await count('skew-b'))).toBe(1);
      expect(a.lost || b.lost).toBe(false);
    } finally {
      await pool.end();
    }
  });

  it('reports a read-only server (25006) as not retryable, nothing written', async () => {
    const pool = new pg.Pool({ connectionString: url, max: 2, options: '-c default_transaction_read_only=on' });
    pool.on('error', () => undefined);
    try {
      const leasehold = await client(url, { liveness: false, pool: pool });
      const lease = await take(leasehold, 'read-only');
      const error = await lease.transaction((c) => c.query(`insert into writes values ('read-only', 1, 'x')`)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(TransactionFailedError);
      expect(error).toMatchObject({ failure: 'read-only', retryable: false, leaseHeld: true });
      expect(error).toHaveProperty('cause.code', '25006');
      expect(await count('read-only')).toBe(0);
    } finally {
      await pool.end();
    }
  });
});

describe('transaction control inside a fenced transaction', () => {
  it('refuses COMMIT from user code, and a write after it, so nothing runs unfenced', async () => {
    const leasehold = await client(url, { liveness: false });
    const lease = await take(leasehold, 'early-commit');
    const seen: unknown[] = [];
    const error = await lease
      .transaction(async (c) => {
        await c.query(`insert into writes values ('early-commit', $1, 'before')`, [lease.fence]);
        await c.query('COMMIT').catch((e: unknown) => seen.push(e));
        await c.query(`insert into writes values ('early-commit', $1, 'after')`, [lease.fence]).catch((e: unknown) => seen.push(e));
        return 'reported success';
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransactionControlError);
    expect(error).toMatchObject({ code: 'TRANSACTION_CONTROL', leaseName: 'early-commit' });
    expect(seen).toHaveLength(2);
    expect(seen.every((e) => e instanceof TransactionControlError)).toBe(true);
    expect(await count('early-commit')).toBe(0);
    expect(lease.lost).toBe(false);
  });

  it('refuses a multi-statement string that commits midway, and one that ends the transaction in any spelling', async () => {
    const leasehold = await client(url, { liveness: false });
    const lease = await take(leasehold, 'sneaky');
    for (const text of [
      `insert into writes values ('sneaky', 1, 'a'); commit; insert into writes values ('sneaky', 1, 'b')`,
      'end',
      'rollback',
      'abort',
      'begin',
      'start transaction',
      "prepare transaction 'x'",
      '/* comment */ COMMIT  ',
    ]) {
      const error = await lease.transaction((c) => c.query(text)).catch((e: unknown) => e);
      expect(error, text).toBeInstanceOf(TransactionControlError);
    }
    expect(await count('sneaky')).toBe(0);
  });

  it('still allows savepoints, DO blocks and text that merely mentions commit', async () => {
    const leasehold = await client(url, { liveness: false });
    const lease = await take(leasehold, 'allowed');
    await lease.transaction(async (c) => {
      await c.query('savepoint s1');
      await c.query(`insert into writes values ('allowed', $1, 'rolled back')`, [lease.fence]);
      await c.query('rollback to savepoint s1');
      await c.query('release savepoint s1');
      await c.query(`do $$ begin perform 1; end $$`);
      await c.query(`insert into writes values ('allowed', $1, 'commit; begin')`, [lease.fence]);
      await c.query({ text: `select case when true then 1 end -- commit` });
    });
    const { rows } = await rawPool(url, 2).query(`select value from writes where name = 'allowed'`);
    expect(rows).toEqual([{ value: 'commit; begin' }]);
  });

  it('refuses release() of the connection from user code', async () => {
    const leasehold = await client(url, { liveness: false });
    const lease = await take(leasehold, 'release-inside');
    const error = await lease.transaction(async (c) => c.release()).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(TransactionControlError);
    await sleep(10);
    expect(lease.lost).toBe(false);
  });

  it('still refuses a stale holder with LeaseLostError', async () => {
    const a = await client(url, { liveness: false });
    const b = await client(url);
    const lease = await take(a, 'stale');
    await b.forceRelease('stale');
    expect(await lease.transaction((c) => c.query('select 1')).catch((e: unknown) => e)).toBeInstanceOf(LeaseLostError);
  });
});

describe("the worker's ctx.transaction()", () => {
  it('refuses a COMMIT inside a scheduled run, and the run fails with TransactionControlError', async () => {
    const outcomes: unknown[] = [];
    const worker = await startWorker({
      connectionString: url,
      logger: silentLogger(),
      handleSignals: false,
      shutdownGrace: '2s',
      jobs: [
        {
          name: 'worker-commit',
          every: '1s',
          handler: async (ctx) => {
            const error = await ctx
              .transaction(async (c) => {
                await c.query(`insert into writes values ('worker-commit', $1, 'before')`, [ctx.fence]);
                await c.query('commit').catch(() => undefined);
                await c.query(`insert into writes values ('worker-commit', $1, 'after')`, [ctx.fence]).catch(() => undefined);
              })
              .catch((e: unknown) => e);
            outcomes.push(error);
          },
        },
      ],
    });
    try {
      const deadline = Date.now() + 10_000;
      while (outcomes.length === 0 && Date.now() < deadline) await sleep(50);
    } finally {
      await worker.stop();
    }
    expect(outcomes[0]).toBeInstanceOf(TransactionControlError);
    expect(await count('worker-commit')).toBe(0);
  });
});
