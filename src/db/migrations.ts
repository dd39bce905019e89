// Schema migrations. The schema is one baseline (sql/baseline/, by concept: leases, scheduler,
// history, control, read models, privileges), schema version 28, and after it the numbered files
// of sql/migrations/ (0029_…), each applied once and never edited: a checksum of every applied
// migration is recorded and an edited one is refused. A database created by a pre-release build
// (versions 22 to 27) is converted to the baseline keeping its data (sql/prerelease/); an older
// one is refused with what to do. Applied inside one transaction, serialised across processes by
// a transaction-level advisory lock so that any number of workers may start at once. The same
// steps, as text, are the install script (installScript(), `leasehold migrate --dry-run`,
// sql/install/) that a DBA or another migration tool applies without Node.
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { SchemaVersionError } from '../errors.js';
import { permissionDenied } from './permissions.js';
import { inTransaction } from './transaction.js';

export interface Migration {
  version: number;
  name: string;
  /** A breaking migration changes the SQL contract (docs/sql-api.md); marked with `--! breaking`. */
  breaking: boolean;
  sql: string;
  /** sha256 of the SQL, recorded when it is applied. */
  checksum: string;
}

export interface MigrationResult {
  /** Schema version before (0 for a database that never had leasehold). */
  from: number;
  /** Schema version after: the library's, or the database's when it is newer and compatible. */
  to: number;
  applied: number[];
}

/** The version of the baseline: the first schema of the 1.0 contract. */
export const BASELINE_VERSION = 28;
/** Pre-release schemas from this version up to the baseline's are converted keeping their data. */
const PRERELEASE_CONVERTIBLE = 22;

// Fixed key of the advisory lock that serialises migrations ('leasehold' as ASCII, truncated).
export const MIGRATION_LOCK_KEY = 0x6c65617365686f6cn;

// The package's sql/ folder: two levels up from src/db and dist/db, three from dist/cjs/db.
const SQL_DIR =
  ['../../sql/', '../../../sql/'].map((up) => fileURLToPath(new URL(up, import.meta.url))).find((dir) => existsSync(dir)) ??
  fileURLToPath(new URL('../../sql/', import.meta.url));

function sqlFiles(folder: string, pattern: RegExp): { file: string; sql: string }[] {
  const dir = join(SQL_DIR, folder);
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((file) => pattern.test(file))
    .sort()
    .map((file) => ({ file, sql: readFileSync(join(dir, file), 'utf8') }));
}

const checksum = (sql: string): string => createHash('sha256').update(sql).digest('hex');

let cached: Migration[] | undefined;

/** The migrations this version of the library ships, in order: the baseline, then sql/migrations/. */
export function migrations(): Migration[] {
  if (cached) return cached;
  const baseline = sqlFiles('baseline', /^\d_[a-z_]+\.sql$/)
    .map(({ file, sql }) => `-- sql/baseline/${file}\n${sql.trimEnd()}\n`)
    .join('\n');
  const later = sqlFiles('migrations', /^\d{4}_[a-z0-9_]+\.sql$/).map(({ file, sql }) => ({
    version: Number(file.slice(0, 4)),
    name: file.replace(/\.sql$/, ''),
    breaking: /^--! breaking/m.test(sql),
    sql,
    checksum: checksum(sql),
  }));
  cached = [{ version: BASELINE_VERSION, name: 'baseline', breaking: true, sql: baseline, checksum: checksum(baseline) }, ...later];
  cached.forEach((migration, index) => {
    if (migration.version !== BASELINE_VERSION + index) {
      throw new Error(`sql/migrations/ must number migrations ${BASELINE_VERSION + 1}, ${BASELINE_VERSION + 2}, ... without gaps (found ${migration.name}).`);
    }
  });
  return cached;
}

export function latestVersion(): number {
  return BASELINE_VERSION + migrations().length - 1;
}

const BOOTSTRAP = `create schema if not exists leasehold;
create table if not exists leasehold.migrations (
  version    integer primary key,
  name       text not null,
  breaking   boolean not null default false,
  applied_at timestamptz not null default now(),
  checksum   text
);`;

