// The dashboard: a small read-only HTTP server (node:http, no framework) serving one page, JSON
// endpoints shaped for a fleet of thousands of jobs and, when given a registry, the Prometheus
// metrics.
//
//   GET /                          the page, its first table page rendered on the server
//   GET /api/summary               fleet counts and the live workers
//   GET /api/jobs?offset=&limit=&q=&filter=   one page of the job table
//   GET /api/timelines?job=…&hours=            runs, skips and missed slots of the named jobs (≤ 100)
//   GET /api/history?job=&hours=   one job's (or, up to 24 h, every job's) runs, skips and missed slots
//   GET /api/runs?job=&limit=      a job's newest runs, skips and missed slots
//   GET /api/trends?hours=&job=    a job's or the fleet's runs over time, in buckets (trends.ts)
//   GET /metrics                   registry.metrics() with its content type; 404 without a registry
//   GET /healthz                   200 when the database answers, 503 otherwise
//   /api/session, /login, /logout, POST /api/actions/NAME   people and their acts (action-routes.ts)
//
// Only GET and HEAD, but for the acts of the `actions` option. /api/* answers only requests
// carrying the page's header (see guard.ts); bad parameters are 400 with a plain message;
// database work is capped (Limiter, 503 beyond).
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type pg from 'pg';
import { QueryTimeoutError } from '../db/connection.js';
import { DatabaseUnavailableError } from '../errors.js';
import { dbHandle } from '../db/handle.js';
import { formatDuration, type Duration } from '../validate/duration.js';
import { checkOptionKeys, optionKeys } from '../validate/options.js';
import { durationSetting, integerSetting } from '../validate/settings.js';
import { DASHBOARD_DEFAULTS, DASHBOARD_LIMITS } from './defaults.js';
import { CREEP_WARNING_RATIO, jobHistory, jobTimeline } from '../monitor/status.js';
import { API_HEADER, checkSameOrigin, choiceParam, HttpError, jobListParam, jobParam, Limiter, numberParam, onlyParams, searchParam } from './guard.js';
import { dashboardPage, type PageData } from './page.js';
import { fleetSummary, JOB_FILTERS, jobPage, liveWorkers, type FleetSummary, type LiveWorker } from '../monitor/queries.js';
import { nextRun, scheduleNote, storedSchedule } from '../schedule/schedule-text.js';
import { MAX_TIMELINE_JOBS, timelinesFor } from './timelines.js';
import { resolveActions, type DashboardActionsOptions } from './action-options.js';
import { actionRoutes } from './action-routes.js';
import { trendsEndpoint } from './trends.js';
import { withScheduleInterval } from './job-interval.js';

/** What /metrics serves: a prom-client Registry, or createMetrics()'s result. */
export interface MetricsSource {
  metrics(): Promise<string>;
  readonly contentType: string;
}

export interface DashboardOptions {
  /** A pool on the database with the `leasehold` schema; its role needs the `reader` grant. */
  pool: pg.Pool;
  /** TCP port; 0 picks a free port (`dashboard.port` tells which). @default 8080 */
  port?: number | undefined;
  /** Interface to bind. @default '127.0.0.1' (this machine only) */
  host?: string | undefined;
  /** Served at /metrics when given: a prom-client Registry or createMetrics()'s result. */
  metricsRegistry?: MetricsSource | undefined;
  /** How often the page refreshes itself: milliseconds or a string such as '5s' (250 ms to 1 h). @default '5s' */
  refresh?: Duration | undefined;
  /**
   * Host names (Host header, without port) accepted besides loopback names when the server is
   * bound to a loopback address, e.g. the name a local reverse proxy forwards. Requests naming
   * any other host are refused (403): a web page cannot read the dashboard through DNS rebinding.
   */
  allowedHosts?: string[] | undefined;
  /**
   * Longest a database query may take before the request answers 504: milliseconds or a string
   * such as '10s' (50 ms to 10 min). The query's connection is then closed, not reused.
   * @default '10s'
   */
  queryTimeout?: Duration | undefined;
  /** Database-backed requests served at once; more are answered 503 with Retry-After. @default 4 */
  maxConcurrentQueries?: number | undefined;
  /**
   * Lets people the dashboard knows pause, resume, run now, backfill and force-release jobs (the
   * pool's role then needs the `operator` grant). Without it the dashboard is read-only.
   * @default read-only
   */
  actions?: DashboardActionsOptions | undefined;
}

