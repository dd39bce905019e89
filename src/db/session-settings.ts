// The server settings a new session starts with that the lease protocol depends on, read in the
// connect check's first statement (no round trip of its own), and what each one means:
//
// - transaction_read_only (a hot standby, or default_transaction_read_only = on): nothing can be
//   written. A client that takes leases refuses to start (read-only.ts).
// - default_transaction_isolation above READ COMMITTED: the protocol's single statements lock a
//   row and read it again (acquire, renew, claim), which under REPEATABLE READ or SERIALIZABLE is
//   a serialization failure (40001) whenever another session changed that row first.
// - statement_timeout shorter than queryTimeout: the server cancels the protocol's statements
//   before the client would give up on them; a worker whose claim takes longer runs nothing.
// The last two are overridden, not refused: the pool's library statements then run pinned
// (pinned.ts). lock_timeout needs nothing: every protocol function sets its own (2 s).
// idle_in_transaction_session_timeout matters only inside transactions: a pinned one sets it to
// its statement's timeout, a fenced transaction to its idleTimeout.

/** Read at start; `source` is pg_settings.source: where the value comes from. */
export interface SessionSettings {
  role: string;
  database: string;
  inRecovery: boolean;
  readOnly: { value: boolean; source: string };
  isolation: { value: string; source: string };
  statementTimeout: { ms: number; source: string };
}

// The values as a new statement sees them; where each comes from (pg_settings.source, readable by
// every role) only when one is set at all: reading pg_settings costs about a millisecond.
export const SESSION_SETTINGS_SQL = `select current_user::text as role, current_database()::text as database,
         pg_is_in_recovery() as in_recovery, current_setting('transaction_read_only') = 'on' as read_only,
         current_setting('default_transaction_isolation') as isolation,
         (extract(epoch from current_setting('statement_timeout')::interval) * 1000)::float8 as statement_timeout_ms,
         case when current_setting('transaction_read_only') = 'on' or current_setting('statement_timeout') <> '0'
                or current_setting('default_transaction_isolation') <> 'read committed'
              then (select json_object_agg(name, source) from pg_settings
                     where name in ('default_transaction_read_only', 'default_transaction_isolation', 'statement_timeout')) end as sources`;

export interface SessionSettingsRow {
  role: string;
  database: string;
  in_recovery: boolean;
  read_only: boolean;
  isolation: string;
  statement_timeout_ms: number;
  sources: Record<string, string> | null;
}

export function parseSessionSettings(row: SessionSettingsRow): SessionSettings {
  const source = (name: string) => row.sources?.[name] ?? 'default';
  return {
    role: row.role,
    database: row.database,
    inRecovery: row.in_recovery,
    readOnly: { value: row.read_only, source: source('default_transaction_read_only') },
    isolation: { value: row.isolation, source: source('default_transaction_isolation') },
    statementTimeout: { ms: row.statement_timeout_ms, source: source('statement_timeout') },
  };
}

/**
 * Why the pool's library statements must run pinned (pinned.ts), or null when the session's own
 * defaults suit the protocol and each call stays one statement.
 */
export function pinReason(settings: SessionSettings, queryTimeoutMs: number): string | null {
  const reasons: string[] = [];
  const { isolation, statementTimeout } = settings;
  if (isolation.value !== 'read committed') {
    reasons.push(
      `default_transaction_isolation is '${isolation.value}' (${origin(isolation.source, settings)}); ` +
        `to keep one round trip per call: ${fix('default_transaction_isolation', "'read committed'", isolation.source, settings)}`,
    );
  }
  if (statementTimeout.ms > 0 && statementTimeout.ms < queryTimeoutMs) {
    reasons.push(
      `statement_timeout is ${statementTimeout.ms} ms, under queryTimeout (${queryTimeoutMs} ms) (${origin(statementTimeout.source, settings)}); ` +
        `to keep one round trip per call: ${fix('statement_timeout', `'${Math.ceil(queryTimeoutMs / 1000)}s'`, statementTimeout.source, settings)} (or 0)`,
    );
  }
  return reasons.length > 0 ? reasons.join('; ') : null;
}

/** Where a setting's value comes from, in words. */
export function origin(source: string, settings: SessionSettings): string {
  switch (source) {
    case 'user':
      return `set on role ${ident(settings.role)}`;
    case 'database':
      return `set on database ${ident(settings.database)}`;
    case 'database user':
      return `set on role ${ident(settings.role)} in database ${ident(settings.database)}`;
    case 'configuration file':
      return 'set in the server configuration';
    case 'client':
      return "set by the connection's startup options";
    case 'session':
      return 'set on the session';
    default:
      return `source: ${source}`;
  }
}

/** The statement (or the place) that sets `name` to `value` where it was set. */
export function fix(name: string, value: string, source: string, settings: SessionSettings): string {
  const role = ident(settings.role);
  const database = ident(settings.database);
  switch (source) {
    case 'user':
      return `alter role ${role} set ${name} = ${value}`;
    case 'database':
      return `alter database ${database} set ${name} = ${value}`;
    case 'database user':
      return `alter role ${role} in database ${database} set ${name} = ${value}`;
    case 'configuration file':
      return `alter system set ${name} = ${value} (or postgresql.conf), then select pg_reload_conf()`;
    default:
      return `set ${name} = ${value} where the connection is configured (PGOPTIONS, the pool's options or its connect hook)`;
  }
}

/** A role or database name as SQL writes it. */
function ident(name: string): string {
  return /^[a-z_][a-z0-9_$]*$/.test(name) ? name : `"${name.replace(/"/g, '""')}"`;
}
