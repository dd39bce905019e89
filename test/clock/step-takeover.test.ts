// The bound on two believers after a forward step of the database clock (docs/operating.md
// "Database clock steps"): the step expires a lease at once on the server, so a peer may take it
// at once; the holder learns of the step from its next read of the database clock (the liveness
// ping, or without liveness the clock probe, every max(1 s, min(5 s, queryTimeout))) and loses
// the lease then. So the holder believes for at most one probe interval plus the probe's
// answer (a probe that times out loses the leases too), and fenced writes refuse it meanwhile.
// Measured against a peer that asks for the lease every 10 ms, on a server of this test's own
// under libfaketime.
import { expect, it } from 'vitest';
import { LeaseLostError, type Leasehold } from '../../src/index.js';
import { client, sleep, waitFor } from '../support/db.js';
import { steppedServer } from '../support/stepped-server.js';

const server = steppedServer('leasehold-step-takeover-');

const QUERY_TIMEOUT_MS = 1_000;
/** The clock probe's interval for that timeout: max(1 s, min(5 s, queryTimeout)). */
const PROBE_MS = Math.max(1_000, Math.min(5_000, QUERY_TIMEOUT_MS));
/** The stated bound: one probe interval plus its answer, which the query timeout caps. */
const BOUND_MS = PROBE_MS + QUERY_TIMEOUT_MS;
/** A timer that fires late on a loaded machine, and the holder's event loop noticing the abort. */
const SLACK_MS = 750;

it.skipIf(!server.libfaketime).each([{ liveness: true }, { liveness: false }])(
  'a peer takes a lease at once after a forward step; the holder stops believing within one clock probe and its answer, liveness $liveness (uses libfaketime)',
  async ({ liveness }) => {
    const url = server.url;
    const overlaps: number[] = [];
    const holder: Leasehold = await client(url, { queryTimeout: `${QUERY_TIMEOUT_MS}ms`, liveness });
    const peer: Leasehold = await client(url, { queryTimeout: `${QUERY_TIMEOUT_MS}ms`, liveness: false });
    try {
      for (const [round, offset] of ['+3600s', '+7200s', '+10800s'].entries()) {
        const name = `step-takeover-${liveness ? 'live' : 'nolive'}-${round}`;
        // a long ttl: neither its heartbeat (200 s away) nor its local deadline ends the belief
        const held = await holder.acquire(name, { ttl: '10m', heartbeat: true });
        if (!held.acquired) throw new Error('expected to acquire');
        const { lease } = held;
        let lostAt = Number.NaN;
        lease.signal.addEventListener('abort', () => (lostAt = performance.now()), { once: true });
        // a step lands anywhere within the probe's period
        await sleep(200 + Math.random() * PROBE_MS);
        const steppedAt = performance.now();
        server.set(offset);
        // the peer's first acquire that went out after the step and was granted
        let sentAt = Number.NaN;
        await waitFor(async () => {
          const at = performance.now();
          const answer = await peer.acquire(name, { ttl: '10m' });
          if (!answer.acquired) return false;
          sentAt = at;
          return true;
        }, 5_000, 10);
        await waitFor(() => lease.lost, 10_000, 10);
        expect(lease.lostReason?.reason).toBe('clock-step');
        // the peer's grant came first (the server knew at once); the overlap is measured from
        // the moment its acquire was sent, so it is never smaller than the real one
        expect(sentAt - steppedAt).toBeLessThan(1_000);
        const overlap = Math.max(0, lostAt - sentAt);
        overlaps.push(Math.round(overlap));
        expect(overlap).toBeLessThanOrEqual(BOUND_MS + SLACK_MS);
        // meanwhile and after, the stale holder's fenced writes are refused
        await expect(lease.transaction(async () => undefined)).rejects.toBeInstanceOf(LeaseLostError);
        await peer.forceRelease(name);
      }
      // eslint-disable-next-line no-console
      console.log(`clock step takeover (liveness ${liveness}): two believers ${overlaps.join(', ')} ms (bound ${BOUND_MS} ms + ${SLACK_MS} ms slack)`);
    } finally {
      await Promise.allSettled([holder.close(), peer.close()]);
      server.set('+0s');
    }
  },
  120_000,
);
