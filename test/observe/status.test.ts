// The operator's read models over a seeded history.
import { beforeAll, describe, expect, it } from 'vitest';
import { creepWarning, jobHistory, jobStatus, unscheduledLeases } from '../../src/monitor/status.js';
import { seconds } from '../../src/cli/format.js';
import { startWorker } from '../../src/worker/worker.js';
import { silentLogger } from '../../src/observe/logger.js';
import { client, freshDatabase, rawPool, sleep, waitFor } from '../support/db.js';
import { seedHistory } from '../support/seed.js';

let url: string;
beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  await seedHistory(rawPool(url, 1));
});

describe('jobStatus', () => {
  it('summarises each job: holder, last run, durations against the interval, skips, missed', async () => {
    const [cleanup, report] = await jobStatus(rawPool(url, 1));
    expect(report).toMatchObject({
      job: 'report',
      state: 'running',
      holder: 'worker-a',
      fence: 23,
      intervalMs: 60_000,
      runs24h: 21,
      failed24h: 1,
      skips24h: 3,
      missed24h: 0,
      lastRun: { outcome: 'running' },
    });
    expect(report!.leaseAgeSeconds).toBeGreaterThan(39);
    expect(report!.p95Seconds).toBeGreaterThan(48);
    expect(report!.p95IntervalRatio).toBeGreaterThan(0.8);
    expect(report!.warning).toMatch(/p95 duration is \d+% of the interval: "report" is creeping toward overlap/);
    expect(cleanup).toMatchObject({ job: 'cleanup', state: 'idle', holder: null, runs24h: 11, lost24h: 1, missed24h: 2, skips24h: 0, warning: null });
    expect(cleanup!.p50Seconds).toBeCloseTo(2, 1);
  });

  it('lists a job’s runs, skips and missed slots newest first', async () => {
    const entries = await jobHistory(rawPool(url, 1), { job: 'report', limit: 100 });
    expect(entries.filter((e) => e.kind === 'skip')).toHaveLength(3);
    expect(entries.filter((e) => e.kind === 'run')).toHaveLength(22);
    const skip = entries.find((e) => e.kind === 'skip')!;
    expect(skip).toMatchObject({ outcome: 'skipped', holder: 'worker-b', fence: 20 });
    expect(skip.detail).toMatch(/held by worker-b \(fence 20/);
    for (let i = 1; i < entries.length; i++) expect(entries[i - 1]!.at.getTime()).toBeGreaterThanOrEqual(entries[i]!.at.getTime());
  });
});

describe('every lease is visible', () => {
  it('lists leases no job describes (psql, Python, acquire()) with holder, fence, since and expiry', async () => {
    const pool = rawPool(url, 1);
    await pool.query(`select leasehold.acquire('from-psql', '1 minute', 'psql@db-admin')`);
    const lh = await client(url, { liveness: false, holder: 'app@web-1' });
    const taken = await lh.acquire('from-acquire', { ttl: '1m' });
    expect(taken.acquired).toBe(true);
    const leases = await unscheduledLeases(pool);
    expect(leases.map((l) => [l.name, l.state, l.holder])).toEqual([
      ['from-acquire', 'held', 'app@web-1'],
      ['from-psql', 'held', 'psql@db-admin'],
    ]);
    expect(leases[1]!.fence).toBe(1);
    expect(leases[1]!.expiresAt!.getTime() - leases[1]!.since!.getTime()).toBe(60_000);
    // scheduled jobs are not repeated here
    expect(leases.some((l) => l.name === 'report')).toBe(false);
    if (taken.acquired) await taken.lease.release();
    expect((await unscheduledLeases(pool, 'from-acquire'))[0]).toMatchObject({ state: 'free', holder: 'app@web-1' });
  });

  it('run() records its runs like exec does: succeeded, failed with the error, and nothing with history: false', async () => {
    const lh = await client(url, { liveness: false, holder: 'app@web-2' });
    const released: boolean[] = [];
    lh.on('lease:released', (_lease, done) => released.push(done));
    let signal: AbortSignal | undefined;
    await lh.run('nightly-report', { ttl: '30s' }, async (ctx) => {
      signal = ctx.signal;
      return 'ok';
    });
    // the statement that records the outcome released the lease: reported once, signal fired
    expect(released).toEqual([true]);
    expect(signal?.aborted).toBe(true);
    await expect(lh.run('nightly-report', { ttl: '30s' }, async () => Promise.reject(new Error('upstream 503')))).rejects.toThrow('upstream 503');
    await lh.run('quiet', { ttl: '30s', history: false }, async () => 'ok');
    const entries = await jobHistory(rawPool(url, 1), { job: 'nightly-report' });
    expect(entries.map((e) => [e.kind, e.outcome, e.fence, e.holder, e.detail])).toEqual([
      ['run', 'failed', 2, 'app@web-2', 'upstream 503'],
      ['run', 'succeeded', 1, 'app@web-2', null],
    ]);
    const [job] = await jobStatus(rawPool(url, 1), 'nightly-report');
    expect(job).toMatchObject({ schedule: 'external', state: 'idle', runs24h: 2, failed24h: 1, lastRun: { outcome: 'failed' } });
    expect(await jobHistory(rawPool(url, 1), { job: 'quiet' })).toEqual([]);
    expect((await unscheduledLeases(rawPool(url, 1), 'quiet'))[0]).toMatchObject({ state: 'free', holder: 'app@web-2' });
    expect((await lh.leases()).find((l) => l.name === 'nightly-report')).toMatchObject({ state: 'free', fence: 2 });
  });

  it('run() whose lease is force-released before its next heartbeat is recorded lost, not succeeded', async () => {
    const lh = await client(url, { liveness: false });
    const result = await lh.run('forced', { ttl: '30s' }, async () => {
      await rawPool(url, 1).query(`select leasehold.force_release('forced')`);
      await sleep(50); // the handler finishes long before the heartbeat (every 10 s) could notice
      return 'done';
    });
    expect(result.ran).toBe(true);
    const [entry] = await jobHistory(rawPool(url, 1), { job: 'forced' });
    expect(entry).toMatchObject({ kind: 'run', outcome: 'lost' });
    expect(entry!.detail).toMatch(/no longer held when the run finished/);
  });
});

describe('wording', () => {
  it('says overlapping from 100 % of the interval, creeping from 80 %', () => {
    expect(creepWarning('a', 0.5)).toBeNull();
    expect(creepWarning('a', 0.87)).toBe('p95 duration is 87% of the interval: "a" is creeping toward overlap');
    expect(creepWarning('a', 1.5)).toMatch(/^p95 duration is 150% of the interval: "a" runs are overlapping/);
  });

  it('shows durations with the precision that matters at their size', () => {
    expect([0.0004, 0.012, 0.34, 0.9996, 1.04, 12.34, 59.96, 245, 7_500, null].map(seconds)).toEqual([
      '0.4ms', '12ms', '340ms', '1.0s', '1.0s', '12.3s', '1m', '4m5s', '2h5m', '-',
    ]);
  });
});

describe('changing a schedule', () => {
  it('does not record slots of the new schedule before the change as missed', async () => {
    const pool = rawPool(url, 1);
    // an hourly job that last ran 30 minutes ago...
    await pool.query(
      `select leasehold.register_jobs(array['rescheduled'], array['1h'], array[null]::text[], array[3600000]::bigint[], array[30000]::bigint[],
                                      array['skip'], array['latest'], 'old-worker')`,
    );
    await pool.query(`update leasehold.leases set last_slot = now() - interval '30 minutes' where name = 'rescheduled'`);
    // ...is redeployed to run every 2 s: the 900 two-second slots of the last 30 minutes never existed
    const worker = await startWorker({
      connectionString: url,
      jobs: [{ name: 'rescheduled', every: '2s', handler: async () => undefined }],
      logger: silentLogger(),
      handleSignals: false,
    });
    try {
      await waitFor(async () => (await jobHistory(pool, { job: 'rescheduled' })).some((e) => e.kind === 'run' && e.outcome === 'succeeded'), 20_000, 100);
    } finally {
      await worker.stop();
    }
    const entries = await jobHistory(pool, { job: 'rescheduled', limit: 2000 });
    expect(entries.filter((e) => e.kind === 'missed')).toEqual([]);
    expect((await jobStatus(pool, 'rescheduled'))[0]).toMatchObject({ schedule: '2s', missed24h: 0 });
  });
});
