// leasehold schedule define|remove|list: schedules defined as data, from a shell (the same
// validation and SQL functions as leasehold.control; client level for define and remove).
import type { Command } from 'commander';
import { defineSchedule, listSchedules, removeSchedule, type ScheduleOptions } from '../../control/schedules.js';
import type { OverlapPolicy } from '../../job/job.js';
import { CliError, databaseUrl, integerFlag, openDatabase, report, type Io } from '../context.js';
import { EXIT } from '../exit-codes.js';
import { inert } from '../format.js';
import { outputColumns } from '../layout.js';
import { table } from '../table.js';

type DefineFlags = {
  handler: string;
  by: string;
  cron?: string;
  every?: string;
  tz?: string;
  payload?: string;
  ttl?: string;
  overlap?: string;
  catchUp?: string;
  json?: boolean;
  databaseUrl?: string;
};

function catchUpFlag(text: string | undefined): ScheduleOptions['catchUp'] {
  if (text === undefined) return undefined;
  if (text === 'latest' || text === 'none') return text;
  const all = /^all:(\d+)$/.exec(text);
  if (all) return { all: integerFlag(all[1] as string, { min: 1, max: 1000 }, '--catch-up all:N') };
  throw new CliError(`--catch-up must be latest, none or all:N (got ${text})`, EXIT.usage);
}

export function registerScheduleData(schedule: Command, io: Io): void {
  schedule
    .command('define')
    .description('create or change a job defined as data, run by the workers with its handler (client level)')
    .argument('<name>', 'job name')
    .requiredOption('--handler <name>', 'handler name the workers registered (startWorker({ handlers }))')
    .requiredOption('--by <name>', 'who defines it (recorded in leasehold.actions)')
    .option('--cron <pattern>', "cron pattern, e.g. '*/5 * * * *'")
    .option('--every <duration>', 'an interval instead of cron, e.g. 90s')
    .option('--tz <zone>', 'IANA timezone of the cron pattern: UTC or Area/Location, e.g. Europe/Berlin')
    .option('--payload <json>', 'JSON payload the handler gets as ctx.payload (at most 64 KiB, 32 levels deep)')
    .option('--ttl <duration>', 'lease TTL (default 30s)')
    .option('--overlap <policy>', 'skip, buffer-one, buffer-all, replace or allow (default skip)')
    .option('--catch-up <policy>', 'latest, none or all:N (default latest)')
    .option('--json', 'print JSON')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (name: string, options: DefineFlags) => {
      try {
        let payload: unknown;
        if (options.payload !== undefined) {
          try {
            payload = JSON.parse(options.payload) as unknown;
          } catch {
            throw new CliError('--payload must be JSON, e.g. \'{"tenant": 42}\'', EXIT.usage);
          }
        }
        const catchUp = catchUpFlag(options.catchUp);
        const definition: ScheduleOptions = {
          name,
          handler: options.handler,
          by: options.by,
          ...(options.cron !== undefined ? { cron: options.cron } : {}),
          ...(options.every !== undefined ? { every: options.every } : {}),
          ...(options.tz !== undefined ? { timezone: options.tz } : {}),
          ...(payload !== undefined ? { payload } : {}),
          ...(options.ttl !== undefined ? { ttl: options.ttl } : {}),
          ...(options.overlap !== undefined ? { overlap: options.overlap as OverlapPolicy } : {}),
          ...(catchUp !== undefined ? { catchUp } : {}),
        };
        const db = await openDatabase(databaseUrl(options.databaseUrl));
        try {
          const result = await defineSchedule(db, definition);
          if (options.json) io.out(JSON.stringify(result));
          else {
            io.out(inert(`${result.created ? 'defined' : result.changed ? 'changed' : 'unchanged'} "${name}" (revision ${result.revision})`));
            if (result.liveWorkers === 0) {
              io.err(
                inert(
                  `warning: no live worker has handler "${options.handler}": the schedule does not run until a worker with it starts ` +
                    '(startWorker({ handlers }), or leasehold worker MODULE exporting handlers); its slots are recorded missed meanwhile',
                ),
              );
            }
          }
          io.exit(EXIT.ok);
        } finally {
          await db.pool.end();
        }
      } catch (error) {
        report(io, error, options.json === true);
      }
    });

  schedule
    .command('remove')
    .description('remove a job defined as data; a run in progress finishes under its lease (client level)')
    .argument('<name>', 'job name')
    .requiredOption('--by <name>', 'who removes it (recorded in leasehold.actions)')
    .option('--json', 'print JSON')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (name: string, options: { by: string; json?: boolean; databaseUrl?: string }) => {
      try {
        const db = await openDatabase(databaseUrl(options.databaseUrl));
        try {
          const removed = await removeSchedule(db, name, { by: options.by });
          if (options.json) io.out(JSON.stringify({ name, removed }));
          else io.out(inert(removed ? `removed "${name}"` : `no schedule named "${name}"`));
          io.exit(removed ? EXIT.ok : EXIT.error);
        } finally {
          await db.pool.end();
        }
      } catch (error) {
        report(io, error, options.json === true);
      }
    });

  schedule
    .command('list')
    .description('list the jobs defined as data (--all: code jobs too), with pause state (reader level)')
    .option('--all', 'include jobs defined in code')
    .option('--json', 'print JSON')
    .option('--wide', 'do not fit the table to the terminal (or 100 columns): every value in full')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (options: { all?: boolean; json?: boolean; wide?: boolean; databaseUrl?: string }) => {
      try {
        const db = await openDatabase(databaseUrl(options.databaseUrl));
        try {
          const schedules = await listSchedules(db, options.all ? {} : { source: 'data' });
          if (options.json) io.out(JSON.stringify(schedules));
          else
            // table() makes each cell inert; its line breaks are the table's own
            io.out(
              table(
                // who paused it and why outlasts the timezone of the schedule when cut
                [{ header: 'NAME', shrink: 48, rank: 10 }, 'SOURCE', { header: 'HANDLER', shrink: 10, rank: 1 }, { header: 'SCHEDULE', shrink: 12, rank: 0 }, { header: 'PAUSED', shrink: 24, rank: 2 }],
                schedules.map((s) => [
                  s.name,
                  s.source,
                  s.handler ?? '',
                  `${s.schedule}${s.timezone ? ` (${s.timezone})` : ''}`,
                  s.paused ? `by ${s.paused.by ?? '?'} since ${s.paused.at.toISOString()}${s.paused.reason ? `: ${s.paused.reason}` : ''}` : '',
                ]),
                outputColumns(options.wide),
              ),
            );
          io.exit(EXIT.ok);
        } finally {
          await db.pool.end();
        }
      } catch (error) {
        report(io, error, options.json === true);
      }
    });
}
