// leasehold worker ./jobs.js: start the runtime for the jobs a module exports, either as
// `export const jobs = [...]` or `export default [...]` (job options or defineJob() results).
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Command } from 'commander';
import type { JobDefinition, JobOptions } from '../../worker/job.js';
import { startWorker } from '../../worker/worker.js';
import { CliError, databaseUrl, report, type Io } from '../context.js';
import { EXIT } from '../exit-codes.js';
import { formatDuration, parseDuration } from '../../validate/duration.js';
import { inert } from '../format.js';

export function registerWorker(program: Command, io: Io): void {
  program
    .command('worker')
    .description('run the jobs a module exports (export const jobs = [...]); start it on as many hosts as you like')
    .argument('<module>', 'path to a .js/.mjs module (or .ts, when tsx is installed)')
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
        io.err(inert(`leasehold: worker ${worker.holder} running ${jobs.length} job(s); SIGTERM or Ctrl-C stops it`));
        // The worker stops itself on SIGTERM/SIGINT; say what it is doing, so a stop that takes
        // the grace period does not look like a hang.
        const graceMs = parseDuration(options.grace, '--grace');
        const onSignal = (signal: NodeJS.Signals) => {
          const running = worker.activeRuns;
          io.err(
            running === 0
              ? `leasehold: ${signal}: stopping (no runs in progress)`
              : `leasehold: ${signal}: stopping; signalled ${running} running run(s) and waiting up to ${formatDuration(graceMs)} for them ` +
                  '(then they are recorded aborted); send it again to exit at once',
          );
        };
        process.once('SIGTERM', onSignal);
        process.once('SIGINT', onSignal);
        await worker.stopped;
        process.off('SIGTERM', onSignal);
        process.off('SIGINT', onSignal);
        io.err('leasehold: worker stopped; its leases are released');
        io.exit(EXIT.ok);
      } catch (error) {
        report(io, error, false);
      }
    });
}

async function loadJobs(modulePath: string): Promise<Array<JobOptions | JobDefinition>> {
  const absolute = resolve(modulePath);
  if (!existsSync(absolute)) throw new CliError(`${modulePath}: no such file (looked for ${absolute})`, EXIT.usage);
  if (/\.[cm]?ts$/.test(absolute)) {
    try {
      const api = (await import('tsx/esm/api' as string)) as { register(): void };
      api.register();
    } catch {
      throw new CliError(`loading ${modulePath} needs tsx: npm install -D tsx (or compile it to .js)`, EXIT.usage);
    }
  }
  let module: { jobs?: unknown; default?: unknown };
  try {
    module = (await import(pathToFileURL(absolute).href)) as { jobs?: unknown; default?: unknown };
  } catch (error) {
    throw new CliError(`could not load ${modulePath}: ${error instanceof Error ? error.message : String(error)}`, EXIT.usage);
  }
  const jobs = module.jobs ?? module.default;
  if (!Array.isArray(jobs) || jobs.length === 0) {
    throw new CliError(`${modulePath} must export its jobs: export const jobs = [{ name, cron | every, handler }, ...]`, EXIT.usage);
  }
  return jobs as Array<JobOptions | JobDefinition>;
}
