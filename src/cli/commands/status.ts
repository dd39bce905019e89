// leasehold status: a summary line with the fleet's counts, then at most --limit jobs (those
// that need attention first: expired lease, failed, lost or timed-out runs, skipped or missed slots in
// 24 h) with schedule, holder, last run, durations against the interval, lateness, skips; a warning line
// for each listed job creeping toward (or past) overlap; and other leases (taken with
// acquire(), psql, Python, a shell script) with holder, fence and expiry. Bounded, so it answers
// quickly however many jobs there are; --all lists everything.
import type { Command } from 'commander';
import { fleetStatus, type FleetCounts, type FleetStatus } from '../../monitor/fleet-status.js';
import { jobStatus, unscheduledLeases, type JobStatus, type UnscheduledLease } from '../../monitor/status.js';
import { CliError, databaseUrl, integerFlag, openDatabase, report, type Io } from '../context.js';
import { STATUS_DEFAULTS, shown } from '../defaults.js';
import { inert, percent, seconds, time } from '../format.js';
import { outputColumns, wrapLines } from '../layout.js';
import { table, type Column } from '../table.js';
import { EXIT } from '../exit-codes.js';

export function registerStatus(program: Command, io: Io): void {
  program
    .command('status')
    .description(
      'show the fleet (counts of running, expired, failing, skipping jobs), then the jobs that need attention first (schedule, holder and lease age, last run, p50/p95 duration vs interval, skips in 24 h) and other leases',
    )
    .option('--job <name>', 'only this job or lease')
    .option('--limit <n>', `how many jobs and leases to list (${STATUS_DEFAULTS.limit.min} to ${STATUS_DEFAULTS.limit.max})`, shown(STATUS_DEFAULTS.limit))
    .option('--all', 'list every job and lease (slow with many thousands of jobs)')
    .option('--json', 'print JSON: { summary: {...}, jobs: [...], leases: [...], more: { jobs, leases } }')
    .option('--wide', 'do not fit the output to the terminal (or 100 columns): every column, values in full')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (options: { job?: string; limit: string; all?: boolean; json?: boolean; wide?: boolean; databaseUrl?: string }) => {
      try {
        const limit = options.all ? STATUS_DEFAULTS.all : integerFlag(options.limit, STATUS_DEFAULTS.limit, '--limit');
        const db = await openDatabase(databaseUrl(options.databaseUrl));
        const read = { timeout: db.timeoutMs };
        const width = outputColumns(options.wide);
        try {
          let text: string;
          if (options.job !== undefined) {
            const [jobs, leases] = await Promise.all([jobStatus(db.pool, options.job, read), unscheduledLeases(db.pool, options.job, read)]);
            if (jobs.length === 0 && leases.length === 0) {
              throw new CliError(`no job or lease named "${inert(options.job)}": \`leasehold status\` lists them all`, EXIT.error);
            }
            text = options.json ? JSON.stringify({ jobs, leases }, null, 2) : render(jobs, leases, undefined, width);
          } else {
            const fleet = await fleetStatus(db.pool, { limit, ...read });
            text = options.json ? JSON.stringify(toJson(fleet), null, 2) : renderFleet(fleet, width);
          }
          const replication = options.json ? null : db.replication;
          const warnings = [replication?.warning, replication?.epochWarning].filter((w): w is string => Boolean(w));
          io.out([text, ...warnings.map((w) => wrapLines(`warning: ${inert(w)}`, width))].join('\n'));
          io.exit(EXIT.ok);
        } finally {
          await db.pool.end();
        }
      } catch (error) {
        report(io, error, options.json === true);
      }
    });
}

function toJson(fleet: FleetStatus): object {
  return { summary: fleet.counts, jobs: fleet.jobs, leases: fleet.leases, more: { jobs: fleet.moreJobs, leases: fleet.moreLeases } };
}

/** "100000 jobs: 3 running, 1 expired lease, ...": the whole fleet in one line. */
export function summaryLine(c: FleetCounts): string {
  const jobs = [
    `${c.running} running`,
    `${c.expired} with an expired lease`,
    `${c.failing} failing (failed, lost or timed-out run in 24 h)`,
    `${c.skipping} skipping (24 h)`,
    `${c.missing} with missed slots (24 h)`,
  ];
  return `${c.jobs} ${c.jobs === 1 ? 'job' : 'jobs'}: ${jobs.join(', ')}; ${c.leases} other ${c.leases === 1 ? 'lease' : 'leases'} (${c.leasesHeld} held)`;
}