export interface Dashboard {
  /** e.g. http://127.0.0.1:8080/ */
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

const { historyHours: MAX_HISTORY_HOURS, fleetHistoryHours: MAX_FLEET_HISTORY_HOURS, pageSize: MAX_PAGE_SIZE, ssrBudgetMs: SSR_BUDGET_MS } = DASHBOARD_LIMITS;

const OPTION_KEYS = optionKeys<DashboardOptions>({
  pool: true,
  port: true,
  host: true,
  metricsRegistry: true,
  refresh: true,
  allowedHosts: true,
  queryTimeout: true,
  maxConcurrentQueries: true,
  actions: true,
});

export async function startDashboard(options: DashboardOptions): Promise<Dashboard> {
  checkOptionKeys(options, OPTION_KEYS, 'startDashboard()');
  const host = options.host ?? DASHBOARD_DEFAULTS.host.default;
  const port = integerSetting(options.port, DASHBOARD_DEFAULTS.port, 'port');
  const refreshMs = durationSetting(options.refresh, DASHBOARD_DEFAULTS.refresh, 'refresh');
  const queryTimeoutMs = durationSetting(options.queryTimeout, DASHBOARD_DEFAULTS.queryTimeout, 'queryTimeout');
  const maxConcurrent = integerSetting(options.maxConcurrentQueries, DASHBOARD_DEFAULTS.maxConcurrentQueries, 'maxConcurrentQueries');
  const actionConfig = resolveActions(options.actions);
  const { pool, metricsRegistry } = options;
  const loopbackOnly = isLoopback(host);
  const allowedHosts = new Set((options.allowedHosts ?? []).map((h) => h.toLowerCase()));
  const limiter = new Limiter(maxConcurrent);
  // every statement through the handle: one that outlives queryTimeout fails, and its connection is closed
  const db = dbHandle(pool, { where: 'the database', timeoutMs: queryTimeoutMs });
  const tooSlow = () => new HttpError(504, `the database did not answer within ${formatDuration(queryTimeoutMs)}`);

  // An idle pooled connection that breaks emits 'error' on the pool, which kills the process
  // when nobody listens. Listen while the dashboard runs if the owner of the pool does not.
  const onPoolError = (): void => undefined;
  const guardPool = pool.listenerCount('error') === 0;
  if (guardPool) pool.on('error', onPoolError);

  const timed = <T>(work: () => Promise<T>): Promise<T> =>
    limiter.run(
      () =>
        new Promise<T>((resolve, reject) => {
          // a backstop for work of several statements (and /metrics); each statement has its own timeout
          const timer = setTimeout(() => reject(tooSlow()), queryTimeoutMs);
          work().then(
            (value) => {
              clearTimeout(timer);
              resolve(value);
            },
            (error: unknown) => {
              clearTimeout(timer);
              reject(error instanceof QueryTimeoutError ? tooSlow() : error);
            },
          );
        }),
    );

  // Every open page asks for the summary on each refresh. It is the one fleet-wide aggregate (a
  // pass over 24 h of runs), so one query serves every page for 5 seconds.
  const summaryTtlMs = DASHBOARD_LIMITS.summaryTtlMs;
  let summaryCache: { at: number; value: Promise<{ summary: FleetSummary; workers: { total: number; workers: LiveWorker[] } }> } | undefined;
  const summary = () => {
    if (!summaryCache || Date.now() - summaryCache.at > summaryTtlMs) {
      const value = timed(async () => ({ summary: await fleetSummary(db), workers: await liveWorkers(db, 50) }));
      summaryCache = { at: Date.now(), value };
      value.catch(() => {
        if (summaryCache?.value === value) summaryCache = undefined;
      });
    }
    return summaryCache.value;
  };

  const trends = trendsEndpoint(db, timed);

  async function jobsPage(params: URLSearchParams, light = false) {
    const offset = numberParam(params, 'offset', 0, 0, 1_000_000, true);
    const limit = numberParam(params, 'limit', 50, 1, MAX_PAGE_SIZE, true);
    const search = searchParam(params, 'q');
    const filter = choiceParam(params, 'filter', JOB_FILTERS, 'all');
    const page = await timed(() => jobPage(db, { offset, limit, filter, light, ...(search ? { search } : {}) }));
    const jobs = page.jobs.map((job) => {
      const schedule = storedSchedule(job.schedule, job.timezone);
      return { ...withScheduleInterval(job, schedule), nextRunAt: nextRun(schedule, page.now, job.lastSlot), scheduleNote: scheduleNote(job.schedule) };
    });
    return { now: page.now, warningRatio: CREEP_WARNING_RATIO, total: page.total, offset, limit, filter, q: search ?? null, partial: light, jobs };
  }

  async function api(path: string, params: URLSearchParams): Promise<unknown> {
    switch (path) {
      case '/api/summary':
        onlyParams(params, []);
        return { warningRatio: CREEP_WARNING_RATIO, ...(await summary()) };
      case '/api/jobs':
        onlyParams(params, ['offset', 'limit', 'q', 'filter']);
        return jobsPage(params);
      case '/api/timelines': {
        onlyParams(params, ['job', 'hours']);
        const jobs = jobListParam(params, 'job', MAX_TIMELINE_JOBS);
        const hours = numberParam(params, 'hours', 1, 0.01, MAX_FLEET_HISTORY_HOURS);
        const timeline = await timed(() => timelinesFor(db, jobs, hours, 3000));
        return { hours, ...timeline };
      }
      case '/api/history': {
        onlyParams(params, ['job', 'hours']);
        const job = jobParam(params, 'job');
        const hours = numberParam(params, 'hours', 1, 0.01, job ? MAX_HISTORY_HOURS : MAX_FLEET_HISTORY_HOURS);
        const timeline = await timed(() => jobTimeline(pool, { ...(job ? { job } : {}), hours, timeout: queryTimeoutMs }));
        return { job: job ?? null, hours, ...timeline };
      }
      case '/api/runs': {
        onlyParams(params, ['job', 'limit']);
        const job = jobParam(params, 'job');
        if (!job) throw new HttpError(400, 'job is required');
        const limit = numberParam(params, 'limit', 50, 1, 500, true);
        return { job, entries: await timed(() => jobHistory(pool, { job, limit, timeout: queryTimeoutMs })) };
      }
      case '/api/trends':
        return trends(params);
      default:
        throw new HttpError(404, `not found: ${path}`);
    }
  }

  // The first table page, rendered into the HTML so the page is useful before (or without) its
  // script. Skipped for non-navigation requests (a cross-site <img> or no-cors fetch). When the
  // full page is not ready within SSR_BUDGET_MS, the page goes out with state, holders and last
  // runs only (the script adds the 24 h figures); when the database is busy or down, without rows.
  async function pageData(req: http.IncomingMessage): Promise<PageData | undefined> {
    const mode = req.headers['sec-fetch-mode'];
    if (mode !== undefined && mode !== 'navigate') return undefined;
    try {
      // both at once: the light one (a few ms) is ready when the budget runs out
      const full = jobsPage(new URLSearchParams());
      const light = jobsPage(new URLSearchParams(), true);
      full.catch(() => undefined);
      light.catch(() => undefined);
      let timer: NodeJS.Timeout | undefined;
      const late = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), SSR_BUDGET_MS)));
      const first = await Promise.race([full, late]).finally(() => clearTimeout(timer));
      return first ?? (await light);
    } catch {
      return undefined;
    }
  }

  async function route(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    let url: URL;
    try {
      url = new URL(req.url ?? '/', 'http://dashboard.invalid');
    } catch {
      throw new HttpError(400, 'malformed request target');
    }
    if (loopbackOnly && !hostAllowed(req.headers.host, allowedHosts)) {
      throw new HttpError(403, `host ${JSON.stringify(req.headers.host ?? '')} is not allowed: open the dashboard as http://127.0.0.1 or http://localhost, or list the name in allowedHosts`);
    }
    const acted = await controls.route(req, url);
    if (acted) {
      send(res, acted.status, acted.contentType, acted.body, acted.headers);
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      throw new HttpError(405, `the dashboard is read-only: ${req.method ?? 'this method'} is not allowed (GET or HEAD)`, { Allow: 'GET, HEAD' });
    }
    if (url.pathname.startsWith('/api/')) {
      checkSameOrigin(req);
      sendJson(res, 200, await api(url.pathname, url.searchParams));
      return;
    }
    switch (url.pathname) {
      case '/':
      case '/index.html': {
        const page = dashboardPage({ refreshMs, data: await pageData(req) });
        send(res, 200, 'text/html; charset=utf-8', page.html, { 'Content-Security-Policy': page.contentSecurityPolicy });
        return;
      }
      case '/metrics': {
        refuseCrossSite(req);
        if (!metricsRegistry) {
          send(res, 404, 'text/plain; charset=utf-8', 'metrics are not enabled on this dashboard: start it with a metricsRegistry (see docs/dashboard.md)\n');
          return;
        }
        const text = await timed(() => metricsRegistry.metrics());
        send(res, 200, metricsRegistry.contentType, text);
        return;
      }
      case '/healthz': {
        refuseCrossSite(req);
        try {
          await timed(() => db.query('select 1'));
          sendJson(res, 200, { ok: true, database: 'ok' });
        } catch (error) {
          if (error instanceof HttpError && error.status === 503) throw error;
          sendJson(res, 503, { ok: false, database: 'the database did not answer' });
        }
        return;
      }
      default:
        throw new HttpError(404, `not found: ${url.pathname.slice(0, 200)}`);
    }
  }

  const controls = actionRoutes(actionConfig, { db, timed });
  // the role must be able to take every act it offers: said at start, not at the first click
  await controls.prepare().catch((error: unknown) => {
    if (guardPool) pool.off('error', onPoolError);
    throw error;
  });

  const server = http.createServer((req, res) => {
    route(req, res).catch((error: unknown) => {
      if (res.headersSent) {
        res.destroy();
        return;
      }
      // Only our own messages reach the client; a database or driver error is summarised.
      if (error instanceof HttpError) sendJson(res, error.status, { error: error.message }, error.headers);
      else sendJson(res, 500, { error: `internal error: ${internalSummary(error)}` });
    });
  });
  server.on('clientError', (_error, socket) => {
    if (socket.writable) socket.end('HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n');
    else socket.destroy();
  });
  server.keepAliveTimeout = 10_000;
  server.requestTimeout = 30_000;

  await new Promise<void>((resolve, reject) => {
    const onError = (error: NodeJS.ErrnoException): void => {
      if (guardPool) pool.off('error', onPoolError);
      reject(
        error.code === 'EADDRINUSE'
          ? new Error(`cannot start the dashboard: port ${port} on ${host} is already in use (choose another port)`, { cause: error })
          : error.code === 'EACCES'
            ? new Error(`cannot start the dashboard: no permission to listen on port ${port} on ${host} (choose a port above 1023)`, { cause: error })
            : error,
      );
    };
    server.once('error', onError);
    server.listen(port, host, () => {
      server.off('error', onError);
      resolve();
    });
  });
  server.on('error', () => undefined);

  const bound = (server.address() as AddressInfo).port;
  const urlHost = host.includes(':') ? `[${host}]` : host;
  let closing: Promise<void> | undefined;
  return {
    url: `http://${urlHost}:${bound}/`,
    port: bound,
    close() {
      closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }).finally(() => {
        if (guardPool) pool.off('error', onPoolError);
      });
      return closing;
    },
  };
}

