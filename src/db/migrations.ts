// Schema migrations: numbered files in sql/ (0001_leases.sql, ...), applied in order inside one
// transaction, recorded in leasehold.migrations, serialised across processes by a
// transaction-level advisory lock so that any number of workers may start at once.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { SchemaVersionError } from '../errors.js';
import { inTransaction } from './transaction.js';

export interface Migration {
  version: number;
  name: string;
  /** A breaking migration changes the SQL contract (docs/sql-api.md); marked with `--! breaking`. */
  breaking: boolean;
  sql: string;
}

export interface MigrationResult {
  /** Schema version before (0 for a database that never had leasehold). */
  from: number;
  to: number;
  applied: number[];
}

// Fixed key of the advisory lock that serialises migrations ('leasehold' as ASCII, truncated).
export const MIGRATION_LOCK_KEY = 0x6c65617365686f6cn;

// The package's sql/ folder: two levels up from src/db and dist/db, three from dist/cjs/db.
const SQL_DIR =
  ['../../sql/', '../../../sql/'].map((up) => fileURLToPath(new URL(up, import.meta.url))).find((dir) => existsSync(dir)) ??
  fileURLToPath(new URL('../../sql/', import.meta.url));

let cached: Migration[] | undefined;

/** The migrations this version of the library ships, in order. */
export function migrations(): Migration[] {
  if (cached) return cached;
  cached = readdirSync(SQL_DIR)
    .filter((file) => /^\d{4}_[a-z0-9_]+\.sql$/.test(file))
    .sort()
    .map((file) => {
      const sql = readFileSync(join(SQL_DIR, file), 'utf8');
      return {
        version: Number(file.slice(0, 4)),
        name: file.replace(/\.sql$/, ''),
        breaking: /^--! breaking/m.test(sql),
        sql,
      };
    });
  cached.forEach((migration, index) => {
    if (migration.version !== index + 1) throw new Error(`sql/ must number migrations 0001, 0002, ... without gaps (found ${migration.name}).`);
  });
  return cached;
}

export function latestVersion(): number {
  return migrations().length;
}

const BOOTSTRAP = `
  create schema if not exists leasehold;
  create table if not exists leasehold.migrations (
    version    integer primary key,
    name       text not null,
    breaking   boolean not null default false,
    applied_at timestamptz not null default now()
  );`;

function tooNew(databaseVersion: number): SchemaVersionError {
  const library = latestVersion();
  return new SchemaVersionError(
    databaseVersion,
    library,
    `The database's leasehold schema is at version ${databaseVersion}, newer than this library understands (${library}). ` +
      'Another service has upgraded leasehold: upgrade this one to the same or a later version of the package. ' +
      'Nothing was changed.',
  );
}

/** Reads the installed schema version (0 when leasehold was never installed). */
export async function schemaVersion(client: pg.ClientBase): Promise<number> {
  // Two statements: a query naming a missing table fails at parse time, whatever its CASE says.
  const { rows: found } = await client.query<{ exists: boolean }>(
    `select to_regclass('leasehold.migrations') is not null as exists`,
  );
  if (!found[0]?.exists) return 0;
  const { rows } = await client.query<{ version: number }>('select coalesce(max(version), 0)::int as version from leasehold.migrations');
  return rows[0]?.version ?? 0;
}

/** Throws SchemaVersionError unless the installed schema is exactly the library's version. */
export async function checkSchema(client: pg.ClientBase): Promise<number> {
  const version = await schemaVersion(client);
  const library = latestVersion();
  if (version > library) throw tooNew(version);
  if (version < library) {
    throw new SchemaVersionError(
      version,
      library,
      `The database's leasehold schema is at version ${version}; this library needs ${library}. ` +
        'Upgrade it with migrate(pool) or createLeasehold({ migrate: true }).',
    );
  }
  return version;
}

/**
 * Brings the schema up to the library's version. Safe to call from many processes at once:
 * the first takes the lock and migrates, the others wait and then find nothing to do.
 * Refuses (and changes nothing) when the database is newer than the library.
 */
export async function migrate(pool: pg.Pool): Promise<MigrationResult> {
  return inTransaction(pool, 'the database', async (client) => {
    await client.query('select pg_advisory_xact_lock($1)', [MIGRATION_LOCK_KEY.toString()]);
    await client.query(BOOTSTRAP);
    const from = await schemaVersion(client);
    if (from > latestVersion()) throw tooNew(from);
    const applied: number[] = [];
    for (const migration of migrations().filter((m) => m.version > from)) {
      await client.query(migration.sql);
      await client.query('insert into leasehold.migrations (version, name, breaking) values ($1, $2, $3)', [
        migration.version,
        migration.name,
        migration.breaking,
      ]);
      applied.push(migration.version);
    }
    return { from, to: latestVersion(), applied };
  });
}
