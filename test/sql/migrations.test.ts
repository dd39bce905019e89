// Schema migrations: concurrent starts, version checks, refusal of a newer schema.
import { describe, expect, it, onTestFinished } from 'vitest';
import pg from 'pg';
import { createLeasehold } from '../../src/index.js';
import { SchemaVersionError } from '../../src/errors.js';
import { latestVersion, migrate, migrations } from '../../src/schema.js';
import { silentLogger } from '../../src/observe/logger.js';
import { client, freshDatabase, rawPool } from '../support/db.js';

describe('migrations', () => {
  it('ships the baseline (version 28), then numbered files without gaps, each with its checksum', () => {
    expect(migrations()[0]).toMatchObject({ version: 28, name: 'baseline' });
    expect(migrations().map((m) => m.version)).toEqual(Array.from({ length: latestVersion() - 27 }, (_, i) => i + 28));
    for (const m of migrations()) expect(m.checksum).toMatch(/^[0-9a-f]{64}$/);
  });

  it('applies each migration once when eight clients start at the same moment', async () => {
    const url = await freshDatabase();
    // eight separate pools: eight clients starting at once
    const pools = Array.from({ length: 8 }, () => {
      const pool = new pg.Pool({ connectionString: url, max: 2 });
      pool.on('error', () => undefined);
      return pool;
    });
    onTestFinished(async () => {
      await Promise.all(pools.map((p) => p.end()));
    });
    const results = await Promise.all(pools.map((pool) => migrate(pool)));
    expect(results.filter((r) => r.applied.length > 0)).toHaveLength(1);
    expect(results.every((r) => r.to === latestVersion())).toBe(true);
    const { rows } = await pools[0]!.query('select version from leasehold.migrations order by version');
    expect(rows.map((r) => r.version)).toEqual(migrations().map((m) => m.version));
  });

  it('refuses a database whose schema is newer than the library, and changes nothing', async () => {
    const url = await freshDatabase();
    await (await client(url, { liveness: false })).close();
    const pool = rawPool(url, 1);
    await pool.query(`insert into leasehold.migrations (version, name, breaking) values (999, '0999_future', true)`);
    const error = await createLeasehold({ connectionString: url, logger: silentLogger() }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaVersionError);
    expect(error).toMatchObject({ code: 'SCHEMA_VERSION', databaseVersion: 999, libraryVersion: latestVersion() });
    expect((error as Error).message).toMatch(/version 999, newer than this library understands \(\d+\).*upgrade this one/);
    const check = await createLeasehold({ connectionString: url, migrate: false, logger: silentLogger() }).catch((e: unknown) => e);
    expect(check).toBeInstanceOf(SchemaVersionError);
    const { rows } = await pool.query('select max(version)::int as v from leasehold.migrations');
    expect(rows[0].v).toBe(999);
  });

  it('with migrate: false, asks for a migration instead of changing an empty database', async () => {
    const url = await freshDatabase();
    const error = await createLeasehold({ connectionString: url, migrate: false, logger: silentLogger() }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaVersionError);
    expect((error as Error).message).toMatch(/at version 0; this library needs \d+\. Upgrade it with migrate/);
    const probe = new pg.Client({ connectionString: url });
    await probe.connect();
    const { rows } = await probe.query(`select to_regnamespace('leasehold') as schema`);
    await probe.end();
    expect(rows[0].schema).toBeNull();
  });
});
