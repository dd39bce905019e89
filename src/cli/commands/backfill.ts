// leasehold backfill JOB --from ISO --to ISO --by NAME: the job's slots in (from, to] run once
// more, one at a time in slot order (src/control/manual-runs.ts).
import type { Command } from 'commander';
import { backfill } from '../../control/manual-runs.js';
import { BACKFILL_DEFAULTS } from '../../lease/defaults.js';
import { databaseUrl, integerFlag, openDatabase, report, type Io } from '../context.js';
import { shown } from '../defaults.js';
import { EXIT } from '../exit-codes.js';
import { inert, time } from '../format.js';

export function registerBackfill(program: Command, io: Io): void {
  program
    .command('backfill')
    .description("run a job's scheduled slots of a past range (from, to], one at a time, each at most once")
    .argument('<job>', 'job name')
    .requiredOption('--from <time>', 'start of the range, exclusive (ISO 8601)')
    .requiredOption('--to <time>', 'end of the range, inclusive (ISO 8601, not in the future)')
    .requiredOption('--by <name>', 'who asks (recorded with each run and in leasehold.actions)')
    .option('--max <n>', `most slots the range may hold (${BACKFILL_DEFAULTS.max.min} to ${BACKFILL_DEFAULTS.max.max})`, shown(BACKFILL_DEFAULTS.max))
    .option('--dry-run', 'list the slots, request nothing')
    .option('--json', 'print JSON')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (job: string, options: { from: string; to: string; by: string; max: string; dryRun?: boolean; json?: boolean; databaseUrl?: string }) => {
      try {
        const max = integerFlag(options.max, BACKFILL_DEFAULTS.max, '--max');
        const db = await openDatabase(databaseUrl(options.databaseUrl));
        try {
          const result = await backfill(db, job, { from: options.from, to: options.to, by: options.by, max, dryRun: options.dryRun === true });
          if (options.json) io.out(JSON.stringify({ ...result, dryRun: options.dryRun === true }));
          else {
            const requested = new Set(result.requested.map((r) => r.slot.getTime()));
            for (const slot of result.slots) {
              io.out(`${time(slot)}${options.dryRun ? '' : requested.has(slot.getTime()) ? '  requested' : '  already requested'}`);
            }
            io.out(
              inert(
                options.dryRun
                  ? `${result.slots.length} slot(s) of "${job}" in the range; nothing requested (--dry-run)`
                  : `requested ${result.requested.length} slot(s) of "${job}"` +
                      (result.alreadyRequested > 0 ? `; ${result.alreadyRequested} already requested by an earlier backfill` : '') +
                      ` (\`leasehold runs ${job}\` shows them as they run)`,
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
