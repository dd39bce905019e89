// Whether a connection's backend holds a liveness lock itself (leasehold.liveness_locks()): the
// liveness session asks it at start and on every ping, its witness at connect. On a connection
// through a transaction pooler the answer tells which backend the lock landed on.
import type pg from 'pg';

/** Whether the backend behind `client` holds the session lock on `key` itself, with its pid and the database clock. */
export async function holdsKey(client: pg.Client, key: string, timeoutMs: number): Promise<{ ours: boolean; pid: number; databaseTime: Date }> {
  const { rows } = await client.query<{ ours: boolean; pid: number; database_time: Date }>({
    text: `select clock_timestamp() as database_time, pg_backend_pid() as pid,
                  exists (select 1 from leasehold.liveness_locks() k where k.pid = pg_backend_pid() and k.key = $1::bigint) as ours`,
    values: [key],
    query_timeout: timeoutMs,
  } as pg.QueryConfig);
  return { ours: rows[0]?.ours === true, pid: rows[0]?.pid ?? 0, databaseTime: rows[0]?.database_time ?? new Date(Number.NaN) };
}
