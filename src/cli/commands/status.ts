// leasehold status: every job with schedule, holder, last run, durations against the interval,
// skips; a warning line for each job creeping toward overlap.
import type { Command } from 'commander';
import { checkReplication } from '../../lease/replication.js';
import { jobStatus, type JobStatus } from '../../observe/status.js';
import { databaseUrl, openPool, report, type Io } from '../context.js';
import { percent, seconds, table, time } from '../format.js';
import { EXIT } from '../exit-codes.js';

export function registerStatus(program: Command, io: Io): void {
  program
    .command('status')
    .description('show every job: schedule, holder and lease age, last run, p50/p95 duration vs interval, skips in 24 h')
    .option('--job <name>', 'only this job')
    .option('--json', 'print JSON')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (options: { job?: string; json?: boolean; databaseUrl?: string }) => {
      try {
        const pool = await openPool(databaseUrl(options.databaseUrl));
        try {
          const jobs = await jobStatus(pool, options.job);
          const replication = options.json ? null : await checkReplication(pool).catch(() => null);
          const text = options.json ? JSON.stringify(jobs, null, 2) : render(jobs);
          io.out(replication?.warning ? `${text}\nwarning: ${replication.warning}` : text);
          io.exit(EXIT.ok);
        } finally {
          await pool.end();
        }
      } catch (error) {
        report(io, error, options.json === true);
      }
    });
}

export function render(jobs: JobStatus[]): string {
  if (jobs.length === 0) return 'No jobs registered yet: start a worker (leasehold worker ./jobs.js) or guard one with leasehold exec --interval.';
  const lines = [
    table(
      ['JOB', 'SCHEDULE', 'STATE', 'HOLDER', 'LEASE AGE', 'LAST RUN', 'OUTCOME', 'P50', 'P95', 'P95/INTERVAL', 'SKIPS 24H', 'MISSED 24H'],
      jobs.map((job) => [
        job.job,
        job.timezone ? `${job.schedule} (${job.timezone})` : job.schedule,
        job.state,
        job.holder,
        seconds(job.leaseAgeSeconds),
        time(job.lastRun?.startedAt),
        job.lastRun?.outcome,
        seconds(job.p50Seconds),
        seconds(job.p95Seconds),
        percent(job.p95IntervalRatio),
        job.skips24h,
        job.missed24h,
      ]),
    ),
  ];
  for (const job of jobs) if (job.warning) lines.push(`warning: ${job.warning}`);
  return lines.join('\n');
}
