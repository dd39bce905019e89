// leasehold worker ./jobs.js: start the runtime for the jobs a module exports (see
// ../load-jobs.ts for the accepted shapes: job options or defineJob() results).
import type { Command } from 'commander';
import { startWorker } from '../../worker/worker.js';
import { databaseUrl, report, type Io } from '../context.js';
import { EXIT } from '../exit-codes.js';
import { loadJobs } from '../load-jobs.js';

export function registerWorker(program: Command, io: Io): void {
  program
    .command('worker')
    .description('run the jobs a module exports (export const jobs = [...] or module.exports = { jobs }); start it on as many hosts as you like')
    .argument('<module>', 'path to a .js/.mjs/.cjs module (or .ts, when tsx is installed)')
    .option('--holder <name>', 'how this worker names itself (default host:pid:random)')
    .option('--grace <duration>', 'shutdown grace period for running handlers', '30s')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (modulePath: string, options: { holder?: string; grace: string; databaseUrl?: string }) => {
      try {
        const jobs = await loadJobs(modulePath);
        const worker = await startWorker({
          connectionString: databaseUrl(options.databaseUrl),
          jobs,
          shutdownGrace: options.grace,
          ...(options.holder ? { holder: options.holder } : {}),
        });
        io.err(`leasehold: worker ${worker.holder} running ${jobs.length} job(s); SIGTERM or Ctrl-C stops it`);
        await worker.stopped; // it stops itself on SIGTERM/SIGINT
        io.exit(EXIT.ok);
      } catch (error) {
        report(io, error, false);
      }
    });
}
