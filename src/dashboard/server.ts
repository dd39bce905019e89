// The dashboard: a small read-only HTTP server (node:http, no framework) serving one page, two
// JSON endpoints over the operator read models (leasehold.job_status, the run history) and,
// when given a registry, the Prometheus metrics.
//
//   GET /                      the page (vanilla JS + inline SVG, no external requests)
//   GET /api/jobs              { now, warningRatio, jobs: JobStatus[] }
//   GET /api/history?job=&hours=   runs, skips and missed slots over the last N hours (all jobs without job=)
//   GET /metrics               registry.metrics() with its content type; 404 without a registry
//   GET /healthz               200 when the database answers, 503 otherwise
//
// Only GET and HEAD: anything else is 405. Errors are answered with 500 and a JSON message; no
// request can take the process down.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import type pg from 'pg';
import { CREEP_WARNING_RATIO, jobStatus, jobTimeline } from '../observe/status.js';
import { dashboardPage } from './page.js';

/** What /metrics serves: a prom-client Registry, or createMetrics()'s result. */
export interface MetricsSource {
  metrics(): Promise<string>;
  readonly contentType: string;
}

export interface DashboardOptions {
  pool: pg.Pool;
  /** @default 8080; 0 picks a free port */
  port?: number;
  /** Interface to bind. @default '127.0.0.1' (this machine only) */
  host?: string;
  /** Served at /metrics when given. */
  metricsRegistry?: MetricsSource;
  /** How often the page refreshes itself. @default 5000 */
  refreshMs?: number;
  /**
   * Host names (Host header, without port) accepted besides loopback names when the server is
   * bound to a loopback address, e.g. the name a local reverse proxy forwards. Requests naming
   * any other host are refused (403): a web page cannot read the dashboard through DNS rebinding.
   */
  allowedHosts?: string[];
  /** Longest a database query may take before the request answers 504. @default 10000 */
  queryTimeoutMs?: number;
}

export interface Dashboard {
  /** e.g. http://127.0.0.1:8080/ */
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/** Longest history window the API serves (the default history retention is 30 days). */
export const MAX_HISTORY_HOURS = 24 * 31;

class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

export async function startDashboard(options: DashboardOptions): Promise<Dashboard> {
  const host = options.host ?? '127.0.0.1';
  const port = options.port ?? 8080;
  const refreshMs = options.refreshMs ?? 5000;
  const queryTimeoutMs = options.queryTimeoutMs ?? 10_000;
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new RangeError(`port must be an integer 0–65535 (got ${port})`);
  if (!(Number.isFinite(refreshMs) && refreshMs >= 250)) throw new RangeError(`refreshMs must be at least 250 (got ${refreshMs})`);
  const { pool, metricsRegistry } = options;
  const loopbackOnly = isLoopback(host);
  const allowedHosts = new Set((options.allowedHosts ?? []).map((h) => h.toLowerCase()));
  const page = dashboardPage({ refreshMs });

  // An idle pooled connection that breaks emits 'error' on the pool, which kills the process
  // when nobody listens. Listen while the dashboard runs if the owner of the pool does not.
  const onPoolError = (): void => undefined;
  const guardPool = pool.listenerCount('error') === 0;
  if (guardPool) pool.on('error', onPoolError);

  const timed = <T>(work: Promise<T>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(new HttpError(504, `the database did not answer within ${queryTimeoutMs} ms`)), queryTimeoutMs);
      work.then(
        (value) => {
          clearTimeout(timer);
          resolve(value);
        },
        (error: unknown) => {
          clearTimeout(timer);
          reject(error);
        },
      );
    });

  async function route(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://dashboard.invalid');
    if (loopbackOnly && !hostAllowed(req.headers.host, allowedHosts)) {
      throw new HttpError(403, `host ${JSON.stringify(req.headers.host ?? '')} is not allowed: open the dashboard as http://127.0.0.1 or http://localhost, or list the name in allowedHosts`);
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.setHeader('Allow', 'GET, HEAD');
      throw new HttpError(405, `the dashboard is read-only: ${req.method ?? 'this method'} is not allowed (GET or HEAD)`);
    }
    switch (url.pathname) {
      case '/':
      case '/index.html':
        send(res, 200, 'text/html; charset=utf-8', page.html, { 'Content-Security-Policy': page.contentSecurityPolicy });
        return;
      case '/api/jobs': {
        const [jobs, clock] = await timed(Promise.all([jobStatus(pool), pool.query<{ now: Date }>('select now() as now')]));
        sendJson(res, 200, { now: clock.rows[0]?.now ?? new Date(), warningRatio: CREEP_WARNING_RATIO, jobs });
        return;
      }
      case '/api/history': {
        const job = url.searchParams.get('job') || undefined;
        const hoursParam = url.searchParams.get('hours');
        const hours = hoursParam === null || hoursParam === '' ? 1 : Number(hoursParam);
        if (!(Number.isFinite(hours) && hours > 0 && hours <= MAX_HISTORY_HOURS)) {
          throw new HttpError(400, `hours must be a number greater than 0 and at most ${MAX_HISTORY_HOURS} (got ${JSON.stringify(hoursParam)})`);
        }
        const timeline = await timed(jobTimeline(pool, { job, hours }));
        sendJson(res, 200, { job: job ?? null, hours, ...timeline });
        return;
      }
      case '/metrics': {
        if (!metricsRegistry) {
          send(res, 404, 'text/plain; charset=utf-8', 'metrics are not enabled on this dashboard: start it with a metricsRegistry (see docs/dashboard.md)\n');
          return;
        }
        const text = await timed(metricsRegistry.metrics());
        send(res, 200, metricsRegistry.contentType, text);
        return;
      }
      case '/healthz': {
        try {
          await timed(pool.query('select 1'));
          sendJson(res, 200, { ok: true, database: 'ok' });
        } catch (error) {
          sendJson(res, 503, { ok: false, database: messageOf(error) });
        }
        return;
      }
      default:
        throw new HttpError(404, `not found: ${url.pathname}`);
    }
  }

  const server = http.createServer((req, res) => {
    route(req, res).catch((error: unknown) => {
      const status = error instanceof HttpError ? error.status : 500;
      if (res.headersSent) {
        res.destroy();
        return;
      }
      sendJson(res, status, { error: messageOf(error) });
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

function send(res: http.ServerResponse, status: number, contentType: string, body: string, headers: Record<string, string> = {}): void {
  const buffer = Buffer.from(body, 'utf8');
  res.writeHead(status, {
    'Content-Type': contentType,
    'Content-Length': buffer.length,
    'Cache-Control': 'no-store',
    'X-Content-Type-Options': 'nosniff',
    'Referrer-Policy': 'no-referrer',
    'X-Frame-Options': 'DENY',
    ...headers,
  });
  res.end(buffer);
}

function sendJson(res: http.ServerResponse, status: number, value: unknown): void {
  send(res, status, 'application/json; charset=utf-8', JSON.stringify(value));
}

function messageOf(error: unknown): string {
  if (error instanceof Error) return error.message || error.name;
  return String(error);
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
