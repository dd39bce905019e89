// What the CLI says when the database cannot be used. The library's DatabaseUnavailableError
// names the library's settings ("DATABASE_URL (or the connectionString option)"); a CLI user set
// DATABASE_URL or --database-url, so the message is built again from the same facts, naming that.
// The exit code follows the error's reason.
import { ConnectTimeoutError, describeFailure } from '../db/connect-failure.js';
import { describeConnection, loginOf } from '../db/connection-url.js';
import type { DatabaseUnavailableError } from '../errors.js';
import { EXIT } from './exit-codes.js';

/** The URL the command connects with, and what the user set it with. */
let given: { url: string; setting: 'DATABASE_URL' | '--database-url' } | undefined;

export function noteDatabaseUrl(url: string, setting: 'DATABASE_URL' | '--database-url'): void {
  given = { url, setting };
}

/** The message and exit code for a DatabaseUnavailableError. */
export function databaseFailure(error: DatabaseUnavailableError): { message: string; exitCode: number } {
  const exitCode = error.reason === 'no-database' ? EXIT.noDatabase : error.reason === 'login-refused' ? EXIT.auth : EXIT.unavailable;
  const connecting = error.reason === 'unreachable' || error.reason === 'connect-timeout' || error.reason === 'no-database' || error.reason === 'login-refused';
  if (!connecting || !given || error.cause === undefined) return { message: error.message, exitCode };
  const message = describeFailure(error.reason, {
    where: describeConnection(given.url),
    cause: error.cause,
    login: loginOf({ connectionString: given.url }),
    timeoutMs: error instanceof ConnectTimeoutError ? error.timeoutMs : undefined,
    setting: given.setting,
  });
  return { message, exitCode };
}
