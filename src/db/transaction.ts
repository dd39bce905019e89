// A plain transaction on a pooled connection, through the database handle (./handle.ts):
// a bounded checkout (a failure to connect is a DatabaseUnavailableError), BEGIN, fn, COMMIT,
// ROLLBACK on any error; every statement has a timeout, and a connection that timed out or
// broke is destroyed, not reused.
import type pg from 'pg';
import { dbHandle } from './handle.js';

/** Statement timeout of a plain transaction when the caller gives none. */
export const DEFAULT_TRANSACTION_TIMEOUT_MS = 30_000;

export async function inTransaction<T>(
  pool: pg.Pool,
  where: string,
  fn: (client: pg.PoolClient) => Promise<T>,
  timeoutMs = DEFAULT_TRANSACTION_TIMEOUT_MS,
): Promise<T> {
  return dbHandle(pool, { where, timeoutMs }).transaction(fn);
}
