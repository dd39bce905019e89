// The dashboard's rough edges an operator met, each reproduced in headless Chromium: a 6-field
// cron defined as data, an idle worker's name, backfilled runs, timeline rows below the fold,
// a history younger than the window, and the page on a 390 px wide phone.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser, Page } from 'playwright-core';
import { startDashboard, type Dashboard } from '../../src/dashboard/server.js';
import { silentLogger } from '../../src/observe/logger.js';
import { startWorker, type Worker } from '../../src/worker/worker.js';
import { client, freshDatabase, rawPool } from '../support/db.js';
import { seedHistory } from '../support/seed.js';
import { haveChromium, launchChromium, NO_CHROMIUM } from '../support/browser.js';

let url: string;
let pool: pg.Pool;
let young: pg.Pool;
let dashboard: Dashboard;
let youngDashboard: Dashboard;
let worker: Worker | undefined;
let browser: Browser | undefined;

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  pool = rawPool(url, 4);
  await seedHistory(pool);
  await pool.query(`update leasehold.leases set expires_at = now() + interval '10 minutes' where name = 'report'`);
  // a job defined as data with a seconds field: the database stores no interval for a cron pattern
  await pool.query(`select leasehold.define_schedule('every-ten-seconds', 'tick', 'ops', p_cron => '*/10 * * * * *')`);
  // a backfill of a slot three hours ago, run five minutes ago: not late, and not past its next slot
  await pool.query(
    `insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome, trigger, requested_by)
     values ('cleanup', date_trunc('minute', now()) - interval '3 hours', 40, 'worker-b', now() - interval '5 minutes', now() - interval '4 minutes', 'succeeded', 'backfill', 'ops')`,
  );
  // more jobs than fit in the window, so that timeline rows lie below the fold
  await pool.query(`insert into leasehold.jobs (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
                    select 'lane-' || lpad(g::text, 2, '0'), '1m', null, 60000, 30000, 'skip', 'latest', 'seed' from generate_series(1, 12) g`);
  await pool.query(`insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome)
                    select 'lane-' || lpad(g::text, 2, '0'), date_trunc('minute', now()) - make_interval(mins => k), k, 'worker-a',
                           date_trunc('minute', now()) - make_interval(mins => k), date_trunc('minute', now()) - make_interval(mins => k) + interval '5 seconds', 'succeeded'
                      from generate_series(1, 12) g, generate_series(1, 30) k`);
  // an idle worker named w1: its one job runs once a year, so it holds no lease
  worker = await startWorker({
    connectionString: url,
    holder: 'w1',
    jobs: [{ name: 'yearly', cron: '0 0 1 1 *', handler: async () => undefined }],
    logger: silentLogger(),
    handleSignals: false,
  });
  dashboard = await startDashboard({ pool, port: 0, refresh: 1000 });

  // a fleet whose history began four minutes ago
  const youngUrl = await freshDatabase();
  await (await client(youngUrl, { liveness: false })).close();
  young = rawPool(youngUrl, 4);
  await young.query(`insert into leasehold.jobs (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
                     values ('fresh', '10s', null, 10000, 30000, 'skip', 'latest', 'seed')`);
  await young.query(`insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome)
                     select 'fresh', s, k, 'worker-a', s + interval '100 milliseconds', s + interval '2 seconds', 'succeeded'
                       from generate_series(1, 24) k, lateral (select date_trunc('minute', now()) - make_interval(secs => 10 * k) as s) x
                      where s > now() - interval '4 minutes'`);
  youngDashboard = await startDashboard({ pool: young, port: 0, refresh: 1000 });
  if (haveChromium) browser = await launchChromium();
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await dashboard?.close();
  await youngDashboard?.close();
  await worker?.stop();
  await pool?.end();
  await young?.end();
});

async function open(d: Dashboard, width = 1280, height = 900): Promise<{ page: Page; problems: string[] }> {
  const page = await browser!.newPage({ viewport: { width, height } });
  const problems: string[] = [];
  page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
  await page.goto(d.url, { waitUntil: 'domcontentloaded', timeout: 10_000 });
  await page.locator('[data-testid="last-updated"][data-updated-at]').waitFor({ timeout: 10_000 });
  await page.locator('#timelines .lane-row[data-job]').first().waitFor({ timeout: 10_000 });
  return { page, problems };
}

