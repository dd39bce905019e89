// The dashboard at fleet scale and against hostile text: 10,000 jobs with 24 hours of history in
// headless Chromium (the first page of rows in the HTML, a bounded DOM, refreshes one after
// another), and job names and error texts built to inject markup, terminal escapes and bidi
// reordering. How fast it paints and how long its main-thread tasks are is measured by
// `npm run bench -- dashboard` (bench/lib/dashboard.ts) with the load average, not here.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDashboard, type Dashboard } from '../../src/dashboard/server.js';
import { client, freshDatabase, rawPool } from '../support/db.js';
import { FLEET_SIZE, seedFleet } from '../support/fleet.js';
import { fleetTrends, jobTrends, SAMPLE_ROWS } from '../../src/monitor/trends.js';
import type { Queryable } from '../../src/db/handle.js';
import { haveChromium, launchChromium, NO_CHROMIUM } from '../support/browser.js';


const HOSTILE_NAMES = ['evil-<script>alert(1)</script>', 'evil-invoice\u202Egnp.exe', 'evil-pay\u200Bments', 'evil-<img src=x onerror=alert(2)>'];
const HOSTILE_ERROR = '\u001b]8;;https://example.invalid/\u0007click\u001b]8;;\u0007 \u001b[31m<b>red</b> <img src=x onerror=alert(3)>';

let pool: pg.Pool;
let dashboard: Dashboard | undefined;
beforeAll(async () => {
  const url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  pool = rawPool(url, 4);
  await seedFleet(pool);
  await pool.query(
    `insert into leasehold.jobs (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
     select n, '*/7 * * * *', null, 420000, 60000, 'skip', 'latest', 'seed' from unnest($1::text[] || array['every-seven']) n`,
    [HOSTILE_NAMES],
  );
  await pool.query(
    `insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome, error)
     select n, date_trunc('minute', now()) - interval '7 minutes', 1, 'worker-\u202Eevil', now() - interval '6 minutes', now() - interval '5 minutes', 'failed', $2
       from unnest($1::text[]) n`,
    [HOSTILE_NAMES, HOSTILE_ERROR],
  );
}, 120_000);
afterAll(async () => {
  await dashboard?.close();
});

