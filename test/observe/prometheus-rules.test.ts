// The shipped Prometheus rules and Grafana dashboard. The rules are checked by Prometheus's own
// promtool and tested (`promtool test rules`) on series turned from REAL scrapes: a worker's
// /metrics after it skipped, failed, lost a lease and recorded missed slots, and the fleet
// gauges of a dashboard's /metrics while it ran and after it stopped.
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse, stringify } from 'yaml';
import { startWorker, type JobOptions } from '../../src/index.js';
import { createMetrics } from '../../src/monitor/index.js';
import { startDashboard } from '../../src/dashboard/index.js';
import { serveMetrics } from '../../src/monitor/metrics.js';
import { silentLogger } from '../../src/observe/logger.js';
import { client, freshDatabase, rawPool, waitFor } from '../support/db.js';
import { documentedMetricNames, metricNamesIn, parseExposition, type Sample } from '../support/exposition.js';

const RULES = fileURLToPath(new URL('../../deploy/prometheus/leasehold.rules.yml', import.meta.url));
const DASHBOARD = fileURLToPath(new URL('../../deploy/grafana/leasehold-dashboard.json', import.meta.url));
const execFileAsync = promisify(execFile);

const PROMTOOL = await execFileAsync('promtool', ['--version']).then(
  () => 'promtool',
  () => undefined,
);
const noPromtool = PROMTOOL ? '' : ' (SKIPPED: promtool not installed; Debian package `prometheus`)';

interface Rule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}
const groups = (parse(readFileSync(RULES, 'utf8')) as { groups: Array<{ name: string; rules: Rule[] }> }).groups;
const rules = groups.flatMap((g) => g.rules);

async function promtool(args: string[]): Promise<string> {
  try {
    const { stdout, stderr } = await execFileAsync(PROMTOOL!, args);
    return stdout + stderr;
  } catch (error) {
    const failed = error as Error & { stdout?: string; stderr?: string };
    failed.message += `\n${failed.stdout ?? ''}\n${failed.stderr ?? ''}`;
    throw failed;
  }
}

describe('the rules file and the dashboard', () => {
  it('every alert uses only documented metric names, and covers the alerts docs/metrics.md recommends', () => {
    const documented = documentedMetricNames();
    expect(documented.size).toBeGreaterThan(20);
    for (const rule of rules) {
      const names = metricNamesIn(rule.expr);
      expect(names.length, rule.alert).toBeGreaterThan(0);
      for (const name of names) expect(documented, `${rule.alert}: ${name}`).toContain(name);
    }
    const expressions = rules.map((r) => r.expr).join('\n');
    for (const name of [
      'leasehold_skipped_slots_total',
      'leasehold_job_duration_interval_ratio',
      'leasehold_runs_total',
      'leasehold_lease_losses_total',
      'leasehold_missed_slots_total',
      'leasehold_live_workers',
      'leasehold_replication_grants_can_be_lost',
    ]) {
      expect(expressions).toContain(name);
    }
  });

  it.skipIf(!PROMTOOL)(`passes promtool check rules${noPromtool}`, async () => {
    expect(await promtool(['check', 'rules', RULES])).toMatch(new RegExp(`SUCCESS: ${rules.length} rules found`));
  });

  it('the Grafana dashboard parses, templates its data source, and queries only documented metric names', () => {
    const dashboard = JSON.parse(readFileSync(DASHBOARD, 'utf8')) as {
      templating: { list: Array<{ name: string; type: string; query: unknown }> };
      panels: Array<{ title: string; datasource: { uid: string }; targets: Array<{ expr: string; datasource: { uid: string } }> }>;
    };
    const source = dashboard.templating.list.find((v) => v.type === 'datasource');
    expect(source?.query).toBe('prometheus');
    const ref = `\${${source!.name}}`;
    const documented = documentedMetricNames();
    const used = new Set<string>();
    expect(dashboard.panels.length).toBeGreaterThan(5);
    for (const panel of dashboard.panels) {
      expect(panel.datasource.uid, panel.title).toBe(ref);
      expect(panel.targets.length, panel.title).toBeGreaterThan(0);
      for (const target of panel.targets) {
        expect(target.datasource.uid, panel.title).toBe(ref);
        const names = metricNamesIn(target.expr);
        expect(names.length, target.expr).toBeGreaterThan(0);
        for (const name of names) {
          expect(documented, `${panel.title}: ${name}`).toContain(name);
          used.add(name);
        }
      }
    }
    for (const variable of dashboard.templating.list.filter((v) => v.type === 'query')) {
      for (const name of metricNamesIn(JSON.stringify(variable.query))) expect(documented).toContain(name);
    }
    // the dashboard shows what the alerts are about
    for (const name of ['leasehold_runs_total', 'leasehold_skipped_slots_total', 'leasehold_lease_losses_total', 'leasehold_live_workers', 'leasehold_job_duration_interval_ratio']) {
      expect(used).toContain(name);
    }
  });
});

