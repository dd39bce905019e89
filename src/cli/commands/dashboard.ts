// leasehold dashboard --port 8080: the jobs table and per-job timelines in a browser, plus
// /metrics for Prometheus. Read-only; binds to 127.0.0.1 unless --host says otherwise.
import type { Command } from 'commander';
import { startDashboard } from '../../dashboard/server.js';
import { createMetrics } from '../../observe/metrics.js';
import { CliError, databaseUrl, openPool, report, type Io } from '../context.js';
import { EXIT } from '../exit-codes.js';

export function registerDashboard(program: Command, io: Io): void {
  program
    .command('dashboard')
    .description('serve the dashboard page (jobs, timelines, duration vs interval) and /metrics')
    .option('--port <port>', 'TCP port', '8080')
    .option('--host <host>', 'interface to bind (default: this machine only)', '127.0.0.1')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (options: { port: string; host: string; databaseUrl?: string }) => {
      try {
        const port = Number(options.port);
        if (!Number.isInteger(port) || port < 0 || port > 65_535) throw new CliError(`--port must be 0-65535 (got ${options.port})`, EXIT.usage);
        const pool = await openPool(databaseUrl(options.databaseUrl));
        const metrics = createMetrics();
        metrics.observeDatabase(pool);
        let dashboard;
        try {
          dashboard = await startDashboard({ pool, port, host: options.host, metricsRegistry: metrics });
        } catch (error) {
          // a busy port: close the pool so that the process exits with the error's code
          await pool.end();
          throw new CliError(error instanceof Error ? error.message : String(error), EXIT.unavailable);
        }
        io.err(`leasehold: dashboard at ${dashboard.url} (metrics at ${dashboard.url}metrics); Ctrl-C stops it`);
        await new Promise<void>((resolve) => {
          const stop = () => resolve();
          process.once('SIGINT', stop);
          process.once('SIGTERM', stop);
        });
        await dashboard.close();
        await pool.end();
        io.exit(EXIT.ok);
      } catch (error) {
        report(io, error, false);
      }
    });
}
