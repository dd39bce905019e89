// leasehold runs NAME: a job's runs, skips and missed slots, newest first.
import type { Command } from 'commander';
import { jobHistory } from '../../observe/status.js';
import { CliError, databaseUrl, openPool, report, type Io } from '../context.js';
import { seconds, table, time } from '../format.js';
import { EXIT } from '../exit-codes.js';

export function registerRuns(program: Command, io: Io): void {
  program
    .command('runs')
    .description("list a job's runs, skips and missed slots, newest first")
    .argument('<name>', 'job name')
    .option('--limit <n>', 'how many entries', '20')
    .option('--json', 'print JSON')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (name: string, options: { limit: string; json?: boolean; databaseUrl?: string }) => {
      try {
        const limit = Number(options.limit);
        if (!Number.isInteger(limit) || limit < 1 || limit > 10_000) throw new CliError(`--limit must be an integer from 1 to 10000 (got ${options.limit})`, EXIT.usage);
        const pool = await openPool(databaseUrl(options.databaseUrl));
        try {
          const entries = await jobHistory(pool, { job: name, limit });
          if (options.json) io.out(JSON.stringify(entries, null, 2));
          else if (entries.length === 0) io.out(`No runs, skips or missed slots recorded for "${name}".`);
          else {
            io.out(
              table(
                ['SLOT', 'KIND', 'OUTCOME', 'FENCE', 'HOLDER', 'STARTED', 'DURATION', 'DETAIL'],
                entries.map((e) => [time(e.slot), e.kind, e.outcome, e.fence, e.holder, time(e.at), seconds(e.durationSeconds), e.detail]),
              ),
            );
          }
          io.exit(EXIT.ok);
        } finally {
          await pool.end();
        }
      } catch (error) {
        report(io, error, options.json === true);
      }
    });
}