// ---- the real scrapes ---------------------------------------------------------------------

let url: string;
let work: string;
let workerScrape: Sample[] = [];
let fleetWhileRunning: Sample[] = [];
let fleetAfterStop: Sample[] = [];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  work = mkdtempSync(join(tmpdir(), 'leasehold-promtool-'));
});
afterAll(() => {
  if (work) rmSync(work, { recursive: true, force: true });
});

async function scrapeScenario(): Promise<void> {
  const logger = silentLogger();
  // Missed slots: a worker runs p-missed, stops; the slots while no worker runs are missed.
  const missedJob: JobOptions = { name: 'p-missed', every: '1s', ttl: '5s', handler: async () => undefined };
  const first = await startWorker({ connectionString: url, holder: 'first', jobs: [missedJob], logger, handleSignals: false });
  await waitFor(async () => (await rawPool(url, 1).query(`select 1 from leasehold.runs where job = 'p-missed' and finished_at is not null`)).rowCount, 30_000);
  await first.stop();
  await sleep(3_500);

  let slowRuns = 0;
  let lostRuns = 0;
  const jobs: JobOptions[] = [
    missedJob,
    {
      // every run outlives its timeout: a failure for both failing-runs alerts
      name: 'p-timeout',
      every: '1s',
      ttl: '5s',
      timeout: '200ms',
      handler: async (ctx) => {
        await new Promise<void>((resolve) => {
          ctx.signal.addEventListener('abort', () => resolve(), { once: true });
          setTimeout(resolve, 2_000).unref();
        });
      },
    },
    {
      // outlasts its interval (skips, duration creep) and fails every other run
      name: 'p-slow',
      every: '1s',
      ttl: '5s',
      handler: async () => {
        await sleep(1_500);
        if (++slowRuns % 2 === 0) throw new Error('every other run fails');
      },
    },
    {
      // the first run waits until its lease is taken away (force-released below)
      name: 'p-lost',
      every: '1s',
      ttl: '3s',
      handler: async (ctx) => {
        if (++lostRuns > 1) return;
        await new Promise<void>((resolve) => {
          ctx.signal.addEventListener('abort', () => resolve(), { once: true });
          setTimeout(resolve, 30_000).unref();
        });
      },
    },
  ];
  const metrics = createMetrics();
  const worker = await startWorker({ connectionString: url, holder: 'scraped', jobs, logger, handleSignals: false, shutdownGrace: '5s' });
  metrics.observe(worker);
  const server = await serveMetrics(metrics, { port: 0 });
  const pool = rawPool(url, 3);
  const fleetMetrics = createMetrics();
  fleetMetrics.observeDatabase(pool);
  const dashboard = await startDashboard({ pool, port: 0, metricsRegistry: fleetMetrics });
  const scrape = async (address: string) => parseExposition(await (await fetch(address)).text());
  const total = (samples: Sample[], name: string, labels: Record<string, string> = {}) =>
    samples.filter((s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v)).reduce((sum, s) => sum + s.value, 0);
  try {
    await waitFor(() => lostRuns >= 1, 30_000);
    const operator = await client(url, { liveness: false, holder: 'operator' });
    expect((await operator.forceRelease('p-lost')).released).toBe(true);
    await operator.close();
    workerScrape = await waitFor(async () => {
      const samples = atInstance(await scrape(server.url), WORKER);
      const ready =
        total(samples, 'leasehold_lease_losses_total', { lease: 'p-lost' }) > 0 &&
        total(samples, 'leasehold_skipped_slots_total', { job: 'p-slow' }) > 0 &&
        total(samples, 'leasehold_runs_total', { job: 'p-slow', outcome: 'failed' }) > 0 &&
        total(samples, 'leasehold_runs_total', { job: 'p-timeout', outcome: 'timed-out' }) > 0 &&
        total(samples, 'leasehold_missed_slots_total', { job: 'p-missed' }) > 0;
      return ready && samples;
    }, 60_000, 250);
    // a worker's own endpoint serves worker series only: no fleet gauge it never read
    expect(workerScrape.filter((s) => /^leasehold_(live_workers|jobs|jobs_\w+|runs_24h|job_\w+)$/.test(s.name)).map((s) => s.name)).toEqual([]);
    fleetWhileRunning = atInstance(await scrape(`${dashboard.url}metrics`), FLEET);
    await worker.stop();
    fleetAfterStop = await waitFor(async () => {
      const samples = atInstance(await scrape(`${dashboard.url}metrics`), FLEET);
      return total(samples, 'leasehold_live_workers') === 0 && samples;
    }, 30_000, 250);
  } finally {
    await worker.stop();
    await server.close();
    await dashboard.close();
  }
}

