// A run that outlived its job's timeout (outcome 'timed-out', sql/baseline/2_scheduler.sql) is a
// failure wherever "failing" is shown: job_status, fleet_summary(), the dashboard's failing
// filter and counts, `leasehold status --json` and the metrics. A job whose every run times
// out must not look healthy; a timed-out run older than 24 h, or another job's, counts nowhere.
// Everything is read through a role with only the documented `reader` grant (what dashboards
// and `leasehold status` are given, docs/security.md).
import http from 'node:http';
import type pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/monitor/index.js';
import { startDashboard } from '../../src/dashboard/index.js';
import { fleetSummary, jobPage } from '../../src/monitor/queries.js';
import { cli } from '../support/cli.js';
import { pool, ROLE, urlAs, usePrivilegeFixture } from '../support/privileges.js';

let url: string;
let owner: pg.Pool;
let reader: pg.Pool;
usePrivilegeFixture((fixture) => ({ url, owner } = fixture));

async function job(name: string): Promise<void> {
  await owner.query(
    `insert into leasehold.jobs (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
     values ($1, 'every', null, 3600000, 30000, 'skip', 'latest', 'test')`,
    [name],
  );
  await owner.query('insert into leasehold.leases (name, fence) values ($1, 0)', [name]);
}

/** Finished runs `ago` minutes back, each lasting a second. */
async function runs(name: string, outcome: string, agoMinutes: number[]): Promise<void> {
  await owner.query(
    `insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome, error)
     select $1, now() - a * interval '1 minute', 1000 + nextval('leasehold.run_log_id_seq'), 'w',
            now() - a * interval '1 minute', now() - a * interval '1 minute' + interval '1 second', $2,
            case when $2 = 'timed-out' then 'run exceeded its timeout of 500 ms' end
       from unnest($3::int[]) a`,
    [name, outcome, agoMinutes],
  );
}

beforeAll(async () => {
  reader = pool(url, ROLE.reader);
  // 'capped': every run in 24 h timed out; 'healthy': succeeded runs and one timed-out run 30 h ago
  await job('capped');
  await job('healthy');
  await runs('capped', 'timed-out', [10, 70, 130]);
  await runs('healthy', 'succeeded', [5, 65, 125]);
  await runs('healthy', 'timed-out', [30 * 60]);
});

