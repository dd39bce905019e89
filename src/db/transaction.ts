// A plain transaction on a pooled connection: checkout (a failure to connect is a
// DatabaseUnavailableError), BEGIN, fn, COMMIT, ROLLBACK on any error, and an 'error' listener
// while the connection is out of the pool (an idle checked-out client without one would crash
// the process when the server goes away).
import type pg from 'pg';
import { unavailable } from './connection.js';

export async function inTransaction<T>(pool: pg.Pool, where: string, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  let client: pg.PoolClient;
  try {
    client = await pool.connect();
  } catch (error) {
    throw unavailable(where, error);
  }
  const onError = () => undefined;
  client.on('error', onError);
  try {
    await client.query('begin');
    const value = await fn(client);
    await client.query('commit');
    return value;
  } catch (error) {
    await client.query('rollback').catch(() => undefined);
    throw error;
  } finally {
    client.off('error', onError);
    client.release();
  }
}
