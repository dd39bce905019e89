// leasehold worker ./jobs.js: start the runtime for the jobs a module exports (see
// ../load-jobs.ts for the accepted shapes: job options or defineJob() results).
import type { Command } from 'commander';
import { HEALTH_PATHS, workerHealth } from '../../monitor/health.js';
import { serveEndpoints, type EndpointServer } from '../../monitor/http-endpoint.js';
import { createMetrics, serveMetrics, type MetricsServer } from '../../monitor/metrics.js';
import { startWorker } from '../../worker/worker.js';
import { databaseUrl, integerFlag, processIo, report, type Io } from '../context.js';
import { range, shown, WORKER_CLI_DEFAULTS } from '../defaults.js';
import { EXIT } from '../exit-codes.js';
import { formatDuration } from '../../validate/duration.js';
import { durationSetting } from '../../validate/settings.js';
import { inert } from '../format.js';
import { loadJobs } from '../load-jobs.js';

export function registerWorker(program: Command, io: Io): void {
  program
    .command('worker')
    .description('run the jobs a module exports (export const jobs = [...], and handlers = { name: fn } for jobs defined as data); start it on as many hosts as you like')
    .argument('<module>', 'path to a .js/.mjs/.cjs module (or .ts, when tsx is installed)')
    .option('--holder <name>', 'how this worker names itself (default host:pid:random)')
    .option('--grace <duration>', `shutdown grace period for running handlers ${range(WORKER_CLI_DEFAULTS.grace)}`, shown(WORKER_CLI_DEFAULTS.grace))
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .option('--metrics-port <port>', 'serve this worker\'s Prometheus metrics at http://HOST:PORT/metrics (0 picks a free port)')
    .option('--metrics-host <host>', 'interface for --metrics-port (this machine only by default)', WORKER_CLI_DEFAULTS.metricsHost.default)
    .option('--health-port <port>', 'serve liveness at http://HOST:PORT/healthz and readiness at /readyz for container probes (also served next to --metrics-port)')
    .option('--health-host <host>', 'interface for --health-port (0.0.0.0 for probes from outside the container)', WORKER_CLI_DEFAULTS.healthHost.default)
    .action(async (modulePath: string, options: { holder?: string; grace: string; databaseUrl?: string; metricsPort?: string; metricsHost: string; healthPort?: string; healthHost: string }) => {
      let server: MetricsServer | undefined;
      let healthServer: EndpointServer | undefined;
      const closeServers = () => Promise.all([server?.close(), healthServer?.close()]);
      try {
        const metricsPort = options.metricsPort === undefined ? undefined : integerFlag(options.metricsPort, WORKER_CLI_DEFAULTS.metricsPort, '--metrics-port');
        const healthPort = options.healthPort === undefined ? undefined : integerFlag(options.healthPort, WORKER_CLI_DEFAULTS.healthPort, '--health-port');
        const { jobs, handlers } = await loadJobs(modulePath);
        const url = databaseUrl(options.databaseUrl);
        // Bind the ports before starting: a busy port fails the command before any job runs.
        // The routes answer 503 until the worker has started.
        let health: ReturnType<typeof workerHealth> | undefined;
        const notStarted = async () => ({ status: 503, type: 'application/json; charset=utf-8', body: '{"ok":false,"checks":{"started":{"ok":false,"detail":"starting"}}}\n' });
        const routes = {
          [HEALTH_PATHS.live]: () => (health ? health.routes()[HEALTH_PATHS.live]!() : notStarted()),
          [HEALTH_PATHS.ready]: () => (health ? health.routes()[HEALTH_PATHS.ready]!() : notStarted()),
        };
        const metrics = metricsPort === undefined ? undefined : createMetrics();
        if (metrics && metricsPort !== undefined) server = await serveMetrics(metrics, { port: metricsPort, host: options.metricsHost, routes });
        if (healthPort !== undefined) healthServer = await serveEndpoints(routes, { port: healthPort, host: options.healthHost, flag: '--health-port' });
        const worker = await startWorker({
          connectionString: url,
          jobs,
          ...(handlers ? { handlers } : {}),
          shutdownGrace: options.grace,
          ...(options.holder ? { holder: options.holder } : {}),
        });
        metrics?.observe(worker);
        health = workerHealth(worker);
        const serving = [server ? `metrics at ${server.url}` : '', healthServer ? `health at ${healthServer.origin}/healthz and /readyz` : ''].filter(Boolean);
        io.err(inert(`leasehold: worker ${worker.holder} running ${jobs.length} job(s)${handlers ? ` and the data jobs of ${Object.keys(handlers).length} handler(s)` : ''}${serving.map((s) => `; ${s}`).join('')}; SIGTERM or Ctrl-C stops it`));
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
        await closeServers();
        io.err('leasehold: worker stopped; its leases are released');
        io.exit(EXIT.ok);
        // Handlers that ignored their signal past the grace period are recorded aborted and their
        // fenced writes refused; do not let them keep the process (and the pod) alive.
        if (worker.activeRuns > 0 && io === processIo) {
          io.err(`leasehold: ${worker.activeRuns} handler(s) still running after the grace period; exiting without them`);
          setTimeout(() => process.exit(EXIT.ok), 100).unref();
        }
      } catch (error) {
        await closeServers();
        report(io, error, false);
      }
    });
}