// Runs after every migration: secures whatever the migrations created (sql/baseline/6_privileges.sql).
const SECURE = `do $$ begin
  if to_regprocedure('leasehold.secure_schema()') is not null then perform leasehold.secure_schema(); end if;
end $$;`;

function lockStatement(): string {
  return `select pg_advisory_xact_lock(${MIGRATION_LOCK_KEY.toString()});`;
}

// Refuses to run the steps on a database that is not at `from` (applied twice, or out of order).
function guardStatement(from: number, to: number): string {
  return `do $$ begin
  if (select coalesce(max(version), 0) from leasehold.migrations) <> ${from} then
    raise exception 'this script upgrades the leasehold schema from version ${from} to ${to}, but the database is at version %',
      (select coalesce(max(version), 0) from leasehold.migrations);
  end if;
end $$;`;
}

const isPrerelease = (version: number): boolean => version >= PRERELEASE_CONVERTIBLE && version < BASELINE_VERSION;

/** The statements that bring a schema at version `from` to `to`, one migration per entry. */
function migrationSteps(from: number, to: number): string[] {
  const steps = migrations()
    .filter((m) => m.version > from && m.version <= to)
    .map(
      (m) =>
        `-- ${m.name}${m.breaking ? ' (breaking)' : ''}\n${m.version === BASELINE_VERSION ? 'set local check_function_bodies = off;\n' : ''}` +
        `${m.sql.trimEnd()}\n\n` +
        `insert into leasehold.migrations (version, name, breaking, checksum) values (${m.version}, '${m.name}', ${m.breaking}, '${m.checksum}');`,
    );
  if (!isPrerelease(from)) return steps;
  const [setAside, copy] = sqlFiles('prerelease', /^\d_[a-z_]+\.sql$/).map(({ sql }) => sql.trimEnd());
  return [setAside!, BOOTSTRAP, steps[0]!, copy!, ...steps.slice(1)];
}

/**
 * The complete SQL that brings a database at schema version `from` (0: no leasehold) to `to`:
 * the schema, its objects, the version rows and the grants. Apply it in one transaction, as the
 * role that is to own the schema. sql/install/leasehold--N.sql is installScript(0, N).
 */
export function installScript(from = 0, to = latestVersion()): string {
  const fromOk = from === 0 || isPrerelease(from) || (from >= BASELINE_VERSION && from < to);
  if (!Number.isInteger(from) || !Number.isInteger(to) || !fromOk || to < BASELINE_VERSION || to > latestVersion()) {
    throw new RangeError(
      `installScript needs from = 0, a pre-release version ${PRERELEASE_CONVERTIBLE}-${BASELINE_VERSION - 1}, or ${BASELINE_VERSION} <= from < to <= ${latestVersion()} (got ${from}, ${to}).`,
    );
  }
  const header = [
    `-- leasehold schema ${from === 0 ? `version ${to}: complete install script` : `upgrade from ${isPrerelease(from) ? 'pre-release ' : ''}version ${from} to ${to}`}.`,
    `-- Generated from sql/${isPrerelease(from) ? 'prerelease/ and sql/' : ''}baseline/ and sql/migrations/ (leasehold migrate --dry-run prints it for a database).`,
    '-- Apply it in ONE transaction, as the role that is to own the schema (not a superuser if you can):',
    '--   psql --single-transaction -v ON_ERROR_STOP=1 -f this-file.sql',
    '-- or as one migration of Flyway, Liquibase, Alembic (op.execute) or Django (RunSQL).',
    '-- Afterwards grant your application roles access: see docs/security.md (leasehold grant --print).',
  ].join('\n');
  return [header, lockStatement(), BOOTSTRAP, guardStatement(from, to), ...migrationSteps(from, to), SECURE].join('\n\n') + '\n';
}

function tooNew(databaseVersion: number): SchemaVersionError {
  const library = latestVersion();
  return new SchemaVersionError(
    databaseVersion,
    library,
    `The database's leasehold schema is at version ${databaseVersion}, newer than this library understands (${library}), ` +
      'and a migration after this library\'s version changed the SQL contract (breaking). ' +
      'Another service has upgraded leasehold: upgrade this one to the same or a later version of the package. ' +
      'Nothing was changed.',
  );
}

