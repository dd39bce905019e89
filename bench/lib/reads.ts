// The reads part: the operator's reads at fleet scale (default 100,000 jobs and 10 million
// runs, BENCH_READS_JOBS / BENCH_READS_RUNS), each timed against a baseline measured in the
// same run on the same data: the schema-5 form of the same read (kept here as SQL text), or a
// plain select of the same rows. Baselines are cut off at BENCH_READS_BASELINE_CAP seconds
// (statement_timeout) so one run stays bounded; a cut-off baseline reads "> cap". Also an idle
// worker's RSS on the compiled package (dist/) with 10,000 job definitions, against a bare
// node process and a 1-job worker. The baseline of `leasehold status` is its schema-17
// statement alone (fleetStatus() lists the other leases beside it, on a second connection).
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { fleetStatus } from '../../src/monitor/fleet-status.js';
import { jobHistory, jobStatus } from '../../src/monitor/status.js';
import { fleetSummary, jobPage } from '../../src/monitor/queries.js';
import { seedStatements, type ReadsScale } from './reads-seed.js';
import { round } from './stats.js';
import type { Table } from './table.js';

export interface ReadsSettings extends ReadsScale {
  /** Baselines stop after this many seconds. */
  baselineCapSeconds: number;
  /** Timed repetitions of each read; the median is reported. */
  repeats: number;
  idleJobs: number;
}

export interface ReadTiming {
  read: string;
  ms: number;
  /** null: no baseline for this read. Infinity-free: a cut-off baseline is the cap, with capped true. */
  baselineMs: number | null;
  baselineCapped: boolean;
  baseline: string;
  rows: number;
}

export interface IdleRss {
  what: string;
  rssMiB: number;
}

export interface ReadsResults {
  settings: ReadsSettings;
  seedSeconds: number;
  reads: ReadTiming[];
  idle: IdleRss[] | { skipped: string };
  loadAverage: { start: number[]; end: number[] };
}

// The schema-5 job_status (sql/baseline/5_reads.sql): a pass over every run for every query.
const JOB_STATUS_V5 = `(
with recent as (
  select job, percentile_cont(0.5) within group (order by extract(epoch from finished_at - started_at)) as p50,
         percentile_cont(0.95) within group (order by extract(epoch from finished_at - started_at)) as p95,
         count(*) as runs, count(*) filter (where outcome = 'failed') as failed, count(*) filter (where outcome = 'lost') as lost
    from leasehold.runs where finished_at is not null and started_at > now() - interval '24 hours' group by job
), last_run as (
  select distinct on (job) job, slot, outcome, started_at, finished_at, error, holder from leasehold.runs order by job, started_at desc
), skips as (
  select job, count(*) as n from leasehold.skips where recorded_at > now() - interval '24 hours' group by job
), missed as (
  select job, count(*) as n from leasehold.missed where recorded_at > now() - interval '24 hours' group by job
)
select j.name as job, l.fence, r.outcome as last_outcome, rc.runs, rc.p95, s.n as skips, m.n as missed
  from leasehold.jobs j left join leasehold.leases l on l.name = j.name left join last_run r on r.job = j.name
  left join recent rc on rc.job = j.name left join skips s on s.job = j.name left join missed m on m.job = j.name) v5`;

