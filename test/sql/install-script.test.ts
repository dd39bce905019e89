// The install script (sql/install/leasehold--N.sql, `leasehold migrate --dry-run`): generated from
// the migrations, applied without Node it gives the same schema as migrate(), and the library and
// the CLI recognise a database installed that way. Also: schemas installed by hand without version
// rows, and newer schemas during a rolling deploy.
import { describe, expect, it } from 'vitest';
import { existsSync, readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import pg from 'pg';
import { createLeasehold } from '../../src/index.js';
import { SchemaVersionError } from '../../src/errors.js';
import { installScript, latestVersion, migrate, migrations } from '../../src/schema.js';
import { silentLogger } from '../../src/observe/logger.js';
import { cli } from '../support/cli.js';
import { client, freshDatabase, rawPool } from '../support/db.js';

const SHIPPED = new URL(`../../sql/install/leasehold--${latestVersion()}.sql`, import.meta.url);
const PSQL = ['/usr/bin/psql', '/usr/local/bin/psql'].find((p) => existsSync(p));
const noPsql = PSQL ? '' : ' [SKIPPED: no psql (Debian package postgresql-client)]';

/** Everything about the schema that an install could get wrong, one line per fact. */
async function catalog(url: string): Promise<string[]> {
  const { rows } = await rawPool(url, 2).query<{ fact: string }>(`
    with ns as (select oid, nspacl from pg_namespace where nspname = 'leasehold')
    select 'schema acl ' || coalesce((select nspacl::text from ns), '') as fact
    union all
    select format('function %s(%s) definer=%s config=%s acl=%s body=%s', p.proname, pg_get_function_identity_arguments(p.oid),
                  p.prosecdef, p.proconfig, p.proacl, md5(p.prosrc))
      from pg_proc p where p.pronamespace = (select oid from ns)
    union all
    select format('relation %s kind=%s acl=%s', c.relname, c.relkind, c.relacl) from pg_class c where c.relnamespace = (select oid from ns)
    union all
    select format('column %s.%s %s notnull=%s default=%s', c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
                  pg_get_expr(d.adbin, d.adrelid))
      from pg_class c join pg_attribute a on a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped
      left join pg_attrdef d on d.adrelid = c.oid and d.adnum = a.attnum
     where c.relnamespace = (select oid from ns)
    union all
    select format('constraint %s %s', conname, pg_get_constraintdef(oid)) from pg_constraint where connamespace = (select oid from ns)
    union all
    select 'index ' || indexdef from pg_indexes where schemaname = 'leasehold'
    union all
    select format('view %s %s', viewname, md5(definition)) from pg_views where schemaname = 'leasehold'
    union all
    select format('version %s %s %s', version, name, breaking) from leasehold.migrations
    union all
    select format('access %s %s', object, level) from leasehold.access
    order by 1`);
  return rows.map((r) => r.fact);
}

/** Applies SQL text the way a migration tool passes a script: one multi-statement execute, in a transaction. */
async function applyWithPg(url: string, sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query('begin');
    await c.query(sql);
    await c.query('commit');
  } catch (error) {
    await c.query('rollback').catch(() => undefined);
    throw error;
  } finally {
    await c.end();
  }
}

