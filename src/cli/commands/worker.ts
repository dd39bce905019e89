// leasehold worker ./jobs.js: start the runtime for the jobs a module exports, either as
// `export const jobs = [...]` or `export default [...]` (job options or defineJob() results).
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { Command } from 'commander';
import { createMetrics, serveMetrics, type MetricsServer } from '../../observe/metrics.js';
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
    .option('--metrics-port <port>', 'serve this worker\'s Prometheus metrics at http://HOST:PORT/metrics (0 picks a free port)')
    .option('--metrics-host <host>', 'interface for --metrics-port (default: this machine only)', '127.0.0.1')
    .action(async (modulePath: string, options: { holder?: string; grace: string; databaseUrl?: string; metricsPort?: string; metricsHost: string }) => {
      let server: MetricsServer | undefined;
      try {
        const metricsPort = options.metricsPort === undefined ? undefined : Number(options.metricsPort);
        if (metricsPort !== undefined && !(/^\d+$/.test(options.metricsPort ?? '') && metricsPort <= 65_535)) {
          throw new CliError(`--metrics-port must be 0-65535 (got ${options.metricsPort})`, EXIT.usage);
        }
        const jobs = await loadJobs(modulePath);
        const url = databaseUrl(options.databaseUrl);
        // Bind the port before starting: a busy port fails the command before any job runs.
        const metrics = metricsPort === undefined ? undefined : createMetrics();
        if (metrics && metricsPort !== undefined) server = await serveMetrics(metrics, { port: metricsPort, host: options.metricsHost });
        const worker = await startWorker({
          connectionString: url,
          jobs,
          shutdownGrace: options.grace,
          ...(options.holder ? { holder: options.holder } : {}),
        });
        metrics?.observe(worker);
        io.err(inert(`leasehold: worker ${worker.holder} running ${jobs.length} job(s)${server ? `; metrics at ${server.url}` : ''}; SIGTERM or Ctrl-C stops it`));
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
        await server?.close();
        io.err('leasehold: worker stopped; its leases are released');
        io.exit(EXIT.ok);
      } catch (error) {
        await server?.close();
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
