// What every command shares: where to write, the database URL, JSON or human output, and the
// mapping of errors to exit codes and messages.
import { connectAndCheck } from '../db/connect-check.js';
import { createOwnedPool, describeConnection } from '../db/connection.js';
import { dbHandle, type DbHandle } from '../db/handle.js';
import type { ReplicationReport } from '../lease/replication.js';
import { permissionDenied } from '../db/permissions.js';
import { readOnlyRefusal } from '../db/read-only.js';
import { DatabaseUnavailableError, InvalidArgumentError, LeaseholdError, PermissionDeniedError, SchemaVersionError } from '../errors.js';
import { EXIT } from './exit-codes.js';
import { durationSetting } from '../validate/settings.js';
import { CLI_CONNECTION } from './defaults.js';
import { inert } from './format.js';

export interface Io {
  out(text: string): void;
  err(text: string): void;
  /** Sets the process exit code (the program exits when the event loop is empty). */
  exit(code: number): void;
}

export const processIo: Io = {
  out: (text) => process.stdout.write(text.endsWith('\n') ? text : `${text}\n`),
  err: (text) => process.stderr.write(text.endsWith('\n') ? text : `${text}\n`),
  exit: (code) => {
    process.exitCode = code;
  },
};

export class CliError extends Error {
  constructor(
    message: string,
    readonly exitCode: number,
  ) {
    super(message);
  }
}

/** A flag's integer value within `bounds`, or a usage error that names the flag and the bounds. */
export function integerFlag(text: string, bounds: { min: number; max: number }, flag: string): number {
  const n = Number(text);
  if (!/^\s*-?\d+\s*$/.test(text) || !Number.isInteger(n) || n < bounds.min || n > bounds.max) {
    throw new CliError(`${flag} must be an integer from ${bounds.min} to ${bounds.max} (got ${text})`, EXIT.usage);
  }
  return n;
}

export function databaseUrl(option: string | undefined): string {
  const url = option ?? process.env.DATABASE_URL;
  if (!url) throw new CliError('No database: set DATABASE_URL or pass --database-url postgres://…', EXIT.usage);
  checkUrl(url, option === undefined ? 'DATABASE_URL' : '--database-url');
  return url;
}

// The database role and server of the command's connection, for messages that name a grant to
// add or a read-only server.
let connectedRole = 'ROLE';
let connectedWhere = 'the database';

/** A postgres:// or postgresql:// URL; anything else would be read as a host or socket name and fail obscurely. */
function checkUrl(url: string, where: string): void {
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if (!parsed || (parsed.protocol !== 'postgres:' && parsed.protocol !== 'postgresql:')) {
    // never echo the value: it may hold a password
    throw new CliError(`${where} is not a PostgreSQL URL: use postgres://user:password@host:5432/database`, EXIT.badUrl);
  }
}

/**
 * A small pool on the database behind a handle (every statement and checkout has a timeout:
 * CLI_CONNECTION), checked to be reachable and, unless `checkSchema: false`, at this library's
 * schema version. Close it with `db.pool.end()`.
 */
export async function openDatabase(url: string, options: { checkSchema?: boolean } = {}): Promise<DbHandle & { replication: ReplicationReport | null }> {
  const timeoutMs = durationSetting(undefined, CLI_CONNECTION.queryTimeout, 'queryTimeout');
  const pool = createOwnedPool(url, {
    max: CLI_CONNECTION.poolSize,
    connectTimeoutMs: durationSetting(undefined, CLI_CONNECTION.connectTimeout, 'connectTimeout'),
    applicationName: 'leasehold cli',
    onError: () => undefined,
  });
  const db = dbHandle(pool, { where: describeConnection(url), timeoutMs });
  try {
    // commands that only read work on a standby too; a write refused there is a DatabaseReadOnlyError
    const check = await connectAndCheck(db, { schema: options.checkSchema === false ? 'none' : 'check', writes: false });
    connectedRole = check.role;
    connectedWhere = db.where;
    return { ...db, replication: check.replication };
  } catch (error) {
    await pool.end();
    throw error;
  }
}

/** Turns any error into one line on stderr and an exit code. */
export function report(io: Io, raw: unknown, json: boolean): void {
  // statements outside the handle (migrate's) reach here as they were
  const error = permissionDenied(raw, connectedRole) ?? readOnlyRefusal(raw, connectedWhere) ?? raw;
  const refused = error instanceof DatabaseUnavailableError ? connectionRefusal(error.cause) : null;
  const code = refused
    ? refused.exitCode
    : error instanceof CliError
      ? error.exitCode
      : error instanceof DatabaseUnavailableError
        ? EXIT.unavailable
        : error instanceof SchemaVersionError
          ? EXIT.schema
          : error instanceof InvalidArgumentError
            ? EXIT.usage
            : error instanceof PermissionDeniedError
              ? EXIT.noperm
              : EXIT.error;
  const message = refused
    ? refused.message
    : error instanceof SchemaVersionError && error.databaseVersion < error.libraryVersion && !error.message.includes('installed by hand')
      ? `the database's leasehold schema is at version ${error.databaseVersion}${error.databaseVersion === 0 ? ' (not installed)' : ''}; ` +
        `this leasehold needs version ${error.libraryVersion}. Run \`leasehold migrate\` with the same database URL.`
      : error instanceof Error
        ? error.message
        : String(error);
  if (json) io.err(JSON.stringify({ error: message, code: error instanceof LeaseholdError ? error.code : undefined, exitCode: code }));
  else io.err(`leasehold: ${inert(message)}`);
  io.exit(code);
}

/**
 * The server answered but refused the connection: a wrong password or unknown role, or a
 * database that does not exist. These are not "unreachable", and retrying will not help.
 */
function connectionRefusal(cause: unknown): { message: string; exitCode: number } | null {
  const code = (cause as { code?: unknown } | null)?.code;
  const text = cause instanceof Error ? cause.message : '';
  if (code === '28P01' || code === '28000') {
    return { message: `PostgreSQL refused the login: ${text}. Check the user and password in the database URL.`, exitCode: EXIT.auth };
  }
  if (code === '3D000') {
    return { message: `${text}. Create it (createdb) or fix the database name in the URL.`, exitCode: EXIT.noDatabase };
  }
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') {
    const host = (cause as { hostname?: unknown }).hostname;
    return { message: `the database host ${typeof host === 'string' ? `"${host}" ` : ''}is unknown (DNS lookup failed): check the host in the database URL.`, exitCode: EXIT.unavailable };
  }
  return null;
}