// What Prometheus adds to each scraped series: the target's instance (the scrape config keeps
// the metrics' own `job` label with honor_labels: true, as docs/integrations.md says).
const WORKER = 'worker-1:9464';
const FLEET = 'dashboard:8080';
function atInstance(samples: Sample[], instance: string): Sample[] {
  return samples.map((s) => {
    const open = s.series.indexOf('{');
    const series = open < 0 ? `${s.series}{instance="${instance}"}` : `${s.series.slice(0, open + 1)}instance="${instance}",${s.series.slice(open + 1)}`;
    return { ...s, series, labels: { ...s.labels, instance } };
  });
}

/** promtool input series: `steps` is [value or undefined (absent), minutes] per phase. */
function series(samples: Sample[][], phases: number[]): Array<{ series: string; values: string }> {
  const keys = [...new Set(samples.flatMap((snapshot) => snapshot.map((s) => s.series)))];
  return keys.map((key) => {
    const parts = samples.map((snapshot, i) => {
      const value = snapshot.find((s) => s.series === key)?.value;
      const count = phases[i]! - 1;
      return value === undefined || !Number.isFinite(value) ? `_x${count}` : `${value}x${count}`;
    });
    return { series: key, values: parts.join(' ') };
  });
}

/** The labels and value an alert's expression yields, computed from the scrapes the same way. */
type Firing = { labels: Record<string, string>; value: number };
function sumBy(samples: Sample[], name: string, by: string[], filter: Record<string, string | RegExp> = {}): Firing[] {
  const groupsByKey = new Map<string, Firing>();
  for (const s of samples) {
    if (s.name !== name || !Object.entries(filter).every(([k, v]) => (typeof v === 'string' ? s.labels[k] === v : v.test(s.labels[k] ?? '')))) continue;
    const labels = Object.fromEntries(by.filter((k) => s.labels[k] !== undefined).map((k) => [k, s.labels[k]!]));
    const key = JSON.stringify(labels);
    const group = groupsByKey.get(key) ?? { labels, value: 0 };
    group.value += s.value;
    groupsByKey.set(key, group);
  }
  return [...groupsByKey.values()];
}
const perJob = (samples: Sample[], name: string): Firing[] => samples.filter((s) => s.name === name).map((s) => ({ labels: s.labels, value: s.value }));
const single = (samples: Sample[], name: string): number | undefined => samples.find((s) => s.name === name)?.value;

