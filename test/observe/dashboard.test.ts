// The dashboard: its HTTP API over a seeded history, and the page in a real headless Chromium.
import { mkdirSync } from 'node:fs';
import http from 'node:http';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDashboard, type Dashboard } from '../../src/dashboard/server.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { nextRun, scheduleNote, storedSchedule } from '../../src/schedule/schedule-text.js';
import { cli } from '../support/cli.js';
import { client, freshDatabase, rawPool, sleep } from '../support/db.js';
import { seedHistory } from '../support/seed.js';
import { haveChromium, launchChromium, NO_CHROMIUM } from '../support/browser.js';

const ARTIFACTS = fileURLToPath(new URL('../../test-artifacts/', import.meta.url));

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

/** A request as the page makes it: with the same-origin header the API requires. */
function api(d: Dashboard, path: string, init: RequestInit = {}): Promise<Response> {
  return fetch(`${d.url}${path}`, { ...init, headers: { 'x-leasehold-dashboard': '1', ...(init.headers as Record<string, string> | undefined) } });
}

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
interface PageBody {
  now: string;
  total: number;
  offset: number;
  limit: number;
  jobs: Array<{ job: string; nextRunAt: string | null; scheduleNote: string | null; runs24h: number; failed24h: number; lost24h: number }>;
}
interface SummaryBody {
  summary: Record<string, number>;
  workers: { total: number; workers: Array<{ holders: string[]; leases: number }> };
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
    const res = await api(d, 'api/jobs');
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
    const report = (await (await api(d, 'api/history?job=report&hours=2')).json()) as HistoryBody;
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
    const lastHour = (await (await api(d, 'api/history?job=cleanup&hours=1')).json()) as HistoryBody;
    expect(lastHour.missed).toHaveLength(0);
    expect(lastHour.runs.filter((r) => r.outcome === 'lost')).toHaveLength(1);
    const all = (await (await api(d, 'api/history?hours=2')).json()) as HistoryBody;
    expect(all.missed.map((m) => m.job)).toEqual(['cleanup', 'cleanup']);
    expect(all.runs.filter((r) => r.job === 'cleanup')).toHaveLength(11);
    expect(all.truncated).toBe(false);