describe.skipIf(!haveChromium)(
  haveChromium ? 'dashboard with 10,000 jobs in a browser' : NO_CHROMIUM,
  () => {
    it('paints the first page with its rows, pages and searches on the server, never overlaps refreshes; hostile text stays inert', { timeout: 120_000 }, async () => {
      dashboard = await startDashboard({ pool, port: 0, refresh: 1000 });
      const d = dashboard;
      const browser = await launchChromium();
      try {
        const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
        const problems: string[] = [];
        page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
        page.on('dialog', (dialog) => {
          problems.push(`dialog: ${dialog.message()}`);
          void dialog.dismiss();
        });
        page.on('request', (req) => {
          const u = new URL(req.url());
          if (!req.url().startsWith(d.url) || !(u.pathname === '/' || u.pathname.startsWith('/api/'))) problems.push(`unexpected request: ${req.url()}`);
        });
        await page.goto(d.url, { waitUntil: 'domcontentloaded', timeout: 15_000 });
        const table = page.getByTestId('jobs-table');
        await table.locator('tr[data-job="fleet-00001"]').waitFor({ timeout: 10_000 });
        const rowsInHtml = await page.evaluate<number>(`performance.getEntriesByName('first-contentful-paint').length && document.querySelectorAll('#jobs-body tr').length`);
        expect(rowsInHtml).toBe(50);
        expect(await page.getByTestId('page-count').innerText()).toMatch(/^1–50 of 10,005/);

        // let it refresh itself a few times (every second)
        await page.waitForFunction(() => performance.getEntriesByName('lh-refresh-end').length >= 4, undefined, { timeout: 40_000 });
        const marks = await page.evaluate(() => performance.getEntriesByType('mark').filter((m) => m.name.startsWith('lh-refresh')).map((m) => [m.name, Math.round(m.startTime)] as const));
        marks.forEach(([name], i) => expect(name, `mark ${i}`).toBe(i % 2 ? 'lh-refresh-end' : 'lh-refresh-start'));
        expect(await page.evaluate<number>(`document.getElementsByTagName('*').length`)).toBeLessThan(20_000);
        expect(await table.locator('tbody tr').count()).toBe(50);
        expect(await page.getByTestId('timelines').locator('svg[data-job]').count()).toBe(50);
        await page.getByTestId('chart-workers').waitFor({ timeout: 10_000 });
        expect(await page.getByTestId('summary-workers').innerText()).toMatch(/^worker-\d [\d,]+ of [\d,]+ \(\d+%\)/);
        // 24 h of 380,000 runs: lateness and shares from a sample, and the charts say so
        expect(await page.locator('[data-chart="workers"] figcaption').innerText()).toMatch(/^Runs by worker · from the runs of [\d,]+ of 10,005 jobs$/);
        expect(await table.locator('tr[data-job="fleet-00001"] [data-testid="failures"]').innerText()).toMatch(/^\d+ of 1,?4\d\d · \d+%$/);

        // the next page, from the server
        await page.getByRole('button', { name: 'next page' }).click();
        await table.locator('tr[data-job="fleet-00051"]').waitFor({ timeout: 10_000 });
        expect(await page.getByTestId('page-count').innerText()).toBe('51–100 of 10,005');

        // hostile names and error texts, found through the search box
        await page.getByTestId('search').fill('evil');
        await table.locator('tbody tr').nth(3).waitFor({ timeout: 10_000 });
        await expect.poll(() => table.locator('tbody tr').count(), { timeout: 10_000 }).toBe(4);
        const text = await table.locator('tbody').innerText();
        expect(text).toContain('evil-<script>alert(1)</script>');
        expect(text).toContain('evil-invoiceU+202Egnp.exe');
        expect(text).toContain('evil-payU+200Bments');
        expect(text).toContain('U+001B]8;;https://example.invalid/U+0007click');
        expect(text).not.toMatch(/[\u001b\u0007\u202e\u200b]/);
        expect(await table.locator('img, script, b').count()).toBe(0);
        expect(await page.locator('script').count()).toBe(1);

        await table.locator('tbody tr').first().click();
        const runs = page.getByTestId('runs-table');
        await runs.locator('tr[data-kind="run"]').first().waitFor({ timeout: 10_000 });
        const runText = await runs.innerText();
        expect(runText).toContain('worker-U+202Eevil');
        expect(runText).toContain('U+001B[31m<b>red</b> <img src=x onerror=alert(3)>');
        expect(await runs.locator('img, b').count()).toBe(0);

        await page.getByTestId('search').fill('every-seven');
        await table.locator('tr[data-job="every-seven"]').waitFor({ timeout: 10_000 });
        expect(await table.locator('tr[data-job="every-seven"] [data-testid="schedule-note"]').innerText()).toBe('minutes 0,7,…,56: gap of 4 at the hour');
        expect(problems).toEqual([]);
      } finally {
        await browser.close();
      }
    });
  },
);

/** Runs each statement, and records its plan (EXPLAIN with the same parameters). */
function explaining(db: pg.Pool): { db: Queryable; plans: string[] } {
  const plans: string[] = [];
  const wrapped = {
    query: async (text: string, values?: unknown[]) => {
      const { rows } = await db.query<{ 'QUERY PLAN': unknown }>(`explain (format json) ${text}`, values);
      plans.push(JSON.stringify(rows[0]!['QUERY PLAN']));
      return db.query(text, values);
    },
  } as unknown as Queryable;
  return { db: wrapped, plans };
}

/** "Node Type relation index" of every node of an EXPLAIN (FORMAT JSON) plan. */
function planNodes(json: string): string[] {
  type Node = { 'Node Type': string; 'Relation Name'?: string; 'Index Name'?: string; Plans?: Node[] };
  const walk = (n: Node): string[] => [[n['Node Type'], n['Relation Name'], n['Index Name']].filter(Boolean).join(' '), ...(n.Plans ?? []).flatMap(walk)];
  return (JSON.parse(json) as Array<{ Plan: Node }>).flatMap((p) => walk(p.Plan));
}

