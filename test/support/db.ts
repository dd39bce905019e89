// Per-file test databases and clients that are closed after the file.
import { afterAll, inject } from 'vitest';
import pg from 'pg';
import { createLeasehold, type Leasehold, type LeaseholdOptions } from '../../src/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { createTestDatabase } from '../../src/testing.js';

const databases: Array<{ drop(): Promise<void> }> = [];
const open: Array<{ close(): Promise<void> }> = [];
// Registered when the file imports this module: an afterAll registered inside a beforeAll (where
// freshDatabase() is usually called) would never run, and the database would be left behind.
afterAll(async () => {
  await Promise.allSettled(open.splice(0).map((item) => item.close()));
  await Promise.all(databases.splice(0).map((db) => db.drop()));
});

/** A fresh database for this test file, dropped after it. */
export async function freshDatabase(): Promise<string> {
  const db = await createTestDatabase(inject('serverUrl'));
  databases.push(db);
  return db.url;
}

/** A leasehold client on `url` with a silent logger, closed after the file. */
export async function client(url: string, options: LeaseholdOptions = {}): Promise<Leasehold> {
  const leasehold = await createLeasehold({ connectionString: url, logger: silentLogger(), ...options });
  open.push(leasehold);
  return leasehold;
}

const pools = new Map<string, pg.Pool>();

/**
 * A plain pg pool on `url` (one per url and size, shared within the file, so that helpers
 * called in polling loops do not open connection after connection), closed after the file.
 */
export function rawPool(url: string, max = 20): pg.Pool {
  const key = `${max} ${url}`;
  const existing = pools.get(key);
  if (existing) return existing;
  const pool = new pg.Pool({ connectionString: url, max });
  pool.on('error', () => undefined);
  pools.set(key, pool);
  open.push({
    close: () => {
      pools.delete(key);
      return pool.end();
    },
  });
  return pool;
}

/** Independent connections (not a pool): each is its own PostgreSQL session. */
export async function connections(url: string, count: number): Promise<pg.Client[]> {
  const clients = await Promise.all(
    Array.from({ length: count }, async () => {
      const c = new pg.Client({ connectionString: url });
      c.on('error', () => undefined);
      await c.connect();
      return c;
    }),
  );
  open.push({ close: async () => void (await Promise.allSettled(clients.map((c) => c.end()))) });
  return clients;
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls `check` until it returns a truthy value or `timeoutMs` passes. */
type Falsy = undefined | null | false | 0 | '';
export async function waitFor<T>(check: () => Promise<T | Falsy> | T | Falsy, timeoutMs = 10_000, intervalMs = 20): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value as T;
    if (Date.now() > deadline) throw new Error(`condition not met within ${timeoutMs} ms`);
    await sleep(intervalMs);
  }
}
