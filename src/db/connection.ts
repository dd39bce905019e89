// Connections the library owns: pools with error listeners, what counts as a broken connection,
// and the error of a statement that got no answer in time.
import pg from 'pg';
import { DatabaseUnavailableError } from '../errors.js';

/** Connection settings shared by every entry point. */
export interface ConnectionOptions {
  /** PostgreSQL URL. @default process.env.DATABASE_URL */
  connectionString?: string | undefined;
  /** An existing pool to run fenced transactions (and, without a connectionString, lease calls) on. */
  pool?: pg.Pool | undefined;
}

export function resolveConnectionString(options: ConnectionOptions): string | undefined {
  return options.connectionString ?? (options.pool ? undefined : process.env.DATABASE_URL);
}

export interface PoolSettings {
  max: number;
  connectTimeoutMs: number;
  applicationName: string;
  onError: (error: Error) => void;
}

/**
 * A pool the library owns. Its 'error' listener matters: without one, a database restart
 * emits an unhandled 'error' on an idle client and crashes the host process.
 */
export function createOwnedPool(connectionString: string | undefined, settings: PoolSettings): pg.Pool {
  const pool = new pg.Pool({
    connectionString,
    max: settings.max,
    connectionTimeoutMillis: settings.connectTimeoutMs,
    application_name: settings.applicationName,
    idleTimeoutMillis: 30_000,
    keepAlive: true,
  });
  pool.on('error', settings.onError);
  return pool;
}

/**
 * A dedicated direct session the library keeps open (liveness, its witness, the worker's
 * LISTEN): TCP keepalive from 5 s, so a vanished server is noticed by the socket, not only by
 * the next statement. The caller adds its 'error' and 'end' listeners before connecting.
 */
export function createDirectClient(connectionString: string | undefined, applicationName: string, connectTimeoutMs: number): pg.Client {
  return new pg.Client({
    connectionString,
    application_name: applicationName,
    connectionTimeoutMillis: connectTimeoutMs,
    keepAlive: true,
    keepAliveInitialDelayMillis: 5_000,
  });
}

const CONNECTION_ERROR_CODES = new Set(['57P01', '57P02', '57P03', '08000', '08003', '08006', '08001', '08004']);

/** True for errors that mean "the server is unreachable or the connection broke". */
export function isConnectionError(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && (CONNECTION_ERROR_CODES.has(code) || code.startsWith('E'))) return true;
  return /Connection terminated|connection error|timeout exceeded when trying to connect|Query read timeout|not queryable|ECONN|ETIMEDOUT|EHOSTUNREACH|ENOTFOUND/i.test(
    error.message,
  );
}

export class QueryTimeoutError extends DatabaseUnavailableError {
  readonly timeoutMs: number;
  constructor(timeoutMs: number, options?: { cause?: unknown }) {
    super(`PostgreSQL did not answer within ${timeoutMs} ms; the statement's outcome is unknown.`, { ...options, reason: 'query-timeout' });
    this.timeoutMs = timeoutMs;
  }
}

// Statements with a timeout live with the database handle (./handle.ts), descriptions of a URL
// in ./connection-url.ts, failed connections in ./connect-failure.ts.
export { timedQuery } from './handle.js';
export { describeConnection } from './connection-url.js';
export { unavailable } from './connect-failure.js';