// The schema-13 dashboard summary (src/dashboard/queries.ts before fleet_summary()): a per-job
// p95 over one pass of 24 h of runs.
const SUMMARY_V13 = `
with recent as (
  select job, count(*) as runs, count(*) filter (where outcome = 'failed') as failed, count(*) filter (where outcome = 'lost') as lost,
         percentile_cont(0.95) within group (order by extract(epoch from finished_at - started_at)) as p95
    from leasehold.runs where finished_at is not null and started_at > now() - interval '24 hours' group by job
), ratios as (
  select r.*, case when j.interval_ms > 0 then r.p95 * 1000 / j.interval_ms end as ratio from recent r join leasehold.jobs j on j.name = r.job
)
select (select count(*) from leasehold.jobs) as jobs,
       (select count(*) from leasehold.jobs j join leasehold.lease_status l on l.name = j.name where l.state = 'held') as running,
       (select count(*) from leasehold.jobs j join leasehold.lease_status l on l.name = j.name where l.state = 'expired') as expired,
       (select count(*) from ratios where failed + lost > 0) as failing,
       (select count(*) from ratios where ratio >= 0.8 and ratio < 1) as creeping, (select count(*) from ratios where ratio >= 1) as over,
       (select coalesce(sum(runs), 0) from ratios) as runs_24h, (select coalesce(sum(failed), 0) from ratios) as failed_24h,
       (select coalesce(sum(lost), 0) from ratios) as lost_24h,
       (select count(*) from leasehold.skips where recorded_at > now() - interval '24 hours') as skips_24h,
       (select count(*) from leasehold.missed where recorded_at > now() - interval '24 hours') as missed_24h`;

// `leasehold status` before fleet_status() (src/observe/fleet-status.ts of schema 17): every
// flagged job found once, then all of them ranked together to count them and pick the first 50.
const STATUS_V17 = `
with flagged as (
  select l.name as job, 0 as rank, l.expires_at as at
    from leasehold.lease_status l join leasehold.jobs j on j.name = l.name
   where l.state = 'expired'
  union all
  select r.job, 1, max(r.started_at) from leasehold.runs r
   where r.outcome in ('failed', 'lost', 'timed-out') and r.started_at > now() - interval '24 hours' group by r.job
  union all
  select s.job, 2, max(s.recorded_at) from leasehold.skips s where s.recorded_at > now() - interval '24 hours' group by s.job
  union all
  select m.job, 3, max(m.recorded_at) from leasehold.missed m where m.recorded_at > now() - interval '24 hours' group by m.job
),
ranked as (select distinct on (job) job, rank, at from flagged order by job, rank, at desc),
counts as (
  select count(*) filter (where rank = 0) as expired, count(*) filter (where rank = 1) as failing,
         count(*) filter (where rank = 2) as skipping, count(*) filter (where rank = 3) as missing
    from flagged
),
chosen as (
  (select job, rank, at from ranked order by rank, at desc, job limit 50)
  union all
  (select j.name, 9, null from leasehold.jobs j
    where (select count(*) from ranked) < 50 and not exists (select 1 from ranked r where r.job = j.name)
    order by j.name limit 50)
),
page as (select * from chosen order by rank, at desc nulls last, job limit 50)
select p.rank, s.*, c.*,
       (select count(*) from leasehold.jobs)::integer as total_jobs,
       (select count(*) from leasehold.lease_status l join leasehold.jobs j on j.name = l.name
         where l.state = 'held')::integer as total_running,
       (select count(*) from leasehold.lease_status l where not exists (select 1 from leasehold.jobs j where j.name = l.name))::integer as total_leases,
       (select count(*) from leasehold.lease_status l where l.state <> 'free'
           and not exists (select 1 from leasehold.jobs j where j.name = l.name))::integer as total_leases_held
  from counts c
  left join page p on true
  left join lateral (select * from leasehold.job_status s where s.job = p.job) s on true
 order by p.rank, p.at desc nulls last, p.job`;

const progressNote = (progress: (m: string) => void, read: string, ms: number, base: string) => progress(`  ${read}: ${ms.toFixed(0)} ms (baseline ${base})`);

