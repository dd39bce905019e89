// The dashboard's trends: /api/trends against a seeded history with known numbers, and each chart
// in headless Chromium, read through what a person without colour or a mouse gets: the summary
// lines, the keyboard cursor's readout and the table of values.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDashboard, type Dashboard } from '../../src/dashboard/server.js';
import type { Trends } from '../../src/monitor/trends.js';
import { client, freshDatabase, rawPool } from '../support/db.js';
import { seedHistory } from '../support/seed.js';
import { haveChromium, launchChromium, NO_CHROMIUM } from '../support/browser.js';

let pool: pg.Pool;
let dashboard: Dashboard;

beforeAll(async () => {
  const url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  pool = rawPool(url, 4);
  await seedHistory(pool);
  await pool.query(`update leasehold.leases set expires_at = now() + interval '10 minutes' where name = 'report'`);
  // "laggard": every 10 min, 4 scheduled runs of which 2 started 5 s after their slot, and a
  // backfill of a slot 5 hours ago run 25 minutes ago (not a late start: not counted)
  await pool.query(`insert into leasehold.jobs (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
                    values ('laggard', '10m', null, 600000, 30000, 'skip', 'latest', 'seed')`);
  await pool.query(`insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome, trigger)
                    select 'laggard', s, k, 'worker-c', s + case when k % 2 = 1 then interval '5 seconds' else interval '500 milliseconds' end,
                           s + interval '6 seconds', 'succeeded', 'schedule'
                      from generate_series(1, 4) k, lateral (select date_trunc('minute', now()) - make_interval(mins => 10 * k) as s) x
                    union all
                    select 'laggard', date_trunc('minute', now()) - interval '5 hours', 5, 'worker-c', now() - interval '25 minutes', now() - interval '24 minutes', 'succeeded', 'backfill'`);
  dashboard = await startDashboard({ pool, port: 0, refresh: 1000 });
});
afterAll(async () => {
  await dashboard?.close();
  await pool?.end();
});

type TrendsBody = Omit<Trends, 'now' | 'since' | 'buckets'> & { hours: number; now: string; since: string; buckets: Array<Trends['buckets'][number] & { at: string }> };

async function trends(query: string): Promise<TrendsBody> {
  const res = await fetch(`${dashboard.url}api/trends?${query}`, { headers: { 'x-leasehold-dashboard': '1' } });
  expect(res.status, await res.clone().text()).toBe(200);
  return (await res.json()) as TrendsBody;
}
const sum = (t: TrendsBody, key: 'runs' | 'failed' | 'lost' | 'skips' | 'missed' | 'scheduled' | 'late') => t.buckets.reduce((n, b) => n + b[key], 0);
const max = (values: Array<number | null>) => Math.max(...values.filter((v): v is number => v !== null));