function unversioned(): SchemaVersionError {
  return new SchemaVersionError(
    0,
    latestVersion(),
    'Schema leasehold has tables but records no version (leasehold.migrations is missing): it was installed by hand from ' +
      `sql/baseline/*.sql. Install it with the complete script sql/install/leasehold--${latestVersion()}.sql ` +
      '(or `leasehold migrate`) into an empty schema instead: drop schema leasehold cascade, then apply it. Nothing was changed.',
    { reason: 'unversioned' },
  );
}

function tooOld(databaseVersion: number): SchemaVersionError {
  return new SchemaVersionError(
    databaseVersion,
    latestVersion(),
    `The database's leasehold schema was created by an early pre-release build (version ${databaseVersion}); this library ` +
      `converts pre-release schemas from version ${PRERELEASE_CONVERTIBLE} on, keeping their leases and history, but not this one. ` +
      'Leases are short-lived: stop the services that use it, then (as the schema owner) rename it aside to keep its history ' +
      '(`alter schema leasehold rename to leasehold_old`) or drop it (`drop schema leasehold cascade`), and run `leasehold migrate`. ' +
      'Nothing was changed.',
    { reason: 'unconvertible' },
  );
}

function edited(version: number, name: string): SchemaVersionError {
  return new SchemaVersionError(
    version,
    latestVersion(),
    `Migration ${name} (version ${version}) was applied to this database, but the library's copy of it differs from what ` +
      'was applied (its checksum changed): an applied migration must never be edited. Restore the released file, or ' +
      'use the package version that applied it. Nothing was changed.',
    { reason: 'edited' },
  );
}

// An applied migration that this library ships with other SQL (its checksum) is refused.
async function verifyChecksums(client: pg.ClientBase): Promise<void> {
  const { rows } = await client.query<{ version: number; name: string; checksum: string | null }>(
    `select version, name, checksum from leasehold.migrations where version >= ${BASELINE_VERSION} and checksum is not null`,
  );
  for (const row of rows) {
    const shipped = migrations().find((m) => m.version === row.version);
    if (shipped && shipped.checksum !== row.checksum) throw edited(row.version, row.name);
  }
}

interface Installed {
  version: number;
  /** Whether a migration newer than this library's latest is breaking (false when none is). */
  breakingSinceLibrary: boolean;
}

// The catalog is readable by every role; leasehold's own objects may not be (no USAGE yet), so
// look them up there instead of with to_regclass(), which fails without USAGE.
const CATALOG = `
  select n.oid is not null as schema,
         exists (select 1 from pg_proc p where p.pronamespace = n.oid and p.proname = 'schema_version') as versioned,
         exists (select 1 from pg_class c where c.relnamespace = n.oid and c.relname = 'migrations') as migrations,
         exists (select 1 from pg_class c where c.relnamespace = n.oid and c.relname = 'leases') as leases,
         current_user::text as role
    from (select 1) one left join pg_namespace n on n.nspname = 'leasehold'`;

async function installed(client: pg.ClientBase): Promise<Installed> {
  const { rows } = await client.query<{ schema: boolean; versioned: boolean; migrations: boolean; leases: boolean; role: string }>(CATALOG);
  const found = rows[0]!;
  if (!found.schema) return { version: 0, breakingSinceLibrary: false };
  if (!found.migrations) {
    if (found.leases) throw unversioned();
    return { version: 0, breakingSinceLibrary: false };
  }
  try {
    // versions before the privilege model (0005) have no schema_version(): read the table
    const { rows: v } = await client.query<{ version: number; breaking: boolean }>(
      found.versioned
        ? 'select leasehold.schema_version() as version, leasehold.breaking_since($1) as breaking'
        : `select coalesce(max(version), 0)::int as version, coalesce(bool_or(breaking) filter (where version > $1), false) as breaking
             from leasehold.migrations`,
      [latestVersion()],
    );
    const version = v[0]?.version ?? 0;
    if (version === 0 && found.leases) throw unversioned();
    if (version > 0 && version < PRERELEASE_CONVERTIBLE) throw tooOld(version);
    return { version, breakingSinceLibrary: v[0]?.breaking ?? false };
  } catch (error) {
    throw permissionDenied(error, found.role) ?? error;
  }
}