describe('the install script', () => {
  it('shipped in sql/install/ is exactly what the migrations produce (regenerate: npm run install-script)', () => {
    expect(readFileSync(SHIPPED, 'utf8')).toBe(installScript());
  });

  it('`leasehold migrate --dry-run` on an empty database prints it, and changes nothing', async () => {
    const url = await freshDatabase();
    const dry = await cli(['migrate', '--dry-run'], { DATABASE_URL: url });
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toBe(installScript());
    expect((await rawPool(url, 1).query(`select to_regnamespace('leasehold') as s`)).rows[0].s).toBeNull();
  });

  it('applied in one transaction gives the schema migrate() gives; the library and the CLI take it as current', async () => {
    const [byRunner, byScript] = [await freshDatabase(), await freshDatabase()];
    await migrate(rawPool(byRunner, 1));
    await applyWithPg(byScript, readFileSync(SHIPPED, 'utf8'));
    expect(await catalog(byScript)).toEqual(await catalog(byRunner));
    expect(await migrate(rawPool(byScript, 1))).toEqual({ from: latestVersion(), to: latestVersion(), applied: [] });
    const lh = await client(byScript, { liveness: false });
    const got = await lh.acquire('after-install', { ttl: '5s' });
    expect(got.acquired).toBe(true);
    const again = await cli(['migrate'], { DATABASE_URL: byScript });
    expect(again.stdout).toMatch(/up to date/);
  });

  it.skipIf(!PSQL)(`applies with psql --single-transaction, and a second application fails and changes nothing${noPsql}`, async () => {
    const [byRunner, byPsql] = [await freshDatabase(), await freshDatabase()];
    await migrate(rawPool(byRunner, 1));
    const psql = (url: string) =>
      spawnSync(PSQL!, ['--no-psqlrc', '-q', '--single-transaction', '-v', 'ON_ERROR_STOP=1', '-d', url, '-f', SHIPPED.pathname], { encoding: 'utf8' });
    const first = psql(byPsql);
    expect(first.status, first.stderr).toBe(0);
    expect(await catalog(byPsql)).toEqual(await catalog(byRunner));
    const second = psql(byPsql);
    expect(second.status).not.toBe(0);
    expect(second.stderr).toMatch(/upgrades the leasehold schema from version 0 to \d+, but the database is at version \d+/);
    expect(await catalog(byPsql)).toEqual(await catalog(byRunner));
  });

  it('`--dry-run` on a pre-release schema prints the conversion, which brings it to the same schema', async () => {
    const [byRunner, old] = [await freshDatabase(), await freshDatabase()];
    await migrate(rawPool(byRunner, 1));
    const oldVersion = 27;
    await applyWithPg(old, readFileSync(new URL(`../fixtures/prerelease/leasehold--${oldVersion}.sql`, import.meta.url), 'utf8'));
    const dry = await cli(['migrate', '--dry-run'], { DATABASE_URL: old });
    expect(dry.code, dry.stderr).toBe(0);
    expect(dry.stdout).toMatch(new RegExp(`^-- leasehold schema upgrade from pre-release version ${oldVersion} to ${latestVersion()}\\.`));
    await applyWithPg(old, dry.stdout);
    expect(await catalog(old)).toEqual(await catalog(byRunner));
  });
});

describe('schemas the runner did not install', () => {
  it('a schema installed by hand from sql/*.sql, without version rows, is refused with a typed error (not 42P07)', async () => {
    const url = await freshDatabase();
    // (0005's schema_version() reads leasehold.migrations, which only the runner or the install script creates)
    await applyWithPg(url, ['set local check_function_bodies = off;', 'create schema leasehold;', ...migrations().map((m) => m.sql)].join('\n'));
    const error = await createLeasehold({ connectionString: url, logger: silentLogger() }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaVersionError);
    expect((error as Error).message).toMatch(/installed by hand.*sql\/install\/leasehold--\d+\.sql/);
    const viaCli = await cli(['migrate'], { DATABASE_URL: url });
    expect(viaCli.code).toBe(78);
    expect(viaCli.stderr).toMatch(/installed by hand/);
  });

  it('a newer schema is accepted while no newer migration is breaking (rolling deploys), refused once one is', async () => {
    const url = await freshDatabase();
    const owner = rawPool(url, 1);
    await migrate(owner);
    const next = latestVersion() + 1;
    await owner.query(`insert into leasehold.migrations (version, name, breaking) values ($1, 'future_compatible', false)`, [next]);
    expect(await migrate(owner)).toEqual({ from: next, to: next, applied: [] });
    await (await client(url, { liveness: false, migrate: false })).close();
    expect((await cli(['status'], { DATABASE_URL: url })).code).toBe(0);
    await owner.query(`insert into leasehold.migrations (version, name, breaking) values ($1, 'future_breaking', true)`, [next + 1]);
    const error = await createLeasehold({ connectionString: url, logger: silentLogger() }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaVersionError);
    expect(error).toMatchObject({ databaseVersion: next + 1, libraryVersion: latestVersion() });
    expect((error as Error).message).toMatch(/breaking/);
    expect((await cli(['status'], { DATABASE_URL: url })).code).toBe(78);
  });
});
