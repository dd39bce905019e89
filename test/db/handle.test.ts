// The database handle: a read model whose statement is blocked (a lock held by another session)
// fails with a typed timeout instead of hanging, and the pool it ran on stays usable. No timing
// assertion beyond "it settled while the lock was still held": the lock is held until the test
// lets it go, so a statement without a timeout would wait for that.
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDashboard } from '../../src/dashboard/server.js';
import { QueryTimeoutError } from '../../src/db/connection.js';
import { dbHandle, timedQuery } from '../../src/db/handle.js';
import { runsUnnamed } from '../../src/db/prepared.js';
import { inTransaction } from '../../src/db/transaction.js';
import { DatabaseUnavailableError, InvalidArgumentError } from '../../src/errors.js';
import { silentLogger } from '../../src/observe/logger.js';
import { jobHistory, jobStatus, unscheduledLeases } from '../../src/monitor/status.js';
import { startWorker } from '../../src/worker/worker.js';
import { client, connections, freshDatabase, rawPool, waitFor } from '../support/db.js';

let url: string;
let locker: pg.Client;

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  locker = (await connections(url, 1))[0]!;
});

afterAll(async () => {
  await locker.query('rollback').catch(() => undefined);
});

/** Holds an ACCESS EXCLUSIVE lock on `table` until the returned function is called. */
async function lockTable(table: string): Promise<() => Promise<void>> {
  await locker.query('begin');
  await locker.query(`lock table ${table} in access exclusive mode`);
  let held = true;
  return async () => {
    if (!held) return;
    held = false;
    await locker.query('rollback');
  };
}

/** Settles `promise`, noting whether `release` had been called by then. */
async function settleWhileLocked<T>(promise: Promise<T>, stillLocked: () => boolean): Promise<{ error: unknown; locked: boolean }> {
  try {
    await promise;
    return { error: undefined, locked: stillLocked() };
  } catch (error) {
    return { error, locked: stillLocked() };
  }
}

describe('read models through the handle', () => {
  it('a blocked jobStatus fails with a typed timeout while the lock is held, and the pool (one connection) stays usable', { timeout: 60_000 }, async () => {
    const pool = rawPool(url, 1);
    let locked = true;
    const unlock = await lockTable('leasehold.jobs');
    try {
      const outcome = await settleWhileLocked(jobStatus(pool, undefined, { timeout: '300ms' }), () => locked);
      expect(outcome.locked).toBe(true);
      expect(outcome.error).toBeInstanceOf(QueryTimeoutError);
      expect(outcome.error).toBeInstanceOf(DatabaseUnavailableError);
      expect((outcome.error as Error).message).toMatch(/did not answer within 300 ms/);
      // the timed-out connection was closed, not handed back: the pool's only slot is free
      const fresh = await settleWhileLocked(pool.query('select 1 as one'), () => locked);
      expect(fresh).toEqual({ error: undefined, locked: true });
      // the other read models are bounded the same way
      const leases = await settleWhileLocked(unscheduledLeases(pool, undefined, { timeout: 300 }), () => locked);
      expect(leases.error).toBeInstanceOf(QueryTimeoutError);
      expect(leases.locked).toBe(true);
    } finally {
      locked = false;
      await unlock();
    }
    expect(await jobStatus(pool, undefined, { timeout: '5s' })).toEqual([]);
    expect(await jobHistory(pool, { limit: 5, timeout: '5s' })).toEqual([]);
  });

  it('refuses a timeout outside its bounds before querying', async () => {
    await expect(jobStatus(rawPool(url, 1), undefined, { timeout: '20m' })).rejects.toThrow(InvalidArgumentError);
    await expect(jobStatus(rawPool(url, 1), undefined, { timeout: '20m' })).rejects.toThrow(/timeout must be between 50ms and 10m/);
  });

  it('on a connection the caller holds, the statement times out too (the caller discards the connection)', { timeout: 60_000 }, async () => {
    const [held] = await connections(url, 1);
    let locked = true;
    const unlock = await lockTable('leasehold.jobs');
    try {
      const outcome = await settleWhileLocked(jobStatus(held!, 'x', { timeout: 300 }), () => locked);
      expect(outcome).toMatchObject({ locked: true });
      expect(outcome.error).toBeInstanceOf(QueryTimeoutError);
    } finally {
      locked = false;
      await unlock();
    }
  });
});

describe('named statements (acquire, release, renewal)', () => {
  it('are parsed once per connection, and a session that lost them (DEALLOCATE, a pooler) makes the pool send them unnamed, without an error', async () => {
    const pool = rawPool(url, 1);
    const text = 'select $1::int + 1 as n';
    const prepared = async () => (await pool.query<{ n: string }>(`select count(*)::int as n from pg_prepared_statements where statement = $1`, [text])).rows[0]!.n;
    expect((await timedQuery(pool, text, [1], 5_000, 'test', { prepared: true })).rows).toEqual([{ n: 2 }]);
    expect((await timedQuery(pool, text, [2], 5_000, 'test', { prepared: true })).rows).toEqual([{ n: 3 }]);
    expect(await prepared()).toBe(1);
    expect(runsUnnamed(pool)).toBe(false);
    await pool.query('deallocate all'); // the client still believes its statement parsed: 26000 on the next Bind
    expect((await timedQuery(pool, text, [3], 5_000, 'test', { prepared: true })).rows).toEqual([{ n: 4 }]);
    expect(runsUnnamed(pool)).toBe(true);
    expect(await prepared()).toBe(0);
  });
});