/** What each alert should report, from the worker counters (`worker`) and the fleet gauges (`fleet`). */
function expected(alert: string, worker: Sample[], fleet: Sample[], window: '15m' | '1h'): Firing[] {
  const counted = (firing: Firing[]) => firing.filter((f) => f.value > 0);
  switch (alert) {
    case 'LeaseholdSlotsSkipped':
      return counted(sumBy(worker, 'leasehold_skipped_slots_total', ['job']));
    case 'LeaseholdRunsFailing':
      return counted(sumBy(worker, 'leasehold_runs_total', ['job'], { outcome: /^(failed|timed-out)$/ }));
    case 'LeaseholdLeasesLost':
      return window === '15m' ? counted(sumBy(worker, 'leasehold_lease_losses_total', ['lease', 'reason'])) : [];
    case 'LeaseholdSlotsMissed':
      return counted(sumBy(worker, 'leasehold_missed_slots_total', ['job']));
    case 'LeaseholdReplicationGrantsCanBeLost': {
      const value = Math.max(...worker.filter((s) => s.name === 'leasehold_replication_grants_can_be_lost').map((s) => s.value));
      return value > 0 ? [{ labels: {}, value }] : [];
    }
    case 'LeaseholdClockStepped':
      return window === '15m' ? counted(sumBy(worker, 'leasehold_clock_steps_total', ['direction'])) : [];
    case 'LeaseholdDurationCreep':
      return perJob(fleet, 'leasehold_job_duration_interval_ratio').filter((f) => f.value > 0.8);
    case 'LeaseholdRunsFailingFleet': {
      const runs = new Map(perJob(fleet, 'leasehold_job_runs_24h').map((f) => [f.labels.job, f.value]));
      const timedOut = new Map(perJob(fleet, 'leasehold_job_timed_out_24h').map((f) => [f.labels.job, f.value]));
      return perJob(fleet, 'leasehold_job_failed_24h')
        .filter((f) => timedOut.has(f.labels.job))
        .map((f) => ({ labels: f.labels, value: (f.value + timedOut.get(f.labels.job)!) / Math.max(runs.get(f.labels.job) ?? 0, 1) }))
        .filter((f) => runs.has(f.labels.job) && f.value > 0.1);
    }
    case 'LeaseholdRunsLostFleet':
      return perJob(fleet, 'leasehold_job_lost_24h').filter((f) => f.value > 0);
    case 'LeaseholdSlotsMissedFleet':
      return perJob(fleet, 'leasehold_job_missed_24h').filter((f) => f.value > 0);
    case 'LeaseholdNoWorkerAlive':
      return single(fleet, 'leasehold_live_workers') === 0 && (single(fleet, 'leasehold_jobs') ?? 0) > 0 ? [{ labels: { instance: FLEET }, value: 0 }] : [];
    case 'LeaseholdLeasesLeftExpired': {
      const value = single(fleet, 'leasehold_jobs_expired') ?? 0;
      return value > 0 ? [{ labels: { instance: FLEET }, value }] : [];
    }
    default:
      throw new Error(`the test does not know alert ${alert}: add its expectation`);
  }
}

/** Renders the annotation templates the rules use ($labels.x, $value | printf "%.0f"). */
function render(template: string, firing: Firing): string {
  return template
    .replace(/\{\{ \$labels\.(\w+) \}\}/g, (_m, key: string) => firing.labels[key] ?? '')
    .replace(/\{\{ \$value \| printf "%\.0f" \}\}/g, () => String(Math.round(firing.value)))
    .replace(/\{\{[^}]*\}\}/g, (m) => {
      throw new Error(`the test cannot render ${m}`);
    });
}

function alertTests(evalTime: string, worker: Sample[], fleet: Sample[], window: '15m' | '1h') {
  return rules.map((rule) => ({
    eval_time: evalTime,
    alertname: rule.alert,
    exp_alerts: expected(rule.alert, worker, fleet, window).map((firing) => ({
      exp_labels: { ...firing.labels, ...rule.labels },
      exp_annotations: Object.fromEntries(Object.entries(rule.annotations ?? {}).map(([k, v]) => [k, render(v, firing)])),
    })),
  }));
}

