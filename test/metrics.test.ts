// Metrics after a scripted sequence of acquisitions, takeovers, losses, runs and skips,
// checked against the history the database recorded.
import { beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { createMetrics, startWorker, type JobOptions } from '../src/index.js';
import { silentLogger } from '../src/observe/logger.js';
import { client, freshDatabase, rawPool, waitFor } from './support/db.js';

let url: string;
beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
});

async function value(metrics: ReturnType<typeof createMetrics>, name: string, labels: Record<string, string> = {}): Promise<number> {
  const metric = await metrics.registry.getSingleMetric(`leasehold_${name}`)?.get();
  const matching = (metric?.values ?? []).filter(
    (v) => !String((v as { metricName?: string }).metricName ?? '').endsWith('_bucket') && Object.entries(labels).every(([k, l]) => String((v.labels as Record<string, unknown>)[k]) === l),
  );
  return matching.reduce((sum, v) => sum + v.value, 0);
}

describe('metrics', () => {
  it('count acquisitions, takeovers and losses of leases', async () => {
    const metrics = createMetrics();
    const a = await client(url, { liveness: false, holder: 'a' });
    const b = await client(url, { holder: 'b' });
    metrics.observe(a);
    metrics.observe(b);
    const first = await a.acquire('m-lease', { ttl: 300 });
    expect(first.acquired).toBe(true);
    await sleep(400); // a never released: b takes it over, a's local deadline loses it
    expect((await b.acquire('m-lease', { ttl: '30s' })).acquired).toBe(true);
    await waitFor(() => first.acquired && first.lease.lost);
    expect(await value(metrics, 'lease_acquisitions_total', { lease: 'm-lease' })).toBe(2);
    expect(await value(metrics, 'takeovers_total', { lease: 'm-lease' })).toBe(1);
    expect(await value(metrics, 'lease_losses_total', { lease: 'm-lease', reason: 'expired' })).toBe(1);
    const text = await metrics.metrics();
    expect(text).toMatch(/^leasehold_takeovers_total\{lease="m-lease"\} 1$/m);
  });

  it('count runs by outcome, durations and skips exactly as the history records them', async () => {
    const metrics = createMetrics();
    let n = 0;
    const jobs: JobOptions[] = [
      {
        name: 'm-slow',
        every: '1s',
        ttl: '5s',
        handler: async () => {
          await sleep(1_500);
          if (++n % 2 === 0) throw new Error('every other run fails');
        },
      },
    ];
    const workers = await Promise.all(
      ['w1', 'w2'].map((holder) => startWorker({ connectionString: url, holder, jobs, logger: silentLogger(), handleSignals: false, shutdownGrace: '5s' })),
    );
    workers.forEach((w) => metrics.observe(w));
    await sleep(4_500);
    // stop at a quiet moment so that no run is aborted: wait for the running one to finish
    await waitFor(() => workers.every((w) => w.activeRuns === 0), 5_000, 10);
    await Promise.all(workers.map((w) => w.stop()));

    const pool = rawPool(url, 1);
    const outcomes = (await pool.query<{ outcome: string; n: number }>(`select outcome, count(*)::int as n from leasehold.runs where job = 'm-slow' group by 1`)).rows;
    const skips = (await pool.query<{ n: number }>(`select count(*)::int as n from leasehold.skips where job = 'm-slow'`)).rows[0]!.n;
    expect(outcomes.length).toBeGreaterThan(0);
    for (const { outcome, n: count } of outcomes) {
      expect(await value(metrics, 'runs_total', { job: 'm-slow', outcome }), outcome).toBe(count);
    }
    expect(await value(metrics, 'runs_total', { job: 'm-slow', outcome: 'failed' })).toBeGreaterThanOrEqual(1);
    expect(skips).toBeGreaterThanOrEqual(1);
    expect(await value(metrics, 'skipped_slots_total', { job: 'm-slow' })).toBe(skips);
    const histogram = await metrics.registry.getSingleMetric('leasehold_run_duration_seconds')?.get();
    const count = histogram?.values.find((v) => (v as { metricName?: string }).metricName === 'leasehold_run_duration_seconds_count' && v.labels.outcome === 'succeeded');
    expect(count?.value).toBe(outcomes.find((o) => o.outcome === 'succeeded')?.n);
    const sum = histogram?.values.find((v) => (v as { metricName?: string }).metricName === 'leasehold_run_duration_seconds_sum' && v.labels.outcome === 'succeeded');
    expect(sum!.value / count!.value).toBeGreaterThan(1.4);

    // gauges read from the database at scrape time
    metrics.observeDatabase(pool);
    const text = await metrics.metrics();
    expect(text).toMatch(/^leasehold_job_running\{job="m-slow"\} 0$/m);
    expect(text).toMatch(/^leasehold_job_duration_interval_ratio\{job="m-slow"\} 1\.\d+$/m);
    expect(text).toMatch(new RegExp(`^leasehold_job_skips_24h\\{job="m-slow"\\} ${skips}$`, 'm'));
  });
});
