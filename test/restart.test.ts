// A real database restart on a server of this test's own: the host process survives, its
// leases count as lost on its side (its liveness session is gone), nobody else takes them
// before their TTL (advisory locks of an earlier server incarnation prove nothing), and it
// works again afterwards.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createLeasehold, type Leasehold } from '../src/index.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../src/db/embedded.js';
import { silentLogger } from '../src/observe/logger.js';
import { controlOfLease } from '../src/lease/lease.js';
import { waitFor } from './support/db.js';

let server: EmbeddedPostgres;
let leasehold: Leasehold;

beforeAll(async () => {
  server = await startEmbeddedPostgres();
  leasehold = await createLeasehold({ connectionString: server.connectionString, logger: silentLogger(), queryTimeout: '1s' });
});

afterAll(async () => {
  await leasehold?.close();
  await server?.stop();
});

it('survives a database restart: leases are lost, the process lives on, new leases work', async () => {
  const first = await leasehold.acquire('restart', { ttl: '4s', heartbeat: true, heartbeatInterval: 200 });
  if (!first.acquired) throw new Error('expected to acquire');
  const { lease } = first;
  const lostEvents: string[] = [];
  leasehold.on('liveness:lost', () => lostEvents.push('liveness'));

  await server.restart();

  await waitFor(() => lease.lost, 10_000);
  expect(lease.signal.aborted).toBe(true);
  expect(['liveness-lost', 'renew-failed', 'renew-timeout']).toContain(lease.lostReason?.reason);
  expect(lostEvents).toEqual(['liveness']);
  // The lease row survived the restart, and the holder's liveness lock did not. That proves
  // nothing about the holder (it may still be running): the TTL governs, so nobody takes the
  // lease before its expiry, and then the next acquisition gets the next fence.
  const early = await waitFor(() => leasehold.acquire('restart', { ttl: '30s' }).catch(() => undefined), 10_000, 100);
  if (early.acquired) throw new Error('taken over right after the restart, before the TTL');
  expect(early.reason).toBe('held');
  const expiresAt = early.until as Date;
  const again = await waitFor(async () => {
    const r = await leasehold.acquire('restart', { ttl: '30s' }).catch(() => undefined);
    return r?.acquired ? r : undefined;
  }, 15_000, 100);
  expect(again.lease.acquiredAt.getTime()).toBeGreaterThanOrEqual(expiresAt.getTime());
  expect(again.lease.fence).toBe(lease.fence + 1);
  await waitFor(async () => {
    const r = await leasehold.acquire(`after-restart-${Math.random()}`, { ttl: '30s' });
    return r.acquired && controlOfLease(r.lease).grant.holderKey !== null; // the liveness session is back
  }, 15_000, 200);
});