describe('GET /api/trends', () => {
  it('buckets one job’s runs: durations against its interval, rates, lateness and each holder’s share', async () => {
    const report = await trends('job=report&hours=1');
    expect(report).toMatchObject({ job: 'report', hours: 1, stepMs: 60_000, intervalMs: 60_000, sample: null, truncated: false });
    expect(report.buckets).toHaveLength(61); // one a minute, the current one included
    expect(Date.parse(report.buckets[1]!.at) - Date.parse(report.buckets[0]!.at)).toBe(60_000);
    expect(sum(report, 'runs')).toBe(21); // finished runs only: the running one is not a duration yet
    expect(sum(report, 'failed')).toBe(1);
    expect(sum(report, 'skips')).toBe(3);
    expect(max(report.buckets.map((b) => b.durationMax))).toBe(52); // 45 + 7 s
    expect(max(report.buckets.map((b) => b.durationP95))).toBe(52);
    expect(sum(report, 'scheduled')).toBe(21);
    expect(sum(report, 'late')).toBe(0); // 1 s after the slot is on time
    expect(report.holders).toEqual([
      { holder: 'worker-b', runs: expect.any(Array) },
      { holder: 'worker-a', runs: expect.any(Array) },
    ]);
    expect(report.holders.map((h) => h.runs.reduce((a, b) => a + b, 0))).toEqual([11, 10]);

    const laggard = await trends('job=laggard&hours=6');
    expect(laggard.stepMs).toBe(300_000);
    expect(sum(laggard, 'runs')).toBe(5);
    expect(sum(laggard, 'scheduled')).toBe(4); // the backfill is not a late start
    expect(sum(laggard, 'late')).toBe(2);
    expect(max(laggard.buckets.map((b) => b.lateMax))).toBe(5);

    const cleanup = await trends('job=cleanup&hours=2');
    expect(sum(cleanup, 'lost')).toBe(1);
    expect(sum(cleanup, 'missed')).toBe(2);
    expect(cleanup.intervalMs).toBe(300_000);
  });

  it('buckets the fleet’s runs from run_counts, its failures, skips and missed slots, and lateness and holders from every job while few', async () => {
    const fleet = await trends('hours=2');
    expect(fleet).toMatchObject({ job: null, hours: 2, stepMs: 120_000, intervalMs: null, sample: { jobs: 3, of: 3 } });
    expect(sum(fleet, 'runs')).toBe(21 + 11 + 5);
    expect(sum(fleet, 'failed')).toBe(1);
    expect(sum(fleet, 'lost')).toBe(1);
    expect(sum(fleet, 'skips')).toBe(3);
    expect(sum(fleet, 'missed')).toBe(2);
    expect(sum(fleet, 'scheduled')).toBe(21 + 11 + 4);
    expect(sum(fleet, 'late')).toBe(2);
    expect(Object.fromEntries(fleet.holders.map((h) => [h.holder, h.runs.reduce((a, b) => a + b, 0)]))).toEqual({ 'worker-b': 22, 'worker-a': 10, 'worker-c': 5 });
    expect(fleet.buckets.every((b) => b.durationP95 === null)).toBe(true);
  });

  it('refuses windows it does not serve: the fleet over 24 h, a job over 31 days, unknown parameters', async () => {
    for (const query of ['hours=25', 'job=report&hours=745', 'hours=0.1', 'job=%00', 'bucket=5']) {
      const res = await fetch(`${dashboard.url}api/trends?${query}`, { headers: { 'x-leasehold-dashboard': '1' } });
      expect(res.status, query).toBe(400);
    }
    expect((await trends('job=report&hours=744')).stepMs).toBe(43_200_000);
  });
});