describe.skipIf(!PROMTOOL)(`promtool test rules on series from real scrapes${noPromtool}`, () => {
  it('fires exactly the alerts the scraped worker and fleet call for, and none before', { timeout: 180_000 }, async () => {
    await scrapeScenario();
    // Timeline, one sample a minute: worker counters are 0 for 5 min (a process starts at 0),
    // then hold the scraped values; the fleet gauges hold the scrape taken while the worker
    // ran for 60 min, then the one after it stopped.
    const zeros = workerScrape.map((s) => ({ ...s, value: s.type === 'gauge' ? s.value : 0 }));
    const workerSeries = series([zeros, workerScrape], [6, 120]);
    const fleetNames = new Set([...fleetWhileRunning, ...fleetAfterStop].map((s) => s.name));
    const fleetSeries = series([fleetWhileRunning, fleetAfterStop], [61, 60]);
    expect([...fleetNames]).toContain('leasehold_live_workers');
    const none: Sample[] = [];
    const tests = {
      rule_files: [RULES],
      evaluation_interval: '1m',
      tests: [
        {
          interval: '1m',
          input_series: [...workerSeries, ...fleetSeries],
          alert_rule_test: [
            // before anything happened: no alert (the fleet alerts' `for` has not passed)
            ...alertTests('3m', none, none, '1h').filter((t) => !['LeaseholdRunsLostFleet', 'LeaseholdSlotsMissedFleet'].includes(t.alertname)),
            // 10 min: the worker's events are inside every window
            ...alertTests('10m', workerScrape, fleetWhileRunning, '15m').filter((t) => !['LeaseholdDurationCreep', 'LeaseholdRunsFailingFleet', 'LeaseholdNoWorkerAlive', 'LeaseholdLeasesLeftExpired', 'LeaseholdReplicationGrantsCanBeLost'].includes(t.alertname)),
            // 30 min: outside the 15 min windows, inside the 1 h ones; fleet alerts past their `for`
            ...alertTests('30m', workerScrape, fleetWhileRunning, '1h'),
            // 90 min: the worker stopped 29 min ago; its counters' 1 h windows are empty by 130 min
            ...alertTests('90m', none, fleetAfterStop, '1h'),
          ],
        },
      ],
    };
    // the scenario produced what the alerts are about
    const firing = (t: { alertname: string; eval_time: string; exp_alerts: unknown[] }) => t.exp_alerts.length > 0;
    const fired = new Set(tests.tests[0]!.alert_rule_test.filter(firing).map((t) => `${t.alertname}@${t.eval_time}`));
    for (const alert of ['LeaseholdSlotsSkipped@10m', 'LeaseholdRunsFailing@10m', 'LeaseholdLeasesLost@10m', 'LeaseholdSlotsMissed@10m', 'LeaseholdDurationCreep@30m', 'LeaseholdNoWorkerAlive@90m']) {
      expect(fired, alert).toContain(alert);
    }
    const file = join(work, 'scraped.test.yml');
    writeFileSync(file, stringify(tests));
    expect(await promtool(['test', 'rules', file])).toContain('SUCCESS');
  });

  it('fires the replication warning when the worker gauge says grants can be lost', async () => {
    // The test database has no standbys, so the scraped gauge is 0; this case sets it to 1.
    const file = join(work, 'replication.test.yml');
    const rule = rules.find((r) => r.alert === 'LeaseholdReplicationGrantsCanBeLost')!;
    writeFileSync(
      file,
      stringify({
        rule_files: [RULES],
        evaluation_interval: '1m',
        tests: [
          {
            interval: '1m',
            input_series: [{ series: 'leasehold_replication_grants_can_be_lost{instance="w1"}', values: '0x2 1x20' }],
            alert_rule_test: [
              { eval_time: '4m', alertname: rule.alert, exp_alerts: [] },
              { eval_time: '10m', alertname: rule.alert, exp_alerts: [{ exp_labels: rule.labels, exp_annotations: rule.annotations }] },
            ],
          },
        ],
      }),
    );
    expect(await promtool(['test', 'rules', file])).toContain('SUCCESS');
  });
});
