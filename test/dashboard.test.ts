// The dashboard: its HTTP API over a seeded history, and the page in a real headless Chromium.
import { existsSync, mkdirSync } from 'node:fs';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDashboard, type Dashboard } from '../src/dashboard/server.js';
import { client, freshDatabase, rawPool } from './support/db.js';
import { seedHistory } from './support/seed.js';

const CHROMIUM = '/usr/bin/chromium';
const haveChromium = existsSync(CHROMIUM);
const ARTIFACTS = fileURLToPath(new URL('../test-artifacts/', import.meta.url));

let url: string;
let pool: pg.Pool;
const dashboards: Dashboard[] = [];
async function dashboard(options: Partial<Parameters<typeof startDashboard>[0]> = {}): Promise<Dashboard> {
  const d = await startDashboard({ pool, port: 0, ...options });
  dashboards.push(d);
  return d;
}
afterAll(async () => {
  await Promise.allSettled(dashboards.map((d) => d.close()));
});

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  pool = rawPool(url, 4);
  await seedHistory(pool);
});

/** A raw request, for what fetch() will not send (a foreign Host header). */
function request(target: string, options: http.RequestOptions = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  return new Promise((resolve, reject) => {
    const req = http.request(target, options, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

interface JobsBody {
  now: string;
  warningRatio: number;
  jobs: Array<{ job: string; state: string; holder: string | null; p95IntervalRatio: number | null; skips24h: number; missed24h: number; lastRun: { outcome: string } | null }>;
}
interface HistoryBody {
  now: string;
  since: string;
  hours: number;
  runs: Array<{ job: string; outcome: string; startedAt: string; finishedAt: string | null; fence: number }>;
  skips: Array<{ job: string; slot: string; holder: string }>;
  missed: Array<{ job: string; slot: string; reason: string }>;
  truncated: boolean;
}

describe('dashboard HTTP API', () => {
  it('serves the job table from job_status, without caching', async () => {
    const d = await dashboard();
    expect(d.url).toBe(`http://127.0.0.1:${d.port}/`);
    const res = await fetch(`${d.url}api/jobs`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
    expect(res.headers.get('cache-control')).toBe('no-store');
    const body = (await res.json()) as JobsBody;
    expect(body.warningRatio).toBe(0.8);
    expect(body.jobs.map((j) => j.job)).toEqual(['cleanup', 'report']);
    const report = body.jobs.find((j) => j.job === 'report')!;
    expect(report).toMatchObject({ state: 'running', holder: 'worker-a', skips24h: 3, lastRun: { outcome: 'running' } });
    expect(report.p95IntervalRatio).toBeGreaterThan(0.8);
    expect(body.jobs.find((j) => j.job === 'cleanup')).toMatchObject({ state: 'idle', holder: null, missed24h: 2 });
  });

  it('serves a job’s runs, skips and missed slots within a window', async () => {
    const d = await dashboard();
    const report = (await (await fetch(`${d.url}api/history?job=report&hours=2`)).json()) as HistoryBody;
    expect(report.hours).toBe(2);
    expect(Date.parse(report.now) - Date.parse(report.since)).toBe(2 * 3600_000);
    expect(report.runs).toHaveLength(22);
    expect(report.runs.every((r) => r.job === 'report')).toBe(true);
    expect(report.runs.filter((r) => r.outcome === 'failed')).toHaveLength(1);
    expect(report.runs.at(-1)).toMatchObject({ outcome: 'running', finishedAt: null, fence: 23 });
    expect(report.skips).toHaveLength(3);
    expect(report.skips[0]).toMatchObject({ holder: 'worker-b' });
    for (let i = 1; i < report.runs.length; i++) expect(Date.parse(report.runs[i]!.startedAt)).toBeGreaterThanOrEqual(Date.parse(report.runs[i - 1]!.startedAt));

    // cleanup's missed slots are 65 and 70 minutes old: outside one hour, inside two
    const lastHour = (await (await fetch(`${d.url}api/history?job=cleanup&hours=1`)).json()) as HistoryBody;
    expect(lastHour.missed).toHaveLength(0);
    expect(lastHour.runs.filter((r) => r.outcome === 'lost')).toHaveLength(1);
    const all = (await (await fetch(`${d.url}api/history?hours=2`)).json()) as HistoryBody;
    expect(all.missed.map((m) => m.job)).toEqual(['cleanup', 'cleanup']);
    expect(all.runs.filter((r) => r.job === 'cleanup')).toHaveLength(11);
    expect(all.truncated).toBe(false);

    const bad = await fetch(`${d.url}api/history?hours=-3`);
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: string }).error).toMatch(/hours must be a number/);
  });

  it('is read-only: other methods are 405', async () => {
    const d = await dashboard();
    for (const method of ['POST', 'PUT', 'DELETE', 'PATCH']) {
      const res = await fetch(`${d.url}api/jobs`, { method });
      expect(res.status, method).toBe(405);
      expect(res.headers.get('allow')).toBe('GET, HEAD');
      expect(((await res.json()) as { error: string }).error).toMatch(/read-only/);
    }
    const head = await fetch(d.url, { method: 'HEAD' });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe('');
  });

  it('serves /metrics from the registry it was given, and says so when it has none', async () => {
    const registry = { contentType: 'text/plain; version=0.0.4; charset=utf-8', metrics: async () => '# TYPE leasehold_fake gauge\nleasehold_fake 1\n' };
    const withMetrics = await dashboard({ metricsRegistry: registry });
    const res = await fetch(`${withMetrics.url}metrics`);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe(registry.contentType);
    expect(await res.text()).toBe('# TYPE leasehold_fake gauge\nleasehold_fake 1\n');

    const failing = await dashboard({ metricsRegistry: { contentType: 'text/plain', metrics: () => Promise.reject(new Error('collector broke')) } });
    const broken = await fetch(`${failing.url}metrics`);
    expect(broken.status).toBe(500);
    expect(await broken.json()).toEqual({ error: 'collector broke' });

    const without = await dashboard();
    const missing = await fetch(`${without.url}metrics`);
    expect(missing.status).toBe(404);
    expect(await missing.text()).toMatch(/metrics are not enabled/);
  });

  it('serves the page: HTML with its test hooks and a strict content security policy', async () => {
    const d = await dashboard();
    const res = await fetch(d.url);
    expect(res.status).toBe(200);
    expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
    expect(res.headers.get('content-security-policy')).toMatch(/default-src 'none'; script-src 'sha256-/);
    const html = await res.text();
    expect(html).toMatch(/^<!doctype html>/);
    expect(html).toContain('data-testid="jobs-table"');
    expect(html).not.toMatch(/(src|href)="https?:/); // nothing from the network
    expect((await fetch(`${d.url}nope`)).status).toBe(404);
  });

  it('answers a database failure with 500 and a message, and keeps serving', async () => {
    const dead = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/none', connectionTimeoutMillis: 2000 });
    try {
      const d = await dashboard({ pool: dead });
      const res = await fetch(`${d.url}api/jobs`);
      expect(res.status).toBe(500);
      expect(((await res.json()) as { error: string }).error).toMatch(/ECONNREFUSED|connect/);
      const health = await fetch(`${d.url}healthz`);
      expect(health.status).toBe(503);
      expect((await fetch(d.url)).status).toBe(200);
    } finally {
      await dead.end();
    }
    const healthy = await dashboard();
    expect(await (await fetch(`${healthy.url}healthz`)).json()).toEqual({ ok: true, database: 'ok' });
  });

  it('binds to 127.0.0.1 and refuses foreign Host names (DNS rebinding)', async () => {
    const d = await dashboard();
    expect((await request(`${d.url}api/jobs`, { headers: { host: `localhost:${d.port}` } })).status).toBe(200);
    const foreign = await request(`${d.url}api/jobs`, { headers: { host: 'attacker.example' } });
    expect(foreign.status).toBe(403);
    expect(foreign.body).toMatch(/not allowed/);
    const proxied = await dashboard({ allowedHosts: ['jobs.internal'] });
    expect((await request(`${proxied.url}api/jobs`, { headers: { host: 'jobs.internal' } })).status).toBe(200);
  });
});

describe('dashboard in a browser', () => {
  it.skipIf(!haveChromium)(
    haveChromium
      ? 'headless Chromium renders the jobs table and the timelines of a seeded history'
      : `SKIPPED: needs Debian's chromium at ${CHROMIUM} (apt-get install chromium); .ci/run installs it`,
    { timeout: 30_000 },
    async () => {
      const { chromium } = await import('playwright-core');
      const d = await dashboard({ refreshMs: 1000 });
      const browser = await chromium.launch({
        executablePath: CHROMIUM,
        headless: true,
        timeout: 15_000,
        args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      });
      try {
        const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
        const problems: string[] = [];
        page.on('console', (message) => {
          if (message.type() === 'error' || message.type() === 'warning') problems.push(`${message.type()}: ${message.text()}`);
        });
        page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
        page.on('request', (req) => {
          if (!req.url().startsWith(d.url)) problems.push(`external request: ${req.url()}`);
        });

        await page.goto(d.url, { waitUntil: 'domcontentloaded', timeout: 10_000 });
        const table = page.getByTestId('jobs-table');
        await table.locator('tr[data-job="report"]').waitFor({ timeout: 10_000 });
        await table.locator('tr[data-job="cleanup"]').waitFor();
        // report's p95 is over 80% of its interval: highlighted as a warning, not yet as danger
        expect(await table.locator('tr[data-job="report"] [data-testid="ratio"]').getAttribute('data-level')).toBe('warning');
        expect(await table.locator('tr[data-job="cleanup"] [data-testid="ratio"]').getAttribute('data-level')).toBe('ok');
        expect(await table.locator('tr[data-job="report"]').innerText()).toMatch(/running[\s\S]*worker-a/);

        const report = page.getByTestId('timeline-report');
        expect(await report.locator('[data-kind="run"]').count()).toBe(22);
        expect(await report.locator('[data-kind="run"][data-outcome="failed"]').count()).toBe(1);
        expect(await report.locator('[data-kind="run"][data-outcome="running"]').count()).toBe(1);
        expect(await report.locator('[data-kind="skip"]').count()).toBe(3);
        expect(await page.getByTestId('interval-report').getAttribute('data-interval-ms')).toBe('60000');
        expect(await page.getByTestId('interval-report').locator('line').count()).toBeGreaterThan(50); // a dashed line per minute

        // the default window is one hour: cleanup's missed slots (65 and 70 minutes ago) show at 6h
        const cleanup = page.getByTestId('timeline-cleanup');
        expect(await cleanup.locator('[data-kind="run"][data-outcome="lost"]').count()).toBe(1);
        expect(await cleanup.locator('[data-kind="missed"]').count()).toBe(0);
        await page.getByRole('button', { name: '6h' }).click();
        await cleanup.locator('[data-kind="missed"]').nth(1).waitFor({ timeout: 5_000 });
        expect(await cleanup.locator('[data-kind="missed"]').count()).toBe(2);
        expect(page.url()).toMatch(/\?hours=6$/);
        await page.getByTestId('interval-cleanup').waitFor({ state: 'attached' });
        mkdirSync(ARTIFACTS, { recursive: true });
        await page.screenshot({ path: `${ARTIFACTS}dashboard-6h.png`, fullPage: true });

        // it refreshes itself: a new skip appears without a reload
        const stamp = await page.getByTestId('last-updated').getAttribute('data-updated-at');
        await pool.query(`insert into leasehold.skips (job, slot, holder, holder_fence, holder_slot, held_for, recorded_by)
                          values ('report', date_trunc('minute', now()) - interval '9 minutes', 'worker-b', 21, null, interval '61 seconds', 'worker-c')`);
        await report.locator('[data-kind="skip"]').nth(3).waitFor({ timeout: 5_000 });
        expect(await page.getByTestId('last-updated').getAttribute('data-updated-at')).not.toBe(stamp);
        await pool.query(`delete from leasehold.skips where job = 'report' and holder_fence = 21`);

        await page.getByRole('button', { name: '1h' }).click();
        await cleanup.locator('[data-kind="missed"]').first().waitFor({ state: 'detached', timeout: 5_000 });
        await page.screenshot({ path: `${ARTIFACTS}dashboard.png`, fullPage: true });
        expect(problems).toEqual([]);
      } finally {
        await browser.close();
      }
    },
  );
});
