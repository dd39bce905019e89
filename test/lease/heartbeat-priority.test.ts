// Heartbeats have their own connections: a burst of the process's own lease calls (acquire,
// claims) queued on the control pool cannot delay the renewal of a lease it already holds.
import { beforeAll, expect, it } from 'vitest';
import { client, freshDatabase } from '../support/db.js';

let url: string;
const TTL_MS = 3_000;

beforeAll(async () => {
  url = await freshDatabase();
});

it('keeps renewing a held lease while thousands of acquire() calls queue in the same process', async () => {
  const leasehold = await client(url, { liveness: false });
  // a renewal may take ttl/3 (1 s): the burst also loads the server, which shares the machine's cores
  const result = await leasehold.acquire('precious', { ttl: TTL_MS, heartbeat: true, heartbeatInterval: TTL_MS / 5 });
  if (!result.acquired) throw new Error('expected to acquire');
  const { lease } = result;
  let renewals = 0;
  leasehold.on('lease:renewed', (info) => {
    if (info.name === 'precious') renewals++;
  });
  // Size the burst to this machine: long enough to outlast the ttl twice over, short enough
  // that the queued acquires themselves do not hit the 5 s connect timeout.
  const calibration = Date.now();
  await Promise.all(Array.from({ length: 300 }, (_, i) => leasehold.acquire(`calibrate-${i}`, { ttl: '1m' })));
  const perAcquireMs = Math.max((Date.now() - calibration) / 300, 0.05);
  let size = Math.round((2 * TTL_MS) / perAcquireMs);
  let burstMs = 0;
  let settled: unknown[] = [];
  // The burst must outlast the ttl, or it proves nothing about starvation; a machine that got
  // quieter since the calibration gets a bigger burst.
  for (let round = 0; round < 3; round++) {
    const started = Date.now();
    settled = await Promise.all(
      Array.from({ length: size }, (_, i) => leasehold.acquire(`burst-${round}-${i}`, { ttl: '1m' }).catch((e: unknown) => e)),
    );
    burstMs = Date.now() - started;
    if (burstMs > TTL_MS) break;
    size = Math.round((size * 2 * TTL_MS) / Math.max(burstMs, 1));
  }
  expect(burstMs).toBeGreaterThan(TTL_MS);
  expect(settled.filter((r) => !(r instanceof Error)).length).toBeGreaterThan(settled.length / 2);
  expect(lease.lostReason).toBeUndefined();
  expect(lease.lost).toBe(false);
  expect(renewals).toBeGreaterThanOrEqual(2);
}, 120_000);
