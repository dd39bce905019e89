// Metrics after a scripted sequence of acquisitions, takeovers, losses, runs and skips,
// checked against the history the database recorded.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { startWorker, type JobOptions } from '../../src/index.js';
import { createMetrics } from '../../src/monitor/index.js';
import { startDashboard } from '../../src/dashboard/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { startCli } from '../support/cli.js';
import { client, freshDatabase, rawPool, waitFor } from '../support/db.js';
import { seedHistory } from '../support/seed.js';

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
    // runs whose handler was called (attempts > 0): a slot claimed as the workers stopped is handed
    // back unstarted (recorded aborted, attempts 0), and only started runs are events
    const outcomes = (await pool.query<{ outcome: string; n: number }>(`select outcome, count(*)::int as n from leasehold.runs where job = 'm-slow' and attempts > 0 group by 1`)).rows;
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

/** Metric names a text exposition declares (# TYPE lines). */
function declared(text: string): Set<string> {
  return new Set([...text.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]!));
}

/** The alert table of docs/metrics.md: each row's expression and scrape target. */
function documentedAlerts(): Array<{ alert: string; names: string[]; target: string }> {
  const doc = readFileSync(new URL('../../docs/metrics.md', import.meta.url), 'utf8');
  const section = doc.slice(doc.indexOf('## What to alert on'), doc.indexOf('## Logs'));
  return section
    .split('\n')
    .filter((line) => line.startsWith('| ') && !line.startsWith('| alert') && !line.startsWith('| ---'))
    .map((line) => {
      const cells = line.split(' | ');
      return { alert: cells[0]!.slice(2), names: [...new Set([...cells[1]!.matchAll(/leasehold_[a-z0-9_]+/g)].map((m) => m[0]))], target: cells[2]!.trim() };
    });
}

describe('metrics from the CLI setup', () => {
  it('the dashboard’s /metrics has failed, lost and fleet series, and every alert in docs/metrics.md finds its series', { timeout: 60_000 }, async () => {
    const pool = rawPool(url, 4);
    await seedHistory(pool);
    // as `leasehold dashboard` sets it up
    const metrics = createMetrics();
    metrics.observeDatabase(pool);
    const dashboard = await startDashboard({ pool, port: 0, metricsRegistry: metrics });
    const dir = mkdtempSync(join(tmpdir(), 'leasehold-metrics-'));
    try {
      const text = await (await fetch(`${dashboard.url}metrics`)).text();
      expect(text).toMatch(/^leasehold_job_failed_24h\{job="report"\} 1$/m);
      expect(text).toMatch(/^leasehold_job_lost_24h\{job="cleanup"\} 1$/m);
      expect(text).toMatch(/^leasehold_job_runs_24h\{job="cleanup"\} 11$/m);
      expect(text).toMatch(/^leasehold_runs_24h\{outcome="failed"\} [1-9]\d*$/m);
      expect(text).toMatch(/^leasehold_runs_24h\{outcome="lost"\} [1-9]\d*$/m);
      expect(text).toMatch(/^leasehold_jobs_running [1-9]\d*$/m);
      expect(text).toMatch(/^leasehold_jobs [2-9]\d*$/m);
      expect(text).toMatch(/^leasehold_live_workers \d+$/m);

      // as `leasehold worker --metrics-port` serves it
      const module = join(dir, 'jobs.mjs');
      writeFileSync(module, `export const jobs = [{ name: 'cli-metrics', every: '1s', handler: async () => { throw new Error('fails on purpose'); } }];\n`);
      const worker = startCli(['worker', module, '--metrics-port', '0', '--holder', 'cli-metrics-worker'], { DATABASE_URL: url });
      const endpoint = await waitFor(() => /metrics at (http:\/\/127\.0\.0\.1:\d+\/metrics)/.exec(worker.output().stderr)?.[1], 20_000);
      const workerText = await waitFor(async () => {
        const body = await (await fetch(endpoint)).text();
        return /^leasehold_runs_total\{job="cli-metrics",outcome="failed"\} [1-9]/m.test(body) && body;
      }, 20_000, 200);
      expect(workerText).toMatch(/^leasehold_lease_acquisitions_total\{lease="cli-metrics"\} [1-9]/m);
      const liveText = await (await fetch(`${dashboard.url}metrics`)).text();
      expect(liveText).toMatch(/^leasehold_live_workers [1-9]\d*$/m); // the CLI worker's liveness session

      const served = { dashboard: declared(liveText), worker: declared(workerText) };
      const alerts = documentedAlerts();
      expect(alerts.length).toBeGreaterThanOrEqual(8);
      for (const { alert, names, target } of alerts) {
        expect(['dashboard', 'worker'], alert).toContain(target);
        expect(names.length, alert).toBeGreaterThan(0);
        for (const name of names) expect(served[target as 'dashboard' | 'worker'].has(name), `${alert}: ${name} on the ${target}`).toBe(true);
      }

      worker.child.kill('SIGTERM');
      expect((await worker.done).code).toBe(0);
    } finally {
      await dashboard.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('`leasehold worker --metrics-port` on a busy port exits non-zero before running anything', { timeout: 30_000 }, async () => {
    const blocker = net.createServer();
    await new Promise<void>((resolve) => blocker.listen(0, '127.0.0.1', resolve));
    const port = (blocker.address() as net.AddressInfo).port;
    const dir = mkdtempSync(join(tmpdir(), 'leasehold-metrics-'));
    try {
      const module = join(dir, 'jobs.mjs');
      writeFileSync(module, `export const jobs = [{ name: 'never-runs', every: '1s', handler: async () => {} }];\n`);
      const run = startCli(['worker', module, '--metrics-port', String(port)], { DATABASE_URL: url });
      run.child.stdin.end();
      const result = await run.done;
      expect(result.code).not.toBe(0);
      expect(result.stderr).toMatch(new RegExp(`port ${port} on 127.0.0.1 is already in use`));
      const runs = await rawPool(url, 1).query(`select count(*)::int as n from leasehold.jobs where name = 'never-runs'`);
      expect(runs.rows[0].n).toBe(0);
      const bad = startCli(['worker', module, '--metrics-port', 'http'], { DATABASE_URL: url });
      bad.child.stdin.end();
      const refused = await bad.done;
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(/--metrics-port must be an integer from 0 to 65535/);
    } finally {
      blocker.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