describe('dashboard API with 10,000 jobs', () => {
  it('serves trends through the run history’s indexes, never a scan of its runs', { timeout: 60_000 }, async () => {
    const fleet = explaining(pool);
    const all = await fleetTrends(fleet.db, 24);
    // the fleet's 24 h hold 380,000 runs: lateness and holders come from a sample that fits SAMPLE_ROWS
    expect(all.sample!.of).toBe(FLEET_SIZE + HOSTILE_NAMES.length + 1);
    expect(all.sample!.jobs).toBeLessThan(all.sample!.of);
    const sampled = all.buckets.reduce((n, b) => n + b.scheduled, 0);
    expect(sampled).toBeGreaterThan(SAMPLE_ROWS / 4);
    expect(sampled).toBeLessThanOrEqual(2 * SAMPLE_ROWS);
    // every finished run of the window, from run_counts: the window starts at a 15-minute bucket,
    // so the count depends on when the test runs (the seed's oldest runs are 24 h old)
    const { rows: finished } = await pool.query<{ n: string }>(
      `select count(*) as n from leasehold.run_log where finished_at is not null and started_at >= $1`,
      [all.since],
    );
    expect(Number(finished[0]!.n)).toBeGreaterThan(300_000);
    expect(all.buckets.reduce((n, b) => n + b.runs, 0)).toBe(Number(finished[0]!.n));
    const job = explaining(pool);
    const one = await jobTrends(job.db, 'fleet-00001', 24);
    expect(one.buckets.reduce((n, b) => n + b.runs, 0)).toBe(1_440);
    const scans = [...fleet.plans, ...job.plans].flatMap(planNodes);
    expect(scans.filter((n) => n.startsWith('Seq Scan run_log'))).toEqual([]);
    // the job's runs, and each sampled job's, through runs_job_started; the fleet's failures through runs_failing
    expect(job.plans.flatMap(planNodes).filter((n) => n.includes('runs_job_started'))).not.toEqual([]);
    expect(fleet.plans.flatMap(planNodes).filter((n) => n.includes('runs_job_started'))).not.toEqual([]);
    expect(fleet.plans.flatMap(planNodes).filter((n) => n.includes('runs_failing'))).not.toEqual([]);

    // timed through the dashboard, as the page asks (the fleet's answer is then shared for 15 s)
    const d = await startDashboard({ pool, port: 0 });
    try {
      const timed = async (path: string) => {
        const started = performance.now();
        const res = await fetch(`${d.url}${path}`, { headers: { 'x-leasehold-dashboard': '1' } });
        expect(res.status, path).toBe(200);
        await res.json();
        return Math.round(performance.now() - started);
      };
      const times = { fleet24h: await timed('api/trends?hours=24'), fleetCached: await timed('api/trends?hours=24'), job24h: await timed('api/trends?job=fleet-00001&hours=24'), job1h: await timed('api/trends?job=fleet-00001&hours=1') };
      console.log(`trends at ${FLEET_SIZE} jobs (ms): ${JSON.stringify(times)}`);
      expect(times.fleetCached).toBeLessThan(times.fleet24h + 50);
    } finally {
      await d.close();
    }
  });

  it('serves a page, the summary and a page of timelines', { timeout: 60_000 }, async () => {
    const d = await startDashboard({ pool, port: 0 });
    try {
      const get = (path: string) => fetch(`${d.url}${path}`, { headers: { 'x-leasehold-dashboard': '1' } }).then((r) => r.json() as Promise<Record<string, unknown>>);
      const pageBody = (await get('api/jobs?limit=200&offset=9800')) as { total: number; jobs: unknown[] };
      expect(pageBody.total).toBe(FLEET_SIZE + HOSTILE_NAMES.length + 1);
      expect(pageBody.jobs).toHaveLength(200);
      const summary = (await get('api/summary')) as { summary: Record<string, number> };
      expect(summary.summary).toMatchObject({ jobs: FLEET_SIZE + HOSTILE_NAMES.length + 1, running: 248, expired: 103 });
      const names = Array.from({ length: 50 }, (_, i) => `job=fleet-${String(i + 1).padStart(5, '0')}`).join('&');
      const timelines = (await get(`api/timelines?${names}&hours=24`)) as { runs: unknown[]; truncated: boolean };
      expect(timelines.runs).toHaveLength(3000); // 50 jobs × 1,440 runs, capped
      expect(timelines.truncated).toBe(true);
    } finally {
      await d.close();
    }
  });
});