describe('a job whose runs time out is failing', () => {
  it('in job_status (timed_out_24h, the last column) and fleet_summary() (failing, timed_out_24h)', async () => {
    const status = await reader.query(`select job, runs_24h, failed_24h, lost_24h, timed_out_24h from leasehold.job_status order by job`);
    expect(status.rows).toEqual([
      { job: 'capped', runs_24h: 3, failed_24h: 0, lost_24h: 0, timed_out_24h: 3 },
      { job: 'healthy', runs_24h: 3, failed_24h: 0, lost_24h: 0, timed_out_24h: 0 },
    ]);
    expect(status.fields.at(-1)?.name).toBe('timed_out_24h');
    const [summary] = (await reader.query(`select failing, failed_24h, lost_24h, timed_out_24h from leasehold.fleet_summary()`)).rows;
    expect(summary).toEqual({ failing: 1, failed_24h: '0', lost_24h: '0', timed_out_24h: '3' });
    expect(await fleetSummary(reader)).toMatchObject({ failing: 1, failed24h: 0, lost24h: 0, timedOut24h: 3 });
  });

  it('reads failures through the partial index runs_failing, which replaced runs_failed', async () => {
    const { rows } = await owner.query(`select indexname, indexdef from pg_indexes where schemaname = 'leasehold' and indexname in ('runs_failed', 'runs_failing')`);
    expect(rows.map((r) => r.indexname)).toEqual(['runs_failing']);
    expect(rows[0].indexdef).toMatch(/WHERE \(outcome = ANY \(ARRAY\['failed'::text, 'lost'::text, 'timed-out'::text\]\)\)/);
    const c = await owner.connect();
    try {
      await c.query('begin');
      await c.query('set local enable_seqscan = off');
      const plan = (await c.query(`explain select count(*) from leasehold.runs r where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at > now() - interval '24 hours'`)).rows.map((r) => r['QUERY PLAN']).join('\n');
      expect(plan).toContain('runs_failing');
      await c.query('rollback');
    } finally {
      // discarded, not pooled: a failed expectation may have left it inside a transaction
      c.release(true);
    }
  });

  it('in the dashboard: the failing filter, the page figures, the failures column and the summary', async () => {
    const failing = await jobPage(reader, { filter: 'failing', limit: 10, offset: 0 });
    expect(failing.jobs.map((j) => j.job)).toEqual(['capped']);
    expect(failing.jobs[0]).toMatchObject({ runs24h: 3, failed24h: 0, lost24h: 0, timedOut24h: 3 });
    const all = await jobPage(reader, { filter: 'all', limit: 10, offset: 0 });
    expect(all.jobs.map((j) => [j.job, j.timedOut24h])).toEqual([['capped', 3], ['healthy', 0]]);
    // the light first paint has no 24 h figures: zero, not a stale or missing field
    expect((await jobPage(reader, { filter: 'all', limit: 10, offset: 0, light: true })).jobs.map((j) => j.timedOut24h)).toEqual([0, 0]);

    const d = await startDashboard({ pool: reader, port: 0 });
    try {
      const api = async (path: string) => (await fetch(`${d.url}${path}`, { headers: { 'x-leasehold-dashboard': '1' } })).json() as Promise<Record<string, unknown>>;
      expect(((await api('api/jobs?filter=failing')).jobs as Array<{ job: string }>).map((j) => j.job)).toEqual(['capped']);
      expect((await api('api/summary')).summary).toMatchObject({ jobs: 2, failing: 1, failed24h: 0, lost24h: 0, timedOut24h: 3 });
      // the server-rendered first page: the failures column counts the timed-out runs
      // as a browser navigates (fetch() would send sec-fetch-mode: cors, which gets no rows)
      const html = await new Promise<string>((resolve, reject) => {
        http.get(d.url, { headers: { 'sec-fetch-mode': 'navigate' } }, (res) => {
          let body = '';
          res.setEncoding('utf8').on('data', (chunk: string) => (body += chunk)).on('end', () => resolve(body)).on('error', reject);
        }).on('error', reject);
      });
      const cell = (job: string) => new RegExp(`<tr data-job="${job}"[^]*?data-testid="failures"><span([^>]*)>([^<]*)</span>`).exec(html)?.slice(1);
      expect(cell('capped')).toEqual([' class="count-bad"', '3 of 3 · 100%']);
      expect(cell('healthy')).toEqual(['', '0 of 3']);
    } finally {
      await d.close();
    }
  });

  it('in `leasehold status` and its --json', async () => {
    const text = await cli(['status'], { DATABASE_URL: urlAs(url, ROLE.reader) });
    expect(text.stdout).toMatch(/2 jobs: .*1 failing \(failed, lost or timed-out run in 24 h\)/);
    const out = await cli(['status', '--json'], { DATABASE_URL: urlAs(url, ROLE.reader) });
    const json = JSON.parse(out.stdout) as { summary: { failing: number }; jobs: Array<{ job: string; attention: string | null; timedOut24h: number }> };
    expect(json.summary.failing).toBe(1);
    expect(json.jobs.map((j) => [j.job, j.attention, j.timedOut24h])).toEqual([['capped', 'failing', 3], ['healthy', null, 0]]);
  });

  it('in the metrics: leasehold_job_timed_out_24h, the fleet runs by outcome and jobs_failing', async () => {
    const metrics = createMetrics();
    metrics.observeDatabase(reader);
    const text = await metrics.metrics();
    expect(text).toMatch(/^leasehold_job_timed_out_24h\{job="capped"\} 3$/m);
    expect(text).toMatch(/^leasehold_job_timed_out_24h\{job="healthy"\} 0$/m);
    expect(text).toMatch(/^leasehold_runs_24h\{outcome="timed-out"\} 3$/m);
    expect(text).toMatch(/^leasehold_jobs_failing 1$/m);
  });
});
