// leasehold runs NAME: a job's runs, skips and missed slots, newest first.
import type { Command } from 'commander';
import type { DbHandle } from '../../db/handle.js';
import { jobHistory, type HistoryEntry } from '../../monitor/status.js';
import { CliError, databaseUrl, integerFlag, openDatabase, report, type Io } from '../context.js';
import { RUNS_DEFAULTS, shown } from '../defaults.js';
import { inert, seconds, time } from '../format.js';
import { outputColumns, wrapLines } from '../layout.js';
import { table } from '../table.js';
import { EXIT } from '../exit-codes.js';

export function registerRuns(program: Command, io: Io): void {
  program
    .command('runs')
    .description("list a job's runs, skips and missed slots, newest first")
    .argument('<name>', 'job name')
    .option('--limit <n>', `how many entries (${RUNS_DEFAULTS.limit.min} to ${RUNS_DEFAULTS.limit.max})`, shown(RUNS_DEFAULTS.limit))
    .option('--json', 'print JSON')
    .option('--wide', 'do not fit the output to the terminal (or 100 columns): every column, holders and details in full')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (name: string, options: { limit: string; json?: boolean; wide?: boolean; databaseUrl?: string }) => {
      try {
        const limit = integerFlag(options.limit, RUNS_DEFAULTS.limit, '--limit');
        const width = outputColumns(options.wide);
        const db = await openDatabase(databaseUrl(options.databaseUrl));
        try {
          const [entries, [lease]] = await Promise.all([jobHistory(db.pool, { job: name, limit, timeout: db.timeoutMs }), leaseOf(db, name)]);
          if (!lease && entries.length === 0) throw new CliError(`no job or lease named "${inert(name)}": \`leasehold status\` lists them all`, EXIT.error);
          if (options.json) io.out(JSON.stringify(entries, null, 2));
          else {
            // the lease itself, so a lease taken without history (psql, Python, acquire()) shows too
            if (lease) io.out(wrapLines(describeLease(lease), width));
            if (entries.length === 0) io.out(wrapLines(`No runs, skips or missed slots recorded for "${inert(name)}": its holders take the lease without recording history.`, width));
          }
          if (!options.json && entries.length > 0) {
            io.out(
              table(
                // holders cut first, then error texts; the start is left out first (it is usually the slot's)
                ['SLOT', 'KIND', 'OUTCOME', 'FENCE', { header: 'HOLDER', shrink: 10, rank: 1 }, { header: 'STARTED', drop: true }, 'LATE', 'DURATION', { header: 'DETAIL', shrink: 12, rank: 2 }],
                entries.map((e) => [time(e.slot), kindOf(e), e.outcome, e.fence, e.holder, time(e.at), late(e), seconds(e.durationSeconds), byWhom(e)]),
                width,
              ),
            );
          }
          io.exit(EXIT.ok);
        } finally {
          await db.pool.end();
        }
      } catch (error) {
        report(io, error, options.json === true);
      }
    });
}

/** A scheduled run's start after its slot (runs.started_at - slot); none for skips, missed slots and runs asked for. */
function late(entry: HistoryEntry): string | null {
  if (entry.kind !== 'run' || entry.trigger !== 'schedule' || !entry.at) return null;
  return seconds(Math.max(0, entry.at.getTime() - entry.slot.getTime()) / 1000);
}

/** run, skip or missed; /manual or /backfill for what an operator asked for. */
function kindOf(entry: HistoryEntry): string {
  return entry.trigger === 'schedule' ? entry.kind : `${entry.kind}/${entry.trigger}`;
}

function byWhom(entry: HistoryEntry): string | null {
  if (!entry.requestedBy) return entry.detail;
  return entry.detail ? `${entry.detail} (asked by ${entry.requestedBy})` : `asked by ${entry.requestedBy}`;
}

interface LeaseRow {
  state: 'free' | 'held' | 'expired';
  holder: string | null;
  fence: string;
  acquired_at: Date | null;
  expires_at: Date | null;
  released_at: Date | null;
}

async function leaseOf(db: DbHandle, name: string): Promise<LeaseRow[]> {
  const { rows } = await db.query<LeaseRow>(
    'select state, holder, fence, acquired_at, expires_at, released_at from leasehold.lease_status where name = $1',
    [name],
  );
  return rows;
}

function describeLease(lease: LeaseRow): string {
  const holder = inert(lease.holder ?? 'nobody');
  if (lease.state === 'held') return `lease: held by ${holder} (fence ${lease.fence}) since ${time(lease.acquired_at)}, expires ${time(lease.expires_at)}`;
  if (lease.state === 'expired') return `lease: expired (fence ${lease.fence}); last held by ${holder} since ${time(lease.acquired_at)}`;
  return lease.holder
    ? `lease: free (fence ${lease.fence}); last held by ${holder}, released ${time(lease.released_at)}`
    : `lease: free (fence ${lease.fence})`;
}
