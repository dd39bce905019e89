// What every command shares: where to write, the database URL, JSON or human output, and the
// mapping of errors to exit codes and messages.
import { connectAndCheck } from '../db/connect-check.js';
import { createOwnedPool, describeConnection } from '../db/connection.js';
import { checkConnectionString } from '../db/connection-url.js';
import { dbHandle, type DbHandle } from '../db/handle.js';
import type { ReplicationReport } from '../db/replication.js';
import { permissionDenied } from '../db/permissions.js';
import { readOnlyRefusal } from '../db/read-only.js';
import { DatabaseUnavailableError, InvalidArgumentError, LeaseholdError, PermissionDeniedError, SchemaVersionError } from '../errors.js';
import { EXIT } from './exit-codes.js';
import { durationSetting } from '../validate/settings.js';
import { CLI_CONNECTION } from './defaults.js';
import { inert } from './format.js';
import { databaseFailure, noteDatabaseUrl } from './database-errors.js';
import { errorColumns, wrap } from './layout.js';

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
  const setting = option === undefined ? 'DATABASE_URL' : '--database-url';
  checkUrl(url, setting);
  // messages about this database name what the user set, not the library's option
  noteDatabaseUrl(url, setting);
  return url;
}

/** The settings a database URL comes from: an InvalidArgumentError about one of them is a bad URL (exit 64). */
const URL_SETTINGS = new Set(['DATABASE_URL', '--database-url']);

// The database role and server of the command's connection, for messages that name a grant to
// add or a read-only server.
let connectedRole = 'ROLE';
let connectedWhere = 'the database';

/** A postgres:// or postgresql:// URL; anything else would be read as a host or socket name and fail obscurely. */
function checkUrl(url: string, where: string): void {
  // before the URL parser, which refuses a host list with ports as merely "invalid"
  checkConnectionString(url, where);
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

/**
 * Turns any error into a message on stderr and an exit code. The message is wrapped to a
 * terminal's width (or COLUMNS); elsewhere it stays one line, one log line per error.
 */
export function report(io: Io, raw: unknown, json: boolean): void {
  // statements outside the handle (migrate's) reach here as they were
  const error = permissionDenied(raw, connectedRole) ?? readOnlyRefusal(raw, connectedWhere) ?? raw;
  const database = error instanceof DatabaseUnavailableError ? databaseFailure(error) : null;
  const code = database
    ? database.exitCode
    : error instanceof CliError
      ? error.exitCode
      : error instanceof SchemaVersionError
        ? EXIT.schema
        : error instanceof InvalidArgumentError
          ? URL_SETTINGS.has(error.argument)
            ? EXIT.badUrl
            : EXIT.usage
          : error instanceof PermissionDeniedError
            ? EXIT.noperm
            : EXIT.error;
  const message = database
    ? database.message
    : error instanceof SchemaVersionError && error.reason === 'behind'
      ? `the database's leasehold schema is at version ${error.databaseVersion}${error.databaseVersion === 0 ? ' (not installed)' : ''}; ` +
        `this leasehold needs version ${error.libraryVersion}. Run \`leasehold migrate\` with the same database URL.`
      : error instanceof Error
        ? error.message
        : String(error);
  const reason = error instanceof DatabaseUnavailableError ? error.reason : undefined;
  if (json) io.err(JSON.stringify({ error: message, code: error instanceof LeaseholdError ? error.code : undefined, reason, exitCode: code }));
  else io.err(wrap(`leasehold: ${inert(message)}`, errorColumns()).join('\n'));
  io.exit(code);
}
