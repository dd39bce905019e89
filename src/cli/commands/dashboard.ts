// leasehold dashboard --port 8080: the jobs table and per-job timelines in a browser, plus
// /metrics for Prometheus. Read-only; binds to 127.0.0.1 unless --host says otherwise.
import type { Command } from 'commander';
import { startDashboard } from '../../dashboard/server.js';
import { createMetrics } from '../../monitor/metrics.js';
import { durationSetting } from '../../validate/settings.js';
import { CliError, databaseUrl, integerFlag, openDatabase, report, type Io } from '../context.js';
import { DASHBOARD_CLI_DEFAULTS, range, shown } from '../defaults.js';
import { EXIT } from '../exit-codes.js';

export function registerDashboard(program: Command, io: Io): void {
  program
    .command('dashboard')
    .description('serve the dashboard page (jobs, timelines, duration vs interval) and /metrics')
    .option('--port <port>', 'TCP port (0 picks a free one)', shown(DASHBOARD_CLI_DEFAULTS.port))
    .option('--host <host>', 'interface to bind (this machine only by default)', DASHBOARD_CLI_DEFAULTS.host.default)
    .option('--refresh <duration>', `how often the page reloads its data ${range(DASHBOARD_CLI_DEFAULTS.refresh)}`, shown(DASHBOARD_CLI_DEFAULTS.refresh))
    .option('--query-timeout <duration>', `a request whose query takes longer answers 504 ${range(DASHBOARD_CLI_DEFAULTS.queryTimeout)}`, shown(DASHBOARD_CLI_DEFAULTS.queryTimeout))
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (options: { port: string; host: string; refresh: string; queryTimeout: string; databaseUrl?: string }) => {
      try {
        const port = integerFlag(options.port, DASHBOARD_CLI_DEFAULTS.port, '--port');
        // checked before connecting, with the flags' names in the messages
        durationSetting(options.refresh, DASHBOARD_CLI_DEFAULTS.refresh, '--refresh');
        durationSetting(options.queryTimeout, DASHBOARD_CLI_DEFAULTS.queryTimeout, '--query-timeout');
        const { pool } = await openDatabase(databaseUrl(options.databaseUrl));
        const metrics = createMetrics();
        metrics.observeDatabase(pool);
        let dashboard;
        try {
          dashboard = await startDashboard({ pool, port, host: options.host, refresh: options.refresh, queryTimeout: options.queryTimeout, metricsRegistry: metrics });
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