export async function measureReads(url: string, settings: ReadsSettings, progress: (message: string) => void): Promise<ReadsResults> {
  const loadStart = os.loadavg();
  const pool = new pg.Pool({ connectionString: url, max: 4 });
  try {
    progress(`reads: seeding ${settings.jobs.toLocaleString('en-US')} jobs, ${(settings.jobs * settings.runsPerJob).toLocaleString('en-US')} runs`);
    const seedStart = performance.now();
    for (const statement of seedStatements(settings)) await pool.query(statement);
    const seedSeconds = round((performance.now() - seedStart) / 1000, 1);
    const one = `tenant-${String(Math.ceil(settings.jobs / 2)).padStart(6, '0')}`;
    const reads: ReadTiming[] = [];
    const capMs = settings.baselineCapSeconds * 1000;

    const time = async (read: string, run: () => Promise<number>, baseline: string, baselineSql: string | null) => {
      let rows = 0;
      const samples: number[] = [];
      for (let i = 0; i < settings.repeats; i++) {
        const start = performance.now();
        rows = await run();
        samples.push(performance.now() - start);
      }
      samples.sort((a, b) => a - b);
      const ms = samples[Math.floor(samples.length / 2)]!;
      let baselineMs: number | null = null;
      let capped = false;
      if (baselineSql) {
        const client = await pool.connect();
        try {
          await client.query(`set statement_timeout = ${Math.round(capMs)}`);
          const start = performance.now();
          try {
            await client.query(baselineSql);
            baselineMs = performance.now() - start;
          } catch (error) {
            if ((error as { code?: string }).code !== '57014') throw error;
            baselineMs = capMs;
            capped = true;
          }
          await client.query('reset statement_timeout');
        } finally {
          client.release();
        }
      }
      reads.push({ read, ms: round(ms, 1), baselineMs: baselineMs === null ? null : round(baselineMs, 1), baselineCapped: capped, baseline, rows });
      progressNote(progress, read, ms, baselineMs === null ? 'none' : `${capped ? '> ' : ''}${baselineMs.toFixed(0)} ms`);
    };

    const v5 = `select * from ${JOB_STATUS_V5}`;
    await time('leasehold status (summary + 50 jobs)', async () => (await fleetStatus(pool, { limit: 50 })).jobs.length, 'schema-17 statement: ranks every flagged job', STATUS_V17);
    await time('job_status, one job', async () => (await jobStatus(pool, one)).length, 'schema-5 job_status where job = …', `${v5} where job = '${one}'`);
    await time(
      'job_status order by job limit 50',
      async () => (await pool.query('select * from leasehold.job_status order by job limit 50')).rowCount ?? 0,
      'schema-5 job_status order by job limit 50',
      `${v5} order by job limit 50`,
    );
    await time('leasehold runs <job> (run_history, one job, newest 50)', async () => (await jobHistory(pool, { job: one, limit: 50 })).length, 'plain select of the runs rows', `select * from leasehold.runs where job = '${one}' order by started_at desc limit 50`);
    await time(
      'run_history, last hour, newest 50 across all jobs',
      async () => (await pool.query("select * from leasehold.run_history where at > now() - interval '1 hour' order by at desc, slot desc limit 50")).rowCount ?? 0,
      'run_history order by at desc limit 50',
      'select * from leasehold.run_history order by at desc, slot desc limit 50',
    );
    await time('dashboard /api/jobs (first page)', async () => (await jobPage(pool, { offset: 0, limit: 50, filter: 'all' })).jobs.length, 'schema-5 job_status, all rows', v5);
    await time('dashboard /api/jobs?filter=failing', async () => (await jobPage(pool, { offset: 0, limit: 50, filter: 'failing' })).jobs.length, 'none', null);
    await time('dashboard /api/summary', async () => ((await fleetSummary(pool)).jobs > 0 ? 1 : 0), 'schema-13 summary: p95 per job over 24 h of runs', SUMMARY_V13);
    await time('dashboard /api/jobs?filter=creeping', async () => (await jobPage(pool, { offset: 0, limit: 50, filter: 'creeping' })).jobs.length, 'none', null);
    await time(
      "prune_history('30 days'), nothing prunable",
      async () => Number((await pool.query<{ n: string }>(`select leasehold.prune_history('30 days')::text as n`)).rows[0]?.n ?? 0),
      'schema-5 scan: count of the same rows',
      `select count(*) from leasehold.runs where outcome <> 'running' and finished_at < now() - interval '30 days'`,
    );
    const idle = await measureIdle(url, settings.idleJobs, progress);
    return { settings, seedSeconds, reads, idle, loadAverage: { start: loadStart.map((n) => round(n, 2)), end: os.loadavg().map((n) => round(n, 2)) } };
  } finally {
    await pool.end();
  }
}