    const bad = await api(d, 'api/history?hours=-3');
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: string }).error).toMatch(/hours must be a number from 0.01 to 24/);
  });

  it('is read-only: other methods are 405', async () => {
    const d = await dashboard();
    for (const method of ['POST', 'PUT', 'DELETE', 'PATCH']) {
      const res = await api(d, 'api/jobs', { method });
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
    expect(await broken.json()).toEqual({ error: 'internal error: Error' });

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
    // the first table page is in the HTML: useful before (and without) the script
    const navigated = (await request(d.url)).body; // fetch() says Sec-Fetch-Mode: cors, a navigation does not
    expect(navigated).toMatch(/<tr data-job="report" data-state="running"[^>]*>[\s\S]*worker-a/);
    expect(html).toContain('<noscript>');
    expect(html).not.toMatch(/(src|href)="https?:/); // nothing from the network
    expect((await fetch(`${d.url}nope`)).status).toBe(404);
  });

  it('answers a database failure with 500 and a message, and keeps serving', async () => {
    const dead = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/none', connectionTimeoutMillis: 2000 });
    try {
      const d = await dashboard({ pool: dead });
      const res = await api(d, 'api/jobs');
      expect(res.status).toBe(500);
      expect(((await res.json()) as { error: string }).error).toBe('internal error: cannot reach the database (ECONNREFUSED)');
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
    const page = { 'x-leasehold-dashboard': '1' };
    expect((await request(`${d.url}api/jobs`, { headers: { ...page, host: `localhost:${d.port}` } })).status).toBe(200);
    const foreign = await request(`${d.url}api/jobs`, { headers: { ...page, host: 'attacker.example' } });
    expect(foreign.status).toBe(403);
    expect(foreign.body).toMatch(/not allowed/);
    const proxied = await dashboard({ allowedHosts: ['jobs.internal'] });
    expect((await request(`${proxied.url}api/jobs`, { headers: { ...page, host: 'jobs.internal' } })).status).toBe(200);
  });

  it('pages the job table, filters it, and summarises the fleet and its live workers', async () => {
    const d = await dashboard();
    const names = async (query: string) => ((await (await api(d, `api/jobs?${query}`)).json()) as PageBody).jobs.map((j) => j.job);
    const first = (await (await api(d, 'api/jobs?limit=1')).json()) as PageBody;
    expect(first).toMatchObject({ total: 2, offset: 0, limit: 1 });
    expect(first.jobs.map((j) => j.job)).toEqual(['cleanup']);
    expect(await names('limit=1&offset=1')).toEqual(['report']);
    expect(await names('filter=running')).toEqual(['report']);
    expect(await names('filter=failing')).toEqual(['cleanup', 'report']); // cleanup lost a run, report failed one
    expect(await names('filter=creeping')).toEqual(['report']);
    expect(await names('q=CLEAN')).toEqual(['cleanup']);
    expect(await names('offset=5')).toEqual([]);

    const all = (await (await api(d, 'api/jobs')).json()) as PageBody;
    const now = Date.parse(all.now);
    const report = all.jobs.find((j) => j.job === 'report')!;
    const cleanup = all.jobs.find((j) => j.job === 'cleanup')!;
    // every 1m: the next whole minute; */5 in Berlin: the next multiple of five minutes
    expect(Date.parse(report.nextRunAt!) % 60_000).toBe(0);
    expect(Date.parse(report.nextRunAt!) - now).toBeGreaterThan(0);
    expect(Date.parse(report.nextRunAt!) - now).toBeLessThanOrEqual(60_000);
    expect(Date.parse(cleanup.nextRunAt!) % 300_000).toBe(0);
    expect(Date.parse(cleanup.nextRunAt!) - now).toBeLessThanOrEqual(300_000);
    expect(report).toMatchObject({ runs24h: 21, failed24h: 1, lost24h: 0, scheduleNote: null });
    expect(cleanup).toMatchObject({ runs24h: 11, failed24h: 0, lost24h: 1 });

    const live = await client(url, { holder: 'live-worker' });
    const held = await live.acquire('live-lease', { ttl: '30s' });
    try {
      const body = (await (await api(d, 'api/summary')).json()) as SummaryBody;
      expect(body.summary).toMatchObject({ jobs: 2, running: 1, expired: 0, failing: 2, creeping: 1, over: 0, runs24h: 32, failed24h: 1, lost24h: 1, skips24h: 3, missed24h: 2 });
      expect(body.workers.total).toBeGreaterThanOrEqual(1);
      expect(body.workers.workers.find((w) => w.holders.includes('live-worker'))).toMatchObject({ leases: 1 });
    } finally {
      if (held.acquired) await held.lease.release();
    }
  });

  it('lists a job’s runs, skips and missed slots, newest first', async () => {
    const d = await dashboard();
    const body = (await (await api(d, 'api/runs?job=report&limit=5')).json()) as { job: string; entries: Array<{ kind: string; outcome: string; at: string }> };
    expect(body.job).toBe('report');
    expect(body.entries).toHaveLength(5);
    expect(body.entries.find((e) => e.kind === 'run')).toMatchObject({ outcome: 'running' });
    expect(body.entries.map((e) => e.kind)).toContain('skip');
    for (let i = 1; i < body.entries.length; i++) expect(Date.parse(body.entries[i]!.at)).toBeLessThanOrEqual(Date.parse(body.entries[i - 1]!.at));
  });

  it('answers bad parameters with 400 and a plain message, never a database message', async () => {
    const d = await dashboard();
    const cases = [
      'api/history?job=%00', 'api/history?job=a%1b%5b31m', 'api/runs?job=%00', 'api/runs', 'api/timelines?job=%00',
      `api/timelines?${Array.from({ length: 101 }, (_, i) => `job=j${i}`).join('&')}`,
      'api/history?hours=abc', 'api/history?hours=1e3', 'api/history?hours=25', 'api/history?job=report&hours=745', 'api/history?hours=0',
      'api/history?job=a&job=b', 'api/jobs?offset=-1', 'api/jobs?limit=1000', 'api/jobs?limit=2.5', 'api/jobs?filter=bogus',
      `api/jobs?q=${'x'.repeat(101)}`, 'api/jobs?q=%07', 'api/jobs?sort=name', `api/history?job=${'é'.repeat(201)}`, 'api/summary?x=1',
    ];
    for (const path of cases) {
      const res = await api(d, path);
      const body = (await res.json()) as { error: string };
      expect(res.status, path).toBe(400);
      expect(body.error, path).not.toMatch(/invalid byte|syntax|SQLSTATE|relation|\\u0000|select/i);
      expect(body.error.length, path).toBeLessThan(200);
    }
    expect((await api(d, 'api/nope')).status).toBe(404);
    expect((await api(d, `api/history?job=${'é'.repeat(200)}`)).status).toBe(200);
  });

  it('answers /api/* only to its own page: a same-origin header, and Sec-Fetch-Site when sent', async () => {
    const d = await dashboard({ metricsRegistry: { contentType: 'text/plain', metrics: async () => 'x 1\n' } });
    const bare = await fetch(`${d.url}api/history?hours=24`);
    expect(bare.status).toBe(403);
    expect(((await bare.json()) as { error: string }).error).toMatch(/x-leasehold-dashboard: 1/);
    expect((await api(d, 'api/jobs', { headers: { 'sec-fetch-site': 'cross-site' } })).status).toBe(403);
    expect((await api(d, 'api/jobs', { headers: { 'sec-fetch-site': 'same-site' } })).status).toBe(403);
    expect((await api(d, 'api/jobs', { headers: { 'sec-fetch-site': 'same-origin' } })).status).toBe(200);
    expect((await fetch(`${d.url}metrics`, { headers: { 'sec-fetch-site': 'cross-site' } })).status).toBe(403);
    expect((await fetch(`${d.url}metrics`)).status).toBe(200); // a scraper sends no Sec-Fetch-Site
    // a cross-site subresource load of the page gets the page without its server-rendered rows
    const embedded = await (await fetch(d.url, { headers: { 'sec-fetch-site': 'cross-site', 'sec-fetch-mode': 'no-cors' } })).text();
    expect(embedded).not.toContain('data-job="report"');
  });

  it('100 concurrent cross-site requests never reach the database; a burst of real ones gets 503s, not 500s', async () => {
    const d = await dashboard({ maxConcurrentQueries: 2 });
    let checkouts = 0;
    const count = () => checkouts++;
    pool.on('acquire', count);
    try {
      const hostile = await Promise.all(Array.from({ length: 100 }, () => fetch(`${d.url}api/history?hours=744`).then((r) => r.status)));
      expect(new Set(hostile)).toEqual(new Set([403]));
      expect(checkouts).toBe(0);

      const burst = await Promise.all(
        Array.from({ length: 100 }, (_, i) => api(d, i % 2 ? 'api/history?hours=24' : 'api/jobs?filter=creeping').then(async (r) => ({ status: r.status, retry: r.headers.get('retry-after'), body: await r.text() }))),
      );
      const statuses = burst.map((b) => b.status);
      expect(statuses.filter((s) => s !== 200 && s !== 503)).toEqual([]);
      expect(statuses).toContain(503);
      expect(statuses).toContain(200);
      expect(burst.find((b) => b.status === 503)).toMatchObject({ retry: '1' });
      expect(checkouts).toBeLessThanOrEqual(2 * statuses.filter((s) => s === 200).length + 10);
    } finally {
      pool.off('acquire', count);
    }
    expect((await api(d, 'api/jobs')).status).toBe(200);
  });

  it('says cron steps that do not divide their range honestly, and computes the next run', () => {
    expect(scheduleNote('*/7 * * * *')).toBe('minutes 0,7,…,56: gap of 4 at the hour');
    expect(scheduleNote('*/5 * * * *')).toBeNull();
    expect(scheduleNote('0 */5 * * *')).toBe('hours 0,5,…,20: gap of 4 at the day');
    expect(scheduleNote('*/45 * * * * *')).toBe('seconds 0,45: gap of 15 at the minute');
    expect(scheduleNote('90s')).toBeNull();
    const now = new Date('2026-03-01T10:03:30Z');
    expect(nextRun(storedSchedule('*/7 * * * *', null), now, null)?.toISOString()).toBe('2026-03-01T10:07:00.000Z');
    expect(nextRun(storedSchedule('*/7 * * * *', null), new Date('2026-03-01T10:57:00Z'), null)?.toISOString()).toBe('2026-03-01T11:00:00.000Z');
    expect(nextRun(storedSchedule('90s', null), now, new Date('2026-03-01T10:06:00Z'))?.toISOString()).toBe('2026-03-01T10:07:30.000Z');
    expect(storedSchedule('not a schedule', null)).toBeNull();
  });

  it('refuses a busy port: startDashboard rejects, and `leasehold dashboard` exits 69 with a message', { timeout: 30_000 }, async () => {
    const d = await dashboard();
    await expect(startDashboard({ pool, port: d.port })).rejects.toThrow(`port ${d.port} on 127.0.0.1 is already in use`);
    await expect(startDashboard({ pool, port: 0, colour: 'blue' } as never)).rejects.toThrow(InvalidArgumentError);
    await expect(startDashboard({ pool, port: 0, colour: 'blue' } as never)).rejects.toThrow(/startDashboard\(\): unknown option 'colour'; valid options are pool, port/);
    const result = await cli(['dashboard', '--port', String(d.port)], { DATABASE_URL: url });
    expect(result.code).toBe(69);
    expect(result.stderr).toMatch(/already in use \(choose another port\)/);
  });
});

describe('dashboard in a browser', () => {
  it.skipIf(!haveChromium)(
    haveChromium
      ? 'headless Chromium renders the jobs table and the timelines of a seeded history'
      : NO_CHROMIUM,
    { timeout: 30_000 },
    async () => {
      // the seeded running lease expires 20 s after seeding; on a slow machine this test starts later
      await pool.query(`update leasehold.leases set expires_at = now() + interval '10 minutes' where name = 'report'`);
      const d = await dashboard({ refresh: 1000 });
      const browser = await launchChromium();
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
        await page.locator('[data-testid="last-updated"][data-updated-at]').waitFor({ timeout: 10_000 });
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

        // axis labels never overlap each other or the "now" label, in any window
        for (const [range, hours] of [['15m', 0.25], ['24h', 24], ['6h', 6]] as const) {
          const refreshes = () => page.evaluate(() => performance.getEntriesByName('lh-refresh-end').length);
          const before = await refreshes();
          await page.getByRole('button', { name: range }).click();
          await page.waitForURL(new RegExp(`hours=${hours}$`));
          await expect.poll(refreshes, { timeout: 10_000 }).toBeGreaterThan(before + 1); // one refresh fully after the click
          const boxes = await page.evaluate<Array<[number, number]>>(
            `Array.from(document.querySelectorAll('[data-testid="timeline-axis"] text')).map((t) => { const b = t.getBBox(); return [b.x, b.x + b.width]; }).sort((a, b) => a[0] - b[0])`,
          );
          expect(boxes.length, range).toBeGreaterThanOrEqual(3);
          for (let i = 1; i < boxes.length; i++) expect(boxes[i]![0], `${range}: label ${i} overlaps the one before`).toBeGreaterThan(boxes[i - 1]![1] + 2);
        }

        // a click on a job shows its runs, skips and missed slots
        await table.locator('tr[data-job="cleanup"]').click();
        const runs = page.getByTestId('runs-table');
        await runs.locator('tr[data-kind="missed"]').nth(1).waitFor({ timeout: 10_000 });
        expect(await runs.locator('tr[data-kind="run"][data-outcome="lost"]').count()).toBe(1);
        expect(await runs.locator('tr[data-kind="run"]').count()).toBe(11);
        expect(await page.locator('#runs-title').innerText()).toBe('Runs of cleanup');

        // without JavaScript: the first table page from the server, and a line saying what is missing
        const noScript = await browser.newContext({ javaScriptEnabled: false });
        const plain = await noScript.newPage();
        await plain.goto(d.url, { waitUntil: 'domcontentloaded', timeout: 10_000 });
        expect(await plain.getByTestId('jobs-table').locator('tbody tr').count()).toBe(2);
        expect(await plain.locator('tr[data-job="report"]').innerText()).toMatch(/running[\s\S]*worker-a/);
        expect(await plain.locator('noscript').count()).toBe(1);
        expect(await plain.locator('body').innerText()).toMatch(/JavaScript is off: this is the first page of jobs/);
        await noScript.close();
        expect(problems).toEqual([]);
      } finally {
        await browser.close();
      }
    },
  );
});
