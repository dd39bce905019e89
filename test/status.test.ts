// The operator's read models over a seeded history.
import { beforeAll, describe, expect, it } from 'vitest';
import { jobHistory, jobStatus } from '../src/index.js';
import { client, freshDatabase, rawPool } from './support/db.js';
import { seedHistory } from './support/seed.js';

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