const IDLE_SCRIPT = fileURLToPath(new URL('../fixtures/idle-rss.mjs', import.meta.url));
const DIST = fileURLToPath(new URL('../../dist/index.js', import.meta.url));

/** RSS of plain `node` processes on the compiled package: bare, 1 job, `jobs` jobs. */
async function measureIdle(url: string, jobs: number, progress: (message: string) => void): Promise<IdleRss[] | { skipped: string }> {
  if (!existsSync(DIST)) return { skipped: 'dist/ is not built (npm run build)' };
  const out: IdleRss[] = [];
  for (const [what, count] of [['bare node', 0], ['worker, 1 job', 1], [`worker, ${jobs.toLocaleString('en-US')} jobs`, jobs]] as const) {
    const rss = await runIdle(url, count);
    out.push({ what, rssMiB: rss });
    progress(`  idle RSS, ${what}: ${rss} MiB`);
  }
  return out;
}

function runIdle(url: string, jobs: number): Promise<number> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [IDLE_SCRIPT], { env: { ...process.env, DATABASE_URL: url, JOBS: String(jobs) }, stdio: ['ignore', 'pipe', 'inherit'] });
    let text = '';
    child.stdout.on('data', (chunk: Buffer) => (text += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code) => {
      const match = /rss=(\d+(?:\.\d+)?)/.exec(text);
      if (code === 0 && match) resolve(Number(match[1]));
      else reject(new Error(`idle RSS probe exited with ${code}: ${text}`));
    });
  });
}

export function readsLines(results: ReadsResults, render: (table: Table) => string): string[] {
  const { jobs, runsPerJob, baselineCapSeconds } = results.settings;
  const ms = (n: number) => (n >= 1000 ? `${(n / 1000).toFixed(2)} s` : `${n.toFixed(1)} ms`);
  const table: Table = {
    align: ['l', 'r', 'r', 'r', 'l'],
    headers: ['read', 'time', 'baseline', 'vs baseline', 'baseline is'],
    rows: results.reads.map((r) => [
      r.read,
      ms(r.ms),
      r.baselineMs === null ? '-' : `${r.baselineCapped ? '> ' : ''}${ms(r.baselineMs)}`,
      r.baselineMs === null || r.baselineMs === 0 ? '-' : `${r.baselineCapped ? '< ' : ''}${(r.ms / r.baselineMs).toFixed(3)}x`,
      r.baseline,
    ]),
  };
  const idle = Array.isArray(results.idle)
    ? render({ align: ['l', 'r'], headers: ['idle process (compiled package, plain node)', 'RSS MiB'], rows: results.idle.map((i) => [i.what, i.rssMiB.toFixed(1)]) })
    : `idle RSS: skipped (${results.idle.skipped})`;
  return [
    `Reads: ${jobs.toLocaleString('en-US')} jobs, ${(jobs * runsPerJob).toLocaleString('en-US')} runs, ${(jobs * 3).toLocaleString('en-US')} skips (seeded in ${results.seedSeconds} s); median of ${results.settings.repeats}, baselines once, cut off at ${baselineCapSeconds} s; load ${results.loadAverage.start.join(' ')} -> ${results.loadAverage.end.join(' ')}`,
    render(table),
    '',
    idle,
    '',
  ];
}

export function readsTargets(results: ReadsResults): Array<{ what: string; target: string; measured: string; met: boolean }> {
  const checks = results.reads.map((r) => ({ what: `${r.read} at ${results.settings.jobs} jobs`, target: '< 1 s', measured: `${Math.round(r.ms)} ms`, met: r.ms < 1000 }));
  const big = Array.isArray(results.idle) ? results.idle[results.idle.length - 1] : undefined;
  if (big) checks.push({ what: `idle RSS, ${big.what}`, target: '< 100 MiB', measured: `${big.rssMiB} MiB`, met: big.rssMiB < 100 });
  return checks;
}