describe.skipIf(!haveChromium)(haveChromium ? 'the trends charts in a browser' : NO_CHROMIUM, () => {
  it('draws the fleet’s and a job’s charts from known data, readable as text and by keyboard', { timeout: 60_000 }, async () => {
    const browser = await launchChromium();
    try {
      const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
      const problems: string[] = [];
      page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
      await page.goto(dashboard.url, { waitUntil: 'domcontentloaded' });
      await page.getByTestId('chart-rates').waitFor({ timeout: 10_000 });
      await page.getByRole('button', { name: 'trends over 6 hours' }).click();
      await expect.poll(() => page.locator('#trends-hint').innerText(), { timeout: 10_000 }).toMatch(/^per 5m/);

      // the fleet: no duration chart (durations are per job), shares and rates as text
      expect(await page.locator('#trends-title').innerText()).toBe('Trends of the fleet');
      expect(await page.getByTestId('chart-duration').count()).toBe(0);
      expect(await page.getByTestId('summary-workers').innerText()).toBe('worker-b 22 of 37 (59%) · worker-a 10 of 37 (27%) · worker-c 5 of 37 (14%)');
      expect(await page.getByTestId('summary-rates').innerText()).toBe(
        'over the window: 5.4% of 37 runs failed, lost or timed out; 7.5% of slots skipped; 5.6% of scheduled runs late',
      );
      const stacks = await page.getByTestId('chart-workers').locator('g[data-series] rect').evaluateAll((rects) => rects.reduce((n, r) => n + Number(r.getAttribute('data-value')), 0));
      expect(stacks).toBe(37);
      expect(Number(await page.getByTestId('chart-lateness').locator('path[data-series="max"]').getAttribute('data-points'))).toBeGreaterThan(3);
      // laggard's two late starts, 5 s after their slots, are the two longest in the table of values
      const maxima = await page.getByTestId('values-lateness').locator('tbody tr td:nth-child(4)').allTextContents(); // closed: text, not rendered
      expect(maxima.filter((v) => v === '5.0s')).toHaveLength(2);
      expect(maxima.filter((v) => v !== '5.0s').every((v) => v === '1.0s' || v === '500 ms')).toBe(true);
      expect(page.url()).not.toContain('hours'); // the trends' range is not the timeline's
      expect(await page.getByTestId('error').isHidden()).toBe(true);

      // a job: click its row, then read its duration chart with the keyboard
      await page.locator('tr[data-job="report"]').click();
      await page.getByTestId('chart-duration').waitFor({ timeout: 10_000 });
      await page.getByRole('button', { name: 'trends over 1 hour' }).click();
      await expect.poll(() => page.locator('#trends-hint').innerText(), { timeout: 10_000 }).toMatch(/^per 1m/);
      expect(await page.locator('#trends-title').innerText()).toBe('Trends of report');
      expect(await page.getByTestId('ref-duration').getAttribute('data-value')).toBe('60'); // the interval, in seconds
      expect(await page.getByTestId('summary-duration').innerText()).toBe('highest p95 52s = 87% of the 1m interval');
      expect(await page.getByTestId('summary-workers').innerText()).toBe('worker-b 11 of 21 (52%) · worker-a 10 of 21 (48%)');
      expect(Number(await page.getByTestId('chart-duration').locator('path[data-series="p95"]').getAttribute('data-points'))).toBe(21);

      const values = page.getByTestId('values-duration');
      await page.getByTestId('chart-duration').locator('xpath=..').locator('summary').click();
      expect(await values.locator('tbody tr').count()).toBe(21);
      expect(await values.locator('tbody tr').last().innerText()).toMatch(/\t11s\t11s\t11s$/); // p95, p50, max of the failed run's minute

      const plot = page.getByTestId('chart-duration');
      await plot.focus();
      const readout = page.getByTestId('readout-duration');
      // focus puts the cursor on the newest bucket; the window starts at the first run (58 min ago)
      await expect.poll(() => readout.getAttribute('data-bucket')).not.toBeNull();
      expect(['58', '59']).toContain(await readout.getAttribute('data-bucket')); // 59 when a minute turned since seeding
      await page.keyboard.press('Home');
      await expect.poll(() => readout.getAttribute('data-bucket')).toBe('0');
      await page.keyboard.press('ArrowRight');
      expect(await readout.getAttribute('data-bucket')).toBe('1');
      expect(await readout.innerText()).toMatch(/^\d\d:\d\d – \d\d:\d\d: p95 – · p50 – · max – · interval 1m$/);
      // to the minute of the failed run, 10 minutes ago: its values as text
      const failedRow = await values.locator('tbody tr').last().locator('td').first().innerText();
      await page.keyboard.press('End');
      for (let i = 0; i < 15; i++) {
        if ((await readout.innerText()).startsWith(failedRow)) break;
        await page.keyboard.press('ArrowLeft');
      }
      expect(await readout.innerText()).toMatch(new RegExp(`^${failedRow} – \\d\\d:\\d\\d: p95 11s · p50 11s · max 11s · interval 1m$`));

      // back to the fleet
      await page.getByRole('button', { name: 'show the fleet' }).click();
      await expect.poll(() => page.locator('#trends-title').innerText(), { timeout: 10_000 }).toBe('Trends of the fleet');
      expect(problems).toEqual([]);
    } finally {
      await browser.close();
    }
  });
});
