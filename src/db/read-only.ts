// A server that accepts no writes, as a typed error: at start, from the settings the connect
// check read (it says which: a standby, or default_transaction_read_only and where it is set),
// and later, from a statement refused with 25006 (a primary turned standby by a failover, or the
// setting changed), which says both.
import { DatabaseReadOnlyError } from '../errors.js';
import { fix, origin, type SessionSettings } from './session-settings.js';

const POINT_AT_PRIMARY = 'point DATABASE_URL (or connectionString) at the primary';

/** The refusal at start of a client that takes leases, or null when the server accepts writes. */
export function readOnlyAtStart(settings: SessionSettings, where: string): DatabaseReadOnlyError | null {
  if (!settings.readOnly.value) return null;
  if (settings.inRecovery) {
    return new DatabaseReadOnlyError(
      `PostgreSQL at ${where} is a hot standby (pg_is_in_recovery() is true): it accepts no writes, so leases cannot be taken, ` +
        `renewed or released there. ${capitalized(POINT_AT_PRIMARY)} (docs/high-availability.md).`,
      true,
    );
  }
  const { source } = settings.readOnly;
  return new DatabaseReadOnlyError(
    `PostgreSQL at ${where} is read-only for this session: default_transaction_read_only is on (${origin(source, settings)}), ` +
      `so leases cannot be taken, renewed or released. Fix: ${fix('default_transaction_read_only', 'off', source, settings)} ` +
      '(from a session that is not read-only itself: run `set default_transaction_read_only = off` in it first).',
    false,
  );
}

/** A statement refused because the server or session is read-only (25006), as the typed error; undefined for any other error. */
export function readOnlyRefusal(error: unknown, where: string): DatabaseReadOnlyError | undefined {
  if ((error as { code?: unknown } | null)?.code !== '25006') return undefined;
  return new DatabaseReadOnlyError(
    `PostgreSQL at ${where} refused a write: the server is read-only (a hot standby, or default_transaction_read_only = on). ` +
      `Nothing was written. ${capitalized(POINT_AT_PRIMARY)}, or turn the setting off.`,
    null,
    { cause: error },
  );
}

function capitalized(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}
