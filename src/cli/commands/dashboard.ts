// leasehold dashboard --port 8080: the jobs table and per-job timelines in a browser, plus
// /metrics for Prometheus. Read-only unless --users-file or --trusted-proxy says who may act;
// binds to 127.0.0.1 unless --host says otherwise.
import type { Command } from 'commander';
import type { DashboardActionsOptions } from '../../dashboard/action-options.js';
import { readUsersFile } from '../../dashboard/passwords.js';
import { startDashboard } from '../../dashboard/server.js';
import { LeaseholdError } from '../../errors.js';
import { createMetrics } from '../../monitor/metrics.js';
import { durationSetting } from '../../validate/settings.js';
import { CliError, databaseUrl, integerFlag, openDatabase, report, type Io } from '../context.js';
import { DASHBOARD_CLI_DEFAULTS, range, shown } from '../defaults.js';
import { EXIT } from '../exit-codes.js';

type Flags = {
  port: string;
  host: string;
  refresh: string;
  queryTimeout: string;
  allowedHost: string[];
  usersFile?: string;
  sessionTtl: string;
  secureCookie?: boolean;
  trustedProxy: string[];
  userHeader: string;
  allowUser: string[];
  origin: string[];
  databaseUrl?: string;
};

const collect = (value: string, previous: string[]): string[] => [...previous, value];

export function registerDashboard(program: Command, io: Io): void {
  const command = program
    .command('dashboard')
    .description('serve the dashboard page (jobs, timelines, duration vs interval) and /metrics; with --users-file or --trusted-proxy, people may act on jobs')
    .option('--port <port>', 'TCP port (0 picks a free one)', shown(DASHBOARD_CLI_DEFAULTS.port))
    .option('--host <host>', 'interface to bind (this machine only by default)', DASHBOARD_CLI_DEFAULTS.host.default)
    .option('--refresh <duration>', `how often the page reloads its data ${range(DASHBOARD_CLI_DEFAULTS.refresh)}`, shown(DASHBOARD_CLI_DEFAULTS.refresh))
    .option('--query-timeout <duration>', `a request whose query takes longer answers 504 ${range(DASHBOARD_CLI_DEFAULTS.queryTimeout)}`, shown(DASHBOARD_CLI_DEFAULTS.queryTimeout))
    .option('--allowed-host <name>', 'a Host name accepted besides loopback names, e.g. the one a local reverse proxy forwards (repeatable)', collect, [])
    .option('--users-file <path>', 'people who sign in with a password and may act (lines made by `leasehold dashboard-user`); needs the operator grant')
    .option('--session-ttl <duration>', `how long a sign-in lasts ${range(DASHBOARD_CLI_DEFAULTS.sessionTtl)}`, shown(DASHBOARD_CLI_DEFAULTS.sessionTtl))
    .option('--secure-cookie', 'mark the session cookie Secure (the dashboard is reached over HTTPS)')
    .option('--trusted-proxy <address>', 'address or CIDR range of a reverse proxy whose user header names the person who may act (repeatable); needs the operator grant', collect, [])
    .option('--user-header <name>', 'the header the trusted proxy names the person in', DASHBOARD_CLI_DEFAULTS.userHeader.default)
    .option('--allow-user <name>', 'with --trusted-proxy: a person who may act; others only look (repeatable; default: anyone the proxy names)', collect, [])
    .option('--origin <origin>', "the page's origin when a proxy rewrites the Host header, e.g. https://jobs.example.com (repeatable)", collect, [])
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)');
  command.action(async (options: Flags) => {
    try {
      const port = integerFlag(options.port, DASHBOARD_CLI_DEFAULTS.port, '--port');
      // checked before connecting, with the flags' names in the messages
      durationSetting(options.refresh, DASHBOARD_CLI_DEFAULTS.refresh, '--refresh');
      durationSetting(options.queryTimeout, DASHBOARD_CLI_DEFAULTS.queryTimeout, '--query-timeout');
      const given = (name: string) => command.getOptionValueSource(name) === 'cli';
      const actions = await actionsOf(options, given);
      const { pool } = await openDatabase(databaseUrl(options.databaseUrl));
      const metrics = createMetrics();
      metrics.observeDatabase(pool);
      let dashboard;
      try {
        dashboard = await startDashboard({
          pool,
          port,
          host: options.host,
          refresh: options.refresh,
          queryTimeout: options.queryTimeout,
          metricsRegistry: metrics,
          ...(options.allowedHost.length ? { allowedHosts: options.allowedHost } : {}),
          ...(actions ? { actions } : {}),
        });
      } catch (error) {
        // close the pool so that the process exits with the error's code: a busy port is 69,
        // a role without the operator grant 77 (report() maps leasehold's errors)
        await pool.end();
        throw error instanceof LeaseholdError ? error : new CliError(error instanceof Error ? error.message : String(error), EXIT.unavailable);
      }
      const mode = actions?.users ? `; people in ${options.usersFile} sign in at ${dashboard.url}login to act` : actions?.proxy ? `; people named by ${options.trustedProxy.join(', ')} in ${options.userHeader} may act` : '; read-only';
      io.err(`leasehold: dashboard at ${dashboard.url} (metrics at ${dashboard.url}metrics)${mode}; Ctrl-C stops it`);
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

/** The `actions` option the flags ask for, or undefined (read-only); a usage error for flags that do not fit together. */
async function actionsOf(options: Flags, given: (name: string) => boolean): Promise<DashboardActionsOptions | undefined> {
  const proxy = options.trustedProxy.length > 0;
  const users = options.usersFile !== undefined;
  if (proxy && users) throw new CliError('--users-file and --trusted-proxy are two ways of knowing who acts: give one.', EXIT.usage);
  const modeOf = [['--user-header', 'userHeader', '--trusted-proxy'], ['--allow-user', 'allowUser', '--trusted-proxy'], ['--session-ttl', 'sessionTtl', '--users-file'], ['--secure-cookie', 'secureCookie', '--users-file']] as const;
  for (const [flag, name, mode] of modeOf) {
    if (given(name) && !(mode === '--trusted-proxy' ? proxy : users)) throw new CliError(`${flag} applies to ${mode}: give that too.`, EXIT.usage);
  }
  if (given('origin') && !proxy && !users) throw new CliError('--origin applies to actions: give --users-file or --trusted-proxy too.', EXIT.usage);
  const origins = options.origin.length ? { origins: options.origin } : {};
  if (proxy) {
    return { proxy: { trustedProxies: options.trustedProxy, userHeader: options.userHeader, ...(options.allowUser.length ? { allowedUsers: options.allowUser } : {}) }, ...origins };
  }
  if (options.usersFile !== undefined) {
    durationSetting(options.sessionTtl, DASHBOARD_CLI_DEFAULTS.sessionTtl, '--session-ttl');
    return { users: await readUsersFile(options.usersFile), sessionTtl: options.sessionTtl, secureCookie: options.secureCookie === true, ...origins };
  }
  return undefined;
}
