// A connection that could not be made or broke, as a DatabaseUnavailableError whose `reason` and
// message say what happened and what to fix: nothing listens, nothing answers within the connect
// timeout, the server has no such database or role, or it refused the login. The library's
// messages name its own settings (DATABASE_URL or the connectionString option); the CLI builds the
// same message naming what its user set (describeFailure with its own `setting`).
import { DatabaseUnavailableError, type DatabaseUnavailableReason } from '../errors.js';
import { formatDuration } from '../validate/duration.js';
import type { Login } from './connection-url.js';

/** What the library's messages tell a user to check. */
export const LIBRARY_SETTING = 'DATABASE_URL (or the connectionString option)';

/** The server did not answer a new connection within the connect timeout. */
export class ConnectTimeoutError extends DatabaseUnavailableError {
  readonly timeoutMs: number;
  constructor(message: string, timeoutMs: number, options?: { cause?: unknown }) {
    super(message, { ...options, reason: 'connect-timeout' });
    this.timeoutMs = timeoutMs;
  }
}

/** What a failure message is made of. */
export interface FailureFacts {
  /** host:port/database, as describeConnection() gives it. */
  where: string;
  /** The driver's or the server's error. */
  cause: unknown;
  /** Where and as whom the connection logged in, when known. */
  login?: Login | undefined;
  /** The connect timeout that passed, for a connect timeout. */
  timeoutMs?: number | undefined;
  /** What the user set the URL with: 'DATABASE_URL', '--database-url', or LIBRARY_SETTING. */
  setting: string;
}

// pg-pool's message when a new connection took longer than connectionTimeoutMillis, and pg's when
// a lone Client's connectionTimeoutMillis passed ("Connection terminated unexpectedly" is the cause).
const CONNECT_TIMEOUT_MESSAGES = new Set(['Connection terminated due to connection timeout', 'timeout expired']);

/** Why a connection attempt failed, from the driver's or server's error. */
export function failureReason(cause: unknown): DatabaseUnavailableReason {
  const code = (cause as { code?: unknown } | null)?.code;
  if (code === '3D000') return 'no-database';
  if (code === '28000' || code === '28P01') return 'login-refused';
  if (cause instanceof Error && CONNECT_TIMEOUT_MESSAGES.has(cause.message)) return 'connect-timeout';
  return 'unreachable';
}

/** The message for a failed connection, naming `facts.setting` as the thing to fix. */
export function describeFailure(reason: DatabaseUnavailableReason, facts: FailureFacts): string {
  const { where, cause, login, setting } = facts;
  const detail = detailOf(cause);
  const code = (cause as { code?: unknown } | null)?.code;
  const server = login?.server ?? where;
  switch (reason) {
    case 'connect-timeout':
      return (
        `PostgreSQL at ${where} did not answer within the connect timeout (${formatDuration(facts.timeoutMs ?? 0)}): the host may be down or unreachable, ` +
        `or a firewall drops the traffic. Check the host and port in ${setting}.`
      );
    case 'no-database': {
      const name = login?.database;
      if (!name || !login) return `${detail} at ${server}. Create it (createdb) or fix the database name in ${setting}.`;
      return `PostgreSQL at ${server} has no database "${name}": create it (createdb -h ${shellWord(login.host)} -p ${login.port} ${shellWord(name)}) or fix the database name in ${setting}.`;
    }
    case 'login-refused': {
      if (login && code === '28000' && /^role ".*" does not exist$/.test(detail)) {
        return `PostgreSQL at ${server} has no role "${login.user}": create it (createuser -h ${shellWord(login.host)} -p ${login.port} ${shellWord(login.user)}) or fix the user name in ${setting}.`;
      }
      const who = login ? ` of "${login.user}"` : '';
      const hba = code === '28000' ? `, and that the server's pg_hba.conf admits this login` : '';
      return `PostgreSQL at ${server} refused the login${who}: ${detail}. Check the user and password in ${setting}${hba}.`;
    }
    default: {
      if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') {
        const host = (cause as { hostname?: unknown }).hostname;
        return `The database host ${typeof host === 'string' ? `"${host}" ` : ''}is unknown (DNS lookup failed): check the host in ${setting}.`;
      }
      return `Could not reach PostgreSQL at ${where}: ${detail}. Check that the server is running and that ${setting} points at it.`;
    }
  }
}

export interface FailureContext {
  login?: Login | undefined;
  /** The connect timeout in force, for a connect timeout reported by the driver. */
  connectTimeoutMs?: number | undefined;
  /** What to tell the user to check. @default LIBRARY_SETTING */
  setting?: string | undefined;
}

/** The typed error for a connection to `where` that failed with `cause`, in the library's words. */
export function unavailable(where: string, cause: unknown, context: FailureContext = {}): DatabaseUnavailableError {
  const reason = failureReason(cause);
  return failure(reason, { where, cause, login: context.login, timeoutMs: context.connectTimeoutMs, setting: context.setting ?? LIBRARY_SETTING });
}

/** The typed error for `reason`; a connect timeout is a ConnectTimeoutError (it carries the timeout). */
export function failure(reason: DatabaseUnavailableReason, facts: FailureFacts): DatabaseUnavailableError {
  const message = describeFailure(reason, facts);
  if (reason === 'connect-timeout') return new ConnectTimeoutError(message, facts.timeoutMs ?? 0, { cause: facts.cause });
  return new DatabaseUnavailableError(message, { cause: facts.cause, reason });
}

function detailOf(cause: unknown): string {
  if (!(cause instanceof Error)) return String(cause);
  return cause.message || (cause as { code?: string }).code || cause.name;
}

/** A word as a POSIX shell reads it back: quoted unless it is plainly safe. */
function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}