describe.skipIf(!haveChromium)(haveChromium ? 'dashboard rough edges in a browser' : NO_CHROMIUM, () => {
  it('a 6-field cron defined as data shows its interval and the timeline its ruler', { timeout: 30_000 }, async () => {
    const { page, problems } = await open(dashboard);
    const row = page.locator('tr[data-job="every-ten-seconds"]');
    expect(await row.locator('td').nth(1).innerText()).toMatch(/\*\/10 \* \* \* \* \*\s+every 10s/);
    expect(await page.getByTestId('interval-every-ten-seconds').getAttribute('data-interval-ms')).toBe('10000');
    expect(await page.getByTestId('interval-every-ten-seconds').locator('.ruler').innerHTML()).toContain('interval 10s');
    expect(problems).toEqual([]);
    await page.close();
  });

  it('an idle worker shows its holder name, not "(no lease held)"', { timeout: 30_000 }, async () => {
    const { page } = await open(dashboard);
    const card = page.getByTestId('worker').filter({ hasText: 'w1' });
    await card.waitFor({ timeout: 10_000 });
    expect(await card.innerText()).toMatch(/^w1 · idle, no lease held/);
    expect(await page.getByTestId('workers').innerText()).not.toContain('(no lease held)');
    await page.close();
  });

  it('a backfilled run of a past slot is drawn as asked for, not as late or past its next slot', { timeout: 30_000 }, async () => {
    const { page } = await open(dashboard);
    const cleanup = page.getByTestId('timeline-cleanup');
    const backfill = cleanup.locator('[data-kind="run"][data-trigger="backfill"]');
    expect(await backfill.count()).toBe(1);
    expect(await cleanup.locator('[data-kind="overrun"]').count()).toBe(0);
    // its tooltip says which slot it ran, not "3h after its slot"
    await backfill.hover();
    const tip = await page.locator('.tooltip').innerText();
    expect(tip).toMatch(/backfill of slot/);
    expect(tip).not.toMatch(/after its slot/);
    await page.close();
  });

  it('every timeline row keeps its label and bars after a job’s runs open, also below the fold', { timeout: 30_000 }, async () => {
    const { page } = await open(dashboard);
    await page.locator('tr[data-job="cleanup"]').click();
    await page.getByTestId('runs-table').locator('tr[data-kind="run"]').first().waitFor({ timeout: 10_000 });
    await page.waitForFunction(() => performance.getEntriesByName('lh-refresh-end').length >= 3, undefined, { timeout: 10_000 });
    const lanes = await page.evaluate<Array<{ job: string; label: string; bars: number; height: number }>>(
      `Array.from(document.querySelectorAll('#timelines .lane-row[data-job]')).map((r) => ({ job: r.getAttribute('data-job'),
         label: r.querySelector('.lane-label').innerText, bars: r.querySelectorAll('[data-kind="run"]').length, height: r.getBoundingClientRect().height }))`,
    );
    expect(lanes.length).toBe(16);
    for (const lane of lanes) {
      expect(lane.label, lane.job).toContain(lane.job);
      expect(lane.height, lane.job).toBeGreaterThan(40);
      if (lane.job.startsWith('lane-')) expect(lane.bars, lane.job).toBeGreaterThan(0);
    }
    await page.close();
  });

  it('a history of a few minutes fills the window instead of a sliver at its right end', { timeout: 30_000 }, async () => {
    const { page } = await open(youngDashboard);
    const first = await page.evaluate<{ x: number; width: number }>(
      `(() => { const svg = document.querySelector('[data-testid="timeline-fresh"]'); const xs = Array.from(svg.querySelectorAll('[data-kind="run"]')).map((r) => Number(r.getAttribute('x')));
         return { x: Math.min(...xs), width: Number(svg.getAttribute('width')) }; })()`,
    );
    expect(first.x / first.width).toBeLessThan(0.25); // at 1 h it was at 93 % of the width
    expect(await page.getByTestId('window-note').innerText()).toMatch(/^nothing before \d\d:\d\d$/);
    await page.close();
  });

  it('on a 390 px wide phone the page does not scroll sideways; wide tables scroll inside their cards', { timeout: 30_000 }, async () => {
    const { page, problems } = await open(dashboard, 390, 844);
    await page.locator('[data-testid="chart-rates"]').waitFor({ timeout: 10_000 });
    const widths = await page.evaluate<{ page: number; body: number; header: number; tableWrap: number; table: number }>(
      `({ page: document.documentElement.scrollWidth, body: document.body.scrollWidth, header: document.querySelector('header.top').getBoundingClientRect().height,
          tableWrap: document.querySelector('.table-wrap').clientWidth, table: document.querySelector('table.jobs').scrollWidth })`,
    );
    expect(widths.page).toBeLessThanOrEqual(390); // 1,412 px before
    expect(widths.body).toBeLessThanOrEqual(390);
    expect(widths.header).toBeLessThan(160); // the summary wraps under the brand instead of a column of words
    expect(widths.table).toBeGreaterThan(widths.tableWrap); // the job table scrolls in its card
    expect(await page.locator('#timelines').getAttribute('class')).toContain('stacked');
    for (const id of ['rates', 'workers', 'lateness']) {
      const box = await page.getByTestId(`chart-${id}`).boundingBox();
      expect(box!.x + box!.width, id).toBeLessThanOrEqual(390);
    }
    expect(problems).toEqual([]);
    await page.close();
  });
});
