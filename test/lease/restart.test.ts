// A real database restart on a server of this test's own. The holder's liveness session is
// ended by the server (57P01); its lease row survives, and nobody else can take it before its
// expiry (advisory locks of an earlier server incarnation prove nothing). So the holder keeps it:
// its next liveness session takes it back (reconfirm_leases) with the new key, its signal never
// fires, and a holder that dies afterwards is freed by liveness at once again. A liveness session
// ended while the server stays up (pg_terminate_backend) passes its lock to the client's witness
// session in the same step: nothing is lost. When both are ended on a live server, anyone may
// take the lease from that moment, and the holder loses it, as before.
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createLeasehold, type Leasehold } from '../../src/index.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.js';
import { silentLogger } from '../../src/observe/logger.js';
import { controlOfLease } from '../../src/lease/lease.js';
import { waitFor } from '../support/db.js';

let server: EmbeddedPostgres;
let leasehold: Leasehold;
let peer: Leasehold;

beforeAll(async () => {
  server = await startEmbeddedPostgres();
  leasehold = await createLeasehold({ connectionString: server.connectionString, logger: silentLogger(), queryTimeout: '1s' });
  peer = await createLeasehold({ connectionString: server.connectionString, logger: silentLogger(), queryTimeout: '1s', liveness: false });
});

afterAll(async () => {
  await leasehold?.close();
  await peer?.close();
  await server?.stop();
});

async function row(name: string): Promise<{ holder_key: string | null; holder_alive: boolean | null; fence: string }> {
  const admin = new pg.Client({ connectionString: server.connectionString });
  await admin.connect();
  try {
    const { rows } = await admin.query('select holder_key::text, holder_alive, fence::text from leasehold.lease_status where name = $1', [name]);
    return rows[0];
  } finally {
    await admin.end();
  }
}

for (const mode of ['fast', 'immediate'] as const) {
  it(`keeps a held lease across a ${mode} restart: taken back by the next liveness session, never lost`, async () => {
    const name = `restart-${mode}`;
    const first = await leasehold.acquire(name, { ttl: '4s', heartbeat: true, heartbeatInterval: 200 });
    if (!first.acquired) throw new Error('expected to acquire');
    const { lease } = first;
    const keyBefore = controlOfLease(lease).grant.holderKey;
    const events: string[] = [];
    const offLost = leasehold.on('liveness:lost', () => events.push('liveness:lost'));
    const offReady = leasehold.on('liveness:ready', () => events.push('liveness:ready'));

    await server.restart(mode);

    // the new session took it back: recorded under the new key, on the new incarnation
    await waitFor(async () => {
      const r = await row(name).catch(() => undefined);
      return r?.holder_alive === true && r.holder_key !== keyBefore ? r : undefined;
    }, 10_000, 100);
    offLost();
    offReady();
    expect(lease.lost).toBe(false);
    expect(lease.signal.aborted).toBe(false);
    expect(events).toEqual(['liveness:lost', 'liveness:ready']);
    expect(controlOfLease(lease).grant.holderKey).toBe((await row(name)).holder_key);
    // others see it held; the heartbeat goes on renewing it past its first ttl
    const other = await peer.acquire(name, { ttl: '30s' });
    expect(other.acquired).toBe(false);
    const renewedUntil = lease.expiresAt.getTime();
    await new Promise((resolve) => setTimeout(resolve, 4_500));
    expect(lease.lost).toBe(false);
    expect(lease.expiresAt.getTime()).toBeGreaterThan(renewedUntil);
    await lease.release();
  });
}

async function terminate(applicationNames: string[]): Promise<number> {
  const admin = new pg.Client({ connectionString: server.connectionString });
  await admin.connect();
  try {
    const { rowCount } = await admin.query('select pg_terminate_backend(pid) from pg_stat_activity where application_name = any ($1)', [applicationNames]);
    return rowCount ?? 0;
  } finally {
    await admin.end();
  }
}

it('keeps the lease when its liveness session alone is ended on a live server: its witness holds the lock from that instant', async () => {
  const name = 'terminated-session';
  const first = await leasehold.acquire(name, { ttl: '30s', heartbeat: true });
  if (!first.acquired) throw new Error('expected to acquire');
  const { lease } = first;
  const key = controlOfLease(lease).grant.holderKey;
  // the witness waits for the key (liveness-witness.ts)
  await waitFor(async () => (await terminateCount('leasehold liveness witness')) === 1, 5_000, 50);
  expect(await terminate(['leasehold liveness'])).toBe(1);
  // nobody can take it meanwhile: the lock never was free
  for (let i = 0; i < 20; i++) {
    const other = await peer.acquire(name, { ttl: '30s' });
    expect(other.acquired).toBe(false);
  }
  await waitFor(() => leasehold.acquire(`after-terminate-${Math.random()}`, { ttl: '30s' }).then((r) => r.acquired && controlOfLease(r.lease).grant.holderKey === key), 5_000, 50);
  expect(lease.lost).toBe(false);
  expect((await row(name)).holder_alive).toBe(true);
  await lease.release();
});

it('loses the lease when the liveness session and its witness are both ended on a live server', async () => {
  const name = 'terminated-both';
  const first = await leasehold.acquire(name, { ttl: '30s', heartbeat: true });
  if (!first.acquired) throw new Error('expected to acquire');
  const { lease } = first;
  await waitFor(async () => (await terminateCount('leasehold liveness witness')) === 1, 5_000, 50);
  expect(await terminate(['leasehold liveness', 'leasehold liveness witness'])).toBe(2);
  await waitFor(() => lease.lost, 5_000);
  expect(lease.lostReason?.reason).toBe('liveness-lost');
  const taken = await waitFor(async () => {
    const r = await peer.acquire(name, { ttl: '30s' });
    return r.acquired ? r : undefined;
  }, 5_000, 50);
  expect(taken.lease.fence).toBe(lease.fence + 1);
  await taken.lease.release();
  // and the client's next session is back
  await waitFor(async () => {
    const r = await leasehold.acquire(`after-terminate-${Math.random()}`, { ttl: '30s' });
    return r.acquired && controlOfLease(r.lease).grant.holderKey !== null;
  }, 15_000, 200);
});

async function terminateCount(applicationName: string): Promise<number> {
  const admin = new pg.Client({ connectionString: server.connectionString });
  await admin.connect();
  try {
    const { rows } = await admin.query('select count(*)::int as n from pg_stat_activity where application_name = $1', [applicationName]);
    return rows[0].n;
  } finally {
    await admin.end();
  }
}
