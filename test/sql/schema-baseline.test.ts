// The 1.0 schema: one baseline (sql/baseline/), its checked-in dump, the conversion of a schema
// created by a pre-release build (kept: leases, fences, history, jobs, grants; refused with what
// to do: schemas older than 22), and the checksums that refuse an edited migration.
import { describe, expect, it } from 'vitest';
import { readFileSync, writeFileSync } from 'node:fs';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { createLeasehold } from '../../src/index.js';
import { SchemaVersionError } from '../../src/errors.js';
import { latestVersion, migrate } from '../../src/schema.js';
import { silentLogger } from '../../src/observe/logger.js';
import { cli } from '../support/cli.js';
import { freshDatabase, rawPool } from '../support/db.js';
import { dumpMajor, schemaDump } from '../support/schema-dump.js';

const DUMP = new URL('../../sql/schema-dump.txt', import.meta.url);
const prerelease = (version: number) => readFileSync(new URL(`../fixtures/prerelease/leasehold--${version}.sql`, import.meta.url), 'utf8');

async function applyScript(url: string, sql: string): Promise<void> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    await c.query(`begin; ${sql} commit;`);
  } finally {
    await c.end();
  }
}

async function freshDump(): Promise<string> {
  const url = await freshDatabase();
  await migrate(rawPool(url, 1));
  return schemaDump(rawPool(url, 1));
}

describe('the baseline schema', () => {
  it('a fresh install prints the checked-in dump sql/schema-dump.txt (LEASEHOLD_WRITE_SCHEMA_DUMP=1 rewrites it)', async () => {
    const dump = await freshDump();
    if (process.env.LEASEHOLD_WRITE_SCHEMA_DUMP === '1') writeFileSync(DUMP, dump);
    const shipped = readFileSync(DUMP, 'utf8');
    // view and function text is printed by the server: the file is compared on the major that wrote it
    if (dumpMajor(dump) === dumpMajor(shipped)) expect(dump).toBe(shipped);
    else expect(dump.split('\n').filter((l) => /^(r|v|S|c|access|constraint) /.test(l)))
      .toEqual(shipped.split('\n').filter((l) => /^(r|v|S|c|access|constraint) /.test(l)));
  });

  it('defines each function once in the install script', () => {
    const script = readFileSync(new URL(`../../sql/install/leasehold--${latestVersion()}.sql`, import.meta.url), 'utf8');
    const names = [...script.matchAll(/^create (?:or replace )?function leasehold\.([a-z_0-9]+)/gim)].map((m) => m[1]);
    expect(names.length).toBeGreaterThan(10);
    expect(names.filter((name, i) => names.indexOf(name) !== i)).toEqual([]);
  });
});