/** The summary line, the listed jobs and leases, and how many were left out, fitted to `width` columns. */
export function renderFleet(fleet: FleetStatus, width = Infinity): string {
  if (fleet.counts.jobs === 0 && fleet.counts.leases === 0) return render([], [], undefined, width);
  const reasons = new Map<JobStatus, string | null>(fleet.jobs.map((job) => [job, job.attention]));
  const lines = [wrapLines(summaryLine(fleet.counts), width), render(fleet.jobs, fleet.leases, (job) => reasons.get(job) ?? '-', width)];
  const more = [fleet.moreJobs > 0 ? `${fleet.moreJobs} more ${fleet.moreJobs === 1 ? 'job' : 'jobs'}` : '', fleet.moreLeases > 0 ? `${fleet.moreLeases} more ${fleet.moreLeases === 1 ? 'lease' : 'leases'}` : '']
    .filter(Boolean)
    .join(' and ');
  if (more) lines.push(wrapLines(`... ${more}: --limit N shows more, --all everything, --job NAME one`, width));
  return lines.join('\n');
}

/** A job or lease name: cut last, and only when very long (it is what `runs` and `--job` take). */
function nameColumn(header: string): Column {
  return { header, shrink: 48, rank: 10 };
}

/**
 * The jobs and leases as tables, fitted to `width` columns: names in full, schedules, holders and
 * reasons cut with an ellipsis, and the less telling columns (P50, lease age, P95, last run time)
 * left out when that is not enough.
 */
export function render(jobs: JobStatus[], leases: UnscheduledLease[] = [], attention?: (job: JobStatus) => string | null, width = Infinity): string {
  if (jobs.length === 0 && leases.length === 0) {
    return wrapLines('No jobs or leases yet: start a worker (leasehold worker ./jobs.js), guard a command with leasehold exec, or take a lease with run().', width);
  }
  const lines: string[] = [];
  if (jobs.length > 0) {
    lines.push(
      table(
        [
          nameColumn('JOB'),
          { header: 'SCHEDULE', shrink: 12, rank: 2 },
          'STATE',
          { header: 'HOLDER', shrink: 10, rank: 3 },
          { header: 'LEASE AGE', drop: true, rank: 1 },
          { header: 'LAST RUN', drop: true, rank: 4 },
          'OUTCOME',
          { header: 'P50', drop: true, rank: 0 },
          { header: 'P95', drop: true, rank: 2 },
          { header: 'P95/INTERVAL', short: 'P95/IVL' },
          // how long after their slots the runs of 24 h started (p95; the jitter offset counts)
          { header: 'LATE P95', short: 'LATE' },
          { header: 'SKIPS 24H', short: 'SKIPS' },
          { header: 'MISSED 24H', short: 'MISSED' },
          ...(attention ? [{ header: 'ATTENTION', shrink: 9, rank: 1 }] : []),
        ],
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
          seconds(job.lateP95Seconds),
          job.skips24h,
          job.missed24h,
          ...(attention ? [attention(job)] : []),
        ]),
        width,
      ),
    );
    for (const job of jobs) if (job.warning) lines.push(wrapLines(`warning: ${inert(job.warning)}`, width));
    for (const job of jobs) {
      if (job.paused) lines.push(wrapLines(inert(`paused: ${job.job} by ${job.paused.by ?? 'unknown'} since ${job.paused.at.toISOString()}${job.paused.reason ? `: ${job.paused.reason}` : ''}`), width));
    }
  }
  if (leases.length > 0) {
    if (lines.length > 0) lines.push('');
    lines.push('Leases without a job definition (no history; run() and leasehold exec record one):');
    lines.push(
      table(
        [nameColumn('LEASE'), 'STATE', { header: 'HOLDER', shrink: 10 }, 'FENCE', { header: 'SINCE', drop: true }, 'EXPIRES'],
        leases.map((lease) => [
          lease.name,
          lease.state,
          lease.state === 'free' && lease.holder ? `(last: ${lease.holder})` : lease.holder,
          lease.fence,
          time(lease.since),
          lease.state === 'free' ? `released ${time(lease.releasedAt)}` : time(lease.expiresAt),
        ]),
        width,
      ),
    );
  }
  return lines.join('\n');
}
