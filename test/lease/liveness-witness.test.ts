// The liveness witness carries a client's key on only when its grant proves the key was never
// free: it waited for the lock while the liveness session held it. A witness that finds the key
// already free (the session's lock went without the client noticing) must not adopt it: anyone
// could have taken the client's leases in that gap, so they are lost.
import type pg from 'pg';
import { beforeAll, expect, it } from 'vitest';
import { migrate } from '../../src/db/migrations.js';
import { LivenessSession } from '../../src/lease/liveness.js';
import type { Logger } from '../../src/observe/logger.js';
import { silentLogger } from '../../src/observe/logger.js';
import { freshDatabase, rawPool, waitFor } from '../support/db.js';

let url: string;

beforeAll(async () => {
  url = await freshDatabase();
  await migrate(rawPool(url, 1));
});

function session(logged: string[], lost: Array<{ key: string; message: string }>): LivenessSession {
  const quiet = silentLogger();
  const logger: Logger = { ...quiet, info: (fields: unknown) => void logged.push(String((fields as { event?: string }).event)) } as Logger;
  return new LivenessSession({
    connectionString: url,
    applicationName: 'leasehold',
    worker: false,
    connectTimeoutMs: 5_000,
    // no ping during the test: the witness alone decides
    checkIntervalMs: 600_000,
    queryTimeoutMs: 5_000,
    logger,
    onLost: (key, error) => void lost.push({ key, message: error.message }),
    onSuspended: () => undefined,
    onResumed: async () => undefined,
    onReady: () => undefined,
  });
}

function ownerOf(live: LivenessSession): pg.Client {
  return (live as unknown as { state: { client: pg.Client } }).state.client;
}

async function witnessWaiting(key: string): Promise<boolean> {
  const { rows } = await rawPool(url, 1).query(
    `select count(*)::int as n from pg_locks where locktype = 'advisory' and objsubid = 1 and not granted
        and ((classid::bigint << 32) | objid::bigint) = $1::bigint`,
    [key],
  );
  return rows[0].n === 1;
}

/** A started liveness session whose witness waits for its key, with what it logged and lost. */
async function startedWithWitness() {
  const logged: string[] = [];
  const lost: Array<{ key: string; message: string }> = [];
  const live = session(logged, lost);
  await live.start();
  const key = live.key as string;
  await waitFor(() => witnessWaiting(key), 5_000, 20);
  return { logged, lost, live, key };
}

it('hands the key over when the liveness session alone is ended while its witness waits', async () => {
  const { logged, lost, live, key } = await startedWithWitness();
  // confirmed: the session saw the wait (the confirmation polls every 20 ms)
  await new Promise((resolve) => setTimeout(resolve, 200));
  await rawPool(url, 1).query('select pg_terminate_backend($1)', [(ownerOf(live) as unknown as { processID: number }).processID]);
  await waitFor(() => logged.includes('liveness:handover'), 5_000, 20);
  expect(live.key).toBe(key);
  expect(lost).toEqual([]);
  await live.close();
});

it('loses the key, not adopts it, when a witness finds it already free', async () => {
  const { logged, lost, live, key } = await startedWithWitness();
  // the witness ends; before the next one (a second later) the session's lock goes without its
  // client noticing (as when the server ended a session whose end never reached the client):
  // the next witness finds the key free
  await rawPool(url, 1).query(`select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'leasehold liveness witness' and datname = current_database()`);
  await waitFor(async () => !(await witnessWaiting(key)), 5_000, 20);
  await ownerOf(live).query('select pg_advisory_unlock_all()');
  await waitFor(() => lost.length > 0, 5_000, 20);
  expect(lost).toEqual([{ key, message: 'the liveness lock was found free' }]);
  expect(logged).not.toContain('liveness:handover');
  await live.close();
});
