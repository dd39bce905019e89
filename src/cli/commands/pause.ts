// leasehold pause JOB --by NAME [--reason TEXT] [--stop-running] and leasehold resume JOB --by
// NAME: the operator's fleet-wide switch (leasehold.pause_job / resume_job, operator level).
import type { Command } from 'commander';
import { pauseJob, resumeJob } from '../../control/pause.js';
import { databaseUrl, openDatabase, report, type Io } from '../context.js';
import { EXIT } from '../exit-codes.js';
import { inert } from '../format.js';

type Flags = { by: string; reason?: string; stopRunning?: boolean; json?: boolean; databaseUrl?: string };

export function registerPause(program: Command, io: Io): void {
  program
    .command('pause')
    .description('pause a job on every worker: the database refuses its slots until `leasehold resume` (operator level)')
    .argument('<job>', 'job name')
    .requiredOption('--by <name>', 'who pauses (recorded in leasehold.actions, shown by status)')
    .option('--reason <text>', 'why (shown by status and the dashboard)')
    .option('--stop-running', "also end the running run's lease: its signal fires and its fenced writes are refused")
    .option('--json', 'print JSON')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (job: string, options: Flags) => {
      try {
        const db = await openDatabase(databaseUrl(options.databaseUrl));
        try {
          const result = await pauseJob(db, job, {
            by: options.by,
            ...(options.reason !== undefined ? { reason: options.reason } : {}),
            stopRunning: options.stopRunning === true,
          });
          if (options.json) io.out(JSON.stringify(result));
          else {
            const stopped = result.stopped ? `; stopped the run of ${result.stopped.holder} (fence ${result.stopped.fence})` : '';
            io.out(inert(`${result.alreadyPaused ? 'already paused' : 'paused'} "${job}"${stopped}`));
          }
          io.exit(EXIT.ok);
        } finally {
          await db.pool.end();
        }
      } catch (error) {
        report(io, error, options.json === true);
      }
    });

  program
    .command('resume')
    .description("resume a paused job: workers apply its catch-up policy (operator level)")
    .argument('<job>', 'job name')
    .requiredOption('--by <name>', 'who resumes (recorded in leasehold.actions)')
    .option('--json', 'print JSON')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (job: string, options: Flags) => {
      try {
        const db = await openDatabase(databaseUrl(options.databaseUrl));
        try {
          const result = await resumeJob(db, job, { by: options.by });
          if (options.json) io.out(JSON.stringify(result));
          else io.out(inert(result.resumed ? `resumed "${job}" (paused by ${result.pausedBy ?? 'unknown'} since ${result.pausedAt?.toISOString()})` : `"${job}" was not paused`));
          io.exit(EXIT.ok);
        } finally {
          await db.pool.end();
        }
      } catch (error) {
        report(io, error, options.json === true);
      }
    });
}
