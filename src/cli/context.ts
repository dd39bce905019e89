// What every command shares: where to write, the database URL, JSON or human output, and the
// mapping of errors to exit codes and messages.
import pg from 'pg';
import { createOwnedPool, describeConnection, unavailable } from '../db/connection.js';
import { checkSchema } from '../db/migrations.js';
import { permissionDenied } from '../db/permissions.js';
import { DatabaseUnavailableError, InvalidArgumentError, LeaseholdError, PermissionDeniedError, SchemaVersionError } from '../errors.js';
import { EXIT } from './exit-codes.js';

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

export function databaseUrl(option: string | undefined): string {
  const url = option ?? process.env.DATABASE_URL;
  if (!url) throw new CliError('No database: set DATABASE_URL or pass --database-url postgres://…', EXIT.usage);
  return url;
}

// The database role of the command's connection, for messages that name a grant to add.
let connectedRole = 'ROLE';

/** A small pool on the database, checked to be reachable and at this library's schema version. */
export async function openPool(url: string, options: { checkSchema?: boolean } = {}): Promise<pg.Pool> {
  const pool = createOwnedPool(url, { max: 2, connectTimeoutMs: 5_000, applicationName: 'leasehold cli', onError: () => undefined });
  let client: pg.PoolClient | undefined;
  try {
    try {
      client = await pool.connect();
    } catch (error) {
      throw unavailable(describeConnection(url), error);
    }
    connectedRole = (await client.query<{ role: string }>('select current_user::text as role')).rows[0]?.role ?? connectedRole;
    if (options.checkSchema !== false) await checkSchema(client);
    return pool;
  } catch (error) {
    client?.release();
    client = undefined;
    await pool.end();
    throw error;
  } finally {
    client?.release();
  }
}

/** Turns any error into one line on stderr and an exit code. */
export function report(io: Io, raw: unknown, json: boolean): void {
  const error = permissionDenied(raw, connectedRole) ?? raw;
  const code =
    error instanceof CliError
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
  const message = error instanceof Error ? error.message : String(error);
  if (json) io.err(JSON.stringify({ error: message, code: error instanceof LeaseholdError ? error.code : undefined, exitCode: code }));
  else io.err(`leasehold: ${message}`);
  io.exit(code);
}