describe('transactions through the handle', () => {
  it('a blocked statement inside inTransaction is cancelled by the server; the connection is reused', { timeout: 60_000 }, async () => {
    const pool = rawPool(url, 1);
    const before = await pool.query<{ pid: number }>('select pg_backend_pid() as pid');
    let locked = true;
    const unlock = await lockTable('leasehold.jobs');
    try {
      const outcome = await settleWhileLocked(
        inTransaction(pool, 'the test database', (c) => c.query('select count(*) from leasehold.jobs'), 300),
        () => locked,
      );
      expect(outcome.locked).toBe(true);
      expect(outcome.error).toBeInstanceOf(QueryTimeoutError);
      // the server cancelled the statement (57014), so the session was clean and went back to the pool
      expect(((outcome.error as Error).cause as { code?: string }).code).toBe('57014');
      const after = await pool.query<{ pid: number; timeout: string }>(`select pg_backend_pid() as pid, current_setting('statement_timeout') as timeout`);
      expect(after.rows[0]!.pid).toBe(before.rows[0]!.pid);
      // the timeout was the transaction's own (set_config(..., true)): the session keeps its setting
      expect(after.rows[0]!.timeout).toBe('0');
    } finally {
      locked = false;
      await unlock();
    }
    const handle = dbHandle(pool, { where: 'the test database', timeoutMs: 5_000 });
    expect(await handle.transaction(async (c) => (await c.query<{ n: number }>('select count(*)::int as n from leasehold.jobs')).rows[0]!.n)).toBe(0);
  });
});

describe("a job's plain transaction (overlap 'allow')", () => {
  it("times its statements out after the job's ttl", { timeout: 60_000 }, async () => {
    const failures: unknown[] = [];
    const worker = await startWorker({
      connectionString: url,
      logger: silentLogger(),
      handleSignals: false,
      shutdownGrace: '2s',
      jobs: [
        {
          name: 'sleepy-allow',
          every: '1s',
          ttl: '400ms',
          overlap: 'allow',
          handler: async (ctx) => {
            if (failures.length > 0) return;
            await ctx.transaction((c) => c.query('select pg_sleep(30)')).catch((error: unknown) => failures.push(error));
          },
        },
      ],
    });
    try {
      await waitFor(() => failures.length > 0, 30_000, 50);
      expect(failures[0]).toBeInstanceOf(QueryTimeoutError);
      expect((failures[0] as Error).message).toMatch(/did not answer within 400 ms/);
    } finally {
      await worker.stop();
    }
  });
});

describe('the dashboard through the handle', () => {
  it('answers 504 for a blocked query within queryTimeout, and serves the next request on the same one-connection pool', { timeout: 60_000 }, async () => {
    const pool = rawPool(url, 1);
    const dashboard = await startDashboard({ pool, port: 0, queryTimeout: '300ms', refresh: '2s' });
    let locked = true;
    const unlock = await lockTable('leasehold.jobs');
    try {
      const res = await fetch(`${dashboard.url}api/jobs`, { headers: { 'x-leasehold-dashboard': '1' } });
      expect(locked).toBe(true);
      expect(res.status).toBe(504);
      expect(((await res.json()) as { error: string }).error).toBe('the database did not answer within 300ms');
      const health = await fetch(`${dashboard.url}healthz`);
      expect(health.status).toBe(200);
      // the refresh option takes a duration: the page reloads every 2 s
      expect(await (await fetch(dashboard.url, { headers: { 'sec-fetch-mode': 'navigate' } })).text()).toContain('data-refresh-ms="2000"');
    } finally {
      locked = false;
      await unlock();
      await dashboard.close();
    }
  });

  it('refuses a refresh or queryTimeout outside its bounds, naming the bounds', async () => {
    await expect(startDashboard({ pool: rawPool(url, 1), port: 0, refresh: 100 })).rejects.toThrow(/refresh must be between 250ms and 1h \(got 100ms\)/);
    await expect(startDashboard({ pool: rawPool(url, 1), port: 0, queryTimeout: 'soon' })).rejects.toThrow(InvalidArgumentError);
    await expect(startDashboard({ pool: rawPool(url, 1), port: 0, refreshMs: 1000 } as never)).rejects.toThrow(/unknown option 'refreshMs' \(did you mean 'refresh'\?\)/);
    await expect(startDashboard({ pool: rawPool(url, 1), port: 0, queryTimeoutMs: 1000 } as never)).rejects.toThrow(/unknown option 'queryTimeoutMs' \(did you mean 'queryTimeout'\?\)/);
  });
});