/** /metrics and /healthz serve scrapers and probes (no Sec-Fetch-Site), not other pages. */
function refuseCrossSite(req: http.IncomingMessage): void {
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') throw new HttpError(403, 'cross-site request refused');
}

function send(res: http.ServerResponse, status: number, contentType: string, body: string, headers: Record<string, string> = {}): void {
  const buffer = Buffer.from(body, 'utf8');
  res.writeHead(status, {
    'Content-Type': contentType,
    'Content-Length': buffer.length,
    'Cache-Control': 'no-store',
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    'X-Frame-Options': 'DENY',
    'Cross-Origin-Resource-Policy': 'same-origin',
    Vary: `Sec-Fetch-Site, Sec-Fetch-Mode, ${API_HEADER}`,
    ...headers,
  });
  res.end(buffer);
}

function sendJson(res: http.ServerResponse, status: number, value: unknown, headers: Record<string, string> = {}): void {
  send(res, status, 'application/json; charset=utf-8', JSON.stringify(value), headers);
}

// A plain description of an unexpected failure: connection problems by their code, database
// errors by SQLSTATE only (their text may quote the request's input), anything else by name.
function internalSummary(failure: unknown): string {
  // the handle wraps driver errors (DatabaseUnavailableError); describe what it wrapped
  const error = failure instanceof DatabaseUnavailableError && failure.cause !== undefined ? failure.cause : failure;
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^E[A-Z]+$/.test(code)) return `cannot reach the database (${code})`;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) return `the database refused the query (SQLSTATE ${code})`;
  if (error instanceof Error && /timeout|terminat|connect/i.test(error.message)) return 'cannot reach the database';
  return error instanceof Error ? error.name : 'unknown error';
}

function isLoopback(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[|\]$/g, '');
  return h === 'localhost' || h === '::1' || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(h);
}

function hostAllowed(header: string | undefined, allowed: ReadonlySet<string>): boolean {
  if (!header) return false;
  const name = header.toLowerCase().replace(/:\d+$/, '');
  return isLoopback(name) || name.endsWith('.localhost') || allowed.has(name) || allowed.has(name.replace(/^\[|\]$/g, ''));
}