/** Reads the installed schema version (0 when leasehold was never installed). */
export async function schemaVersion(client: pg.ClientBase): Promise<number> {
  return (await installed(client)).version;
}

/**
 * Throws SchemaVersionError unless the installed schema is the library's version, or a newer one
 * whose later migrations are not breaking (a rolling deploy: some services upgraded already).
 */
export async function checkSchema(client: pg.ClientBase): Promise<number> {
  const { version, breakingSinceLibrary } = await installed(client);
  const library = latestVersion();
  if (version > library && breakingSinceLibrary) throw tooNew(version);
  if (version < library) {
    throw new SchemaVersionError(
      version,
      library,
      `The database's leasehold schema is at ${isPrerelease(version) ? 'pre-release ' : ''}version ${version}; this library needs ${library}. ` +
        'Upgrade it with migrate(pool), createLeasehold({ migrate: true }) or `leasehold migrate`, as the schema owner' +
        (isPrerelease(version) ? ' (leases, fences and history are kept).' : '.'),
    );
  }
  return version;
}

/**
 * Brings the schema up to the library's version. Safe to call from many processes at once:
 * the first takes the lock and migrates, the others wait and then find nothing to do. A schema
 * that is current (or newer and compatible) is only read: no CREATE privilege is needed.
 * Refuses (and changes nothing) when the database is newer and a newer migration is breaking.
 */
// Each migration statement, and the wait for another process's migration (the advisory lock),
// may take this long: generous, since a stuck migration is rare and a failed one costs a restart.
const MIGRATION_TIMEOUT_MS = 10 * 60_000;

export async function migrate(pool: pg.Pool): Promise<MigrationResult> {
  const current = await withClient(pool, installed);
  if (current.version >= latestVersion()) {
    if (current.version > latestVersion() && current.breakingSinceLibrary) throw tooNew(current.version);
    await withClient(pool, verifyChecksums).catch((error: unknown) => {
      // a role that may only use the schema cannot read leasehold.migrations: nothing to verify for it
      if ((error as { code?: unknown }).code !== '42501') throw error;
    });
    return { from: current.version, to: current.version, applied: [] };
  }
  return inTransaction(pool, 'the database', async (client) => {
    await client.query(lockStatement());
    try {
      await client.query(BOOTSTRAP);
      const { version: from, breakingSinceLibrary } = await installed(client);
      if (from > latestVersion() && breakingSinceLibrary) throw tooNew(from);
      if (from >= BASELINE_VERSION) await verifyChecksums(client);
      if (from >= latestVersion()) return { from, to: from, applied: [] };
      for (const step of migrationSteps(from, latestVersion())) await client.query(step);
      await client.query(SECURE);
      return { from, to: latestVersion(), applied: migrations().filter((m) => m.version > from).map((m) => m.version) };
    } catch (error) {
      if ((error as { code?: unknown }).code !== '42501') throw error;
      throw new SchemaVersionError(
        current.version,
        latestVersion(),
        `The database's leasehold schema is at version ${current.version}; this library needs ${latestVersion()}, and this ` +
          `database role may not create or change the schema (${(error as Error).message}). Run \`leasehold migrate\` as the ` +
          'schema owner (or apply the install script: `leasehold migrate --dry-run`), then start again. Nothing was changed.',
        { cause: error },
      );
    }
  }, MIGRATION_TIMEOUT_MS);
}

// A read of the installed version, with a timeout like every library statement. A role's
// statement_timeout (20 ms, say) cancels neither it nor the migration: the transaction sets its
// own (MIGRATION_TIMEOUT_MS) in its opening, which such a timeout may cancel and which is then
// sent again (src/db/role-timeout.ts).
function withClient<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  return inTransaction(pool, 'the database', fn, MIGRATION_TIMEOUT_MS);
}
