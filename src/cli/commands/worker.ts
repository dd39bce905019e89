// leasehold worker ./jobs.js: start the runtime for the jobs a module exports (see
// ../load-jobs.ts for the accepted shapes: job options or defineJob() results).
import type { Command } from 'commander';
import { createMetrics, serveMetrics, type MetricsServer } from '../../observe/metrics.js';
import { startWorker } from '../../worker/worker.js';
import { databaseUrl, integerFlag, report, type Io } from '../context.js';
import { range, shown, WORKER_CLI_DEFAULTS } from '../defaults.js';
import { EXIT } from '../exit-codes.js';
import { formatDuration } from '../../validate/duration.js';
import { durationSetting } from '../../validate/settings.js';
import { inert } from '../format.js';
import { loadJobs } from '../load-jobs.js';

export function registerWorker(program: Command, io: Io): void {
  program
    .command('worker')
    .description('run the jobs a module exports (export const jobs = [...] or module.exports = { jobs }); start it on as many hosts as you like')
    .argument('<module>', 'path to a .js/.mjs/.cjs module (or .ts, when tsx is installed)')
    .option('--holder <name>', 'how this worker names itself (default host:pid:random)')
    .option('--grace <duration>', `shutdown grace period for running handlers ${range(WORKER_CLI_DEFAULTS.grace)}`, shown(WORKER_CLI_DEFAULTS.grace))
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .option('--metrics-port <port>', 'serve this worker\'s Prometheus metrics at http://HOST:PORT/metrics (0 picks a free port)')
    .option('--metrics-host <host>', 'interface for --metrics-port (this machine only by default)', WORKER_CLI_DEFAULTS.metricsHost.default)
    .action(async (modulePath: string, options: { holder?: string; grace: string; databaseUrl?: string; metricsPort?: string; metricsHost: string }) => {
      let server: MetricsServer | undefined;
      try {
        const metricsPort = options.metricsPort === undefined ? undefined : integerFlag(options.metricsPort, WORKER_CLI_DEFAULTS.metricsPort, '--metrics-port');
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
        const graceMs = durationSetting(options.grace, WORKER_CLI_DEFAULTS.grace, '--grace');
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