describe('a schema created by a pre-release build', () => {
  for (const version of [22, 27]) {
    it(`at version ${version} is converted to the baseline, keeping leases, fences, history, jobs and grants`, async () => {
      const url = await freshDatabase();
      await applyScript(url, prerelease(version));
      const owner = rawPool(url, 2);
      const role = `lh_pre_${randomUUID().slice(0, 8)}`;
      await owner.query(`create role ${role} login`);
      try {
        await owner.query(`select leasehold.grant_access($1, 'client')`, [role]);
        const held = (await owner.query(`select token, fence from leasehold.acquire(p_name => 'kept', p_ttl => '10 minutes', p_holder => 'old-build')`)).rows[0];
        await owner.query(`select leasehold.start_run('kept', $1, $2, now())`, [held.token, held.fence]);
        await owner.query(`select leasehold.record_skip('kept', 'another-replica', now())`);
        const released = (await owner.query(`select token, fence from leasehold.acquire(p_name => 'released', p_ttl => '1 minute', p_holder => 'old-build')`)).rows[0];
        await owner.query(`select leasehold.release('released', $1)`, [released.token]);
        await owner.query(`select leasehold.define_schedule(p_name => 'data-job', p_handler => 'export', p_by => 'ops', p_cron => '*/5 * * * *')`);
        const before = (await owner.query(`select (select count(*) from leasehold.run_log)::int as runs, (select count(*) from leasehold.skips)::int as skips,
                                                   (select revision from leasehold.jobs where name = 'data-job') as revision`)).rows[0];

        const dry = await cli(['migrate', '--dry-run'], { DATABASE_URL: url });
        expect(dry.code, dry.stderr).toBe(0);
        expect(dry.stdout).toMatch(new RegExp(`^-- leasehold schema upgrade from pre-release version ${version} to ${latestVersion()}\\.`));
        expect(await migrate(owner)).toEqual({ from: version, to: latestVersion(), applied: [latestVersion()] });

        expect(await schemaDump(owner)).toBe(await freshDump());
        expect((await owner.query(`select leasehold.holds_lease('kept', $1, $2) as held`, [held.token, held.fence])).rows[0].held).toBe(true);
        const after = (await owner.query(`select (select count(*) from leasehold.run_log)::int as runs, (select count(*) from leasehold.skips)::int as skips,
                                                  (select revision from leasehold.jobs where name = 'data-job') as revision`)).rows[0];
        expect(after).toEqual(before);
        // the fence goes on growing from the copied one; the released token stays dead
        const again = (await owner.query(`select acquired, fence from leasehold.acquire(p_name => 'released', p_ttl => '1 minute', p_holder => 'new-build')`)).rows[0];
        expect(again.acquired).toBe(true);
        expect(BigInt(again.fence)).toBeGreaterThan(BigInt(released.fence));
        expect((await owner.query(`select leasehold.holds_lease('released', $1, $2) as held`, [released.token, released.fence])).rows[0].held).toBe(false);
        // the role granted before the conversion keeps its level
        const viaSetRole = await owner.connect();
        try {
          await viaSetRole.query(`set role ${role}`);
          const got = (await viaSetRole.query(`select acquired from leasehold.acquire('by-app', '1 minute', 'app', null, null, null)`)).rows[0];
          expect(got.acquired).toBe(true);
        } finally {
          await viaSetRole.query('reset role');
          viaSetRole.release();
        }
        expect((await owner.query(`select to_regnamespace('leasehold_prerelease') as s`)).rows[0].s).toBeNull();
      } finally {
        await owner.query(`drop owned by ${role}`);
        await owner.query(`drop role ${role}`);
      }
    });
  }

  it('older than version 22 is refused with what to do, and nothing is changed', async () => {
    const url = await freshDatabase();
    await applyScript(url, prerelease(4));
    const error = await migrate(rawPool(url, 1)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaVersionError);
    expect((error as Error).message).toMatch(/early pre-release build \(version 4\).*drop schema leasehold cascade.*Nothing was changed/);
    const client = await createLeasehold({ connectionString: url, logger: silentLogger() }).catch((e: unknown) => e);
    expect(client).toBeInstanceOf(SchemaVersionError);
    const viaCli = await cli(['migrate'], { DATABASE_URL: url });
    expect(viaCli.code).toBe(78);
    expect(viaCli.stderr).toMatch(/early pre-release build \(version 4\)/);
    expect((await rawPool(url, 1).query('select max(version)::int as v from leasehold.migrations')).rows[0].v).toBe(4);
  });
});

describe('checksums', () => {
  it('an applied migration whose shipped SQL differs from what was applied is refused by name', async () => {
    const url = await freshDatabase();
    const owner = rawPool(url, 1);
    await migrate(owner);
    const { rows } = await owner.query(`select checksum from leasehold.migrations where version = $1`, [latestVersion()]);
    expect(rows[0].checksum).toMatch(/^[0-9a-f]{64}$/);
    await owner.query(`update leasehold.migrations set checksum = repeat('0', 64) where version = $1`, [latestVersion()]);
    const error = await migrate(owner).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SchemaVersionError);
    expect((error as Error).message).toMatch(/was applied to this database, but the library's copy of it differs.*never be edited/);
  });
});
