// leasehold status: every job with schedule, holder, last run, durations against the interval,
// skips; a warning line for each job creeping toward (or past) overlap; and every other lease
// (taken with acquire(), psql, Python, a shell script) with its holder, fence and expiry.
import type { Command } from 'commander';
import { jobStatus, unscheduledLeases, type JobStatus, type UnscheduledLease } from '../../observe/status.js';
import { CliError, databaseUrl, openDatabase, report, type Io } from '../context.js';
import { inert, percent, seconds, table, time } from '../format.js';
import { EXIT } from '../exit-codes.js';

export function registerStatus(program: Command, io: Io): void {
  program
    .command('status')
    .description('show every job (schedule, holder and lease age, last run, p50/p95 duration vs interval, skips in 24 h) and every other lease')
    .option('--job <name>', 'only this job or lease')
    .option('--json', 'print JSON: { jobs: [...], leases: [...] }')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (options: { job?: string; json?: boolean; databaseUrl?: string }) => {
      try {
        const db = await openDatabase(databaseUrl(options.databaseUrl));
        const read = { timeout: db.timeoutMs };
        try {
          const [jobs, leases] = await Promise.all([jobStatus(db.pool, options.job, read), unscheduledLeases(db.pool, options.job, read)]);
          if (options.job !== undefined && jobs.length === 0 && leases.length === 0) {
            throw new CliError(`no job or lease named "${inert(options.job)}": \`leasehold status\` lists them all`, EXIT.error);
          }
          const replication = options.json ? null : db.replication;
          const text = options.json ? JSON.stringify({ jobs, leases }, null, 2) : render(jobs, leases);
          io.out(replication?.warning ? `${text}\nwarning: ${inert(replication.warning)}` : text);
          io.exit(EXIT.ok);
        } finally {
          await db.pool.end();
        }
      } catch (error) {
        report(io, error, options.json === true);
      }
    });
}

export function render(jobs: JobStatus[], leases: UnscheduledLease[] = []): string {
  if (jobs.length === 0 && leases.length === 0) {
    return 'No jobs or leases yet: start a worker (leasehold worker ./jobs.js), guard a command with leasehold exec, or take a lease with run().';
  }
  const lines: string[] = [];
  if (jobs.length > 0) {
    lines.push(
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
    );
    for (const job of jobs) if (job.warning) lines.push(`warning: ${inert(job.warning)}`);
  }
  if (leases.length > 0) {
    if (lines.length > 0) lines.push('');
    lines.push('Leases without a job definition (no history; run() and leasehold exec record one):');
    lines.push(
      table(
        ['LEASE', 'STATE', 'HOLDER', 'FENCE', 'SINCE', 'EXPIRES'],
        leases.map((lease) => [
          lease.name,
          lease.state,
          lease.state === 'free' && lease.holder ? `(last: ${lease.holder})` : lease.holder,
          lease.fence,
          time(lease.since),
          lease.state === 'free' ? `released ${time(lease.releasedAt)}` : time(lease.expiresAt),
        ]),
      ),
    );
  }
  return lines.join('\n');
}
