// The privilege model (docs/security.md), the schema's side: every function SECURITY DEFINER
// with a pinned search_path, nothing for PUBLIC, three access levels documented exactly as the
// database grants them; search_path attacks, a dedicated owner, upgrades and drift, and mutants
// that show these checks can fail. Real login roles: test/support/privileges.ts.
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { inspect } from 'node:util';
import { LEVEL_OF } from '../../src/db/permissions.js';
import { createLeasehold } from '../../src/index.js';
import { latestVersion, migrate } from '../../src/schema.js';
import { silentLogger } from '../../src/observe/logger.js';
import { emptyDatabase, insecureFunctions, installedDatabase, leaseholdAs, outcome, pool, ROLE, searchPathAttack, urlAs, usePrivilegeFixture } from '../support/privileges.js';

let url: string;
let owner: pg.Pool;
usePrivilegeFixture((fixture) => ({ url, owner } = fixture));

describe('the schema', () => {
  it('makes every function SECURITY DEFINER with search_path pg_catalog, leasehold, pg_temp, executable by nobody by default', async () => {
    expect(await insecureFunctions(owner)).toEqual([]);
    const { rows: open } = await owner.query<{ name: string }>(
      `select p.proname as name from pg_proc p
        where p.pronamespace = 'leasehold'::regnamespace
          and (p.proacl is null or exists (select 1 from aclexplode(p.proacl) a where a.grantee = 0))`,
    );
    expect(open).toEqual([]);
    const { rows: tables } = await owner.query<{ name: string }>(
      `select c.relname as name from pg_class c
        where c.relnamespace = 'leasehold'::regnamespace and c.relkind in ('r', 'v', 'm', 'S')
          and (c.relacl is null or exists (select 1 from aclexplode(c.relacl) a where a.grantee = 0))`,
    );
    expect(tables).toEqual([]);
    const { rows: schema } = await owner.query<{ grantee: string }>(
      `select a.grantee::regrole::text as grantee from pg_namespace n, aclexplode(n.nspacl) a
        where n.nspname = 'leasehold' and a.privilege_type = 'CREATE' and a.grantee <> n.nspowner`,
    );
    expect(schema).toEqual([]);
  });

  it('puts every function and view in an access level, and the error messages agree with it', async () => {
    const { rows } = await owner.query<{ object: string; level: string | null }>(
      `select o.object, a.level from (
          select proname as object from pg_proc where pronamespace = 'leasehold'::regnamespace
          union select relname from pg_class where relnamespace = 'leasehold'::regnamespace and relkind in ('v', 'm')
        ) o left join leasehold.access a using (object) order by 1`,
    );
    expect(rows.filter((r) => r.level === null).map((r) => r.object)).toEqual([]);
    for (const { object, level } of rows) if (level !== 'owner') expect([object, LEVEL_OF[object] ?? 'client']).toEqual([object, level]);
    // A view's function calls are checked against the querying role, not the view's owner: every
    // function a view calls must be executable at the view's level.
    const { rows: calls } = await owner.query<{ call: string; ok: boolean | null }>(
      `select distinct v.relname || ' calls ' || p.proname as call, fa.level in ('reader', va.level) as ok
         from pg_class v
         join leasehold.access va on va.object = v.relname
         join pg_rewrite r on r.ev_class = v.oid
         join pg_depend d on d.classid = 'pg_rewrite'::regclass and d.objid = r.oid and d.refclassid = 'pg_proc'::regclass
         join pg_proc p on p.oid = d.refobjid and p.pronamespace = 'leasehold'::regnamespace
         left join leasehold.access fa on fa.object = p.proname
        where v.relnamespace = 'leasehold'::regnamespace and v.relkind in ('v', 'm')
        order by 1`,
    );
    expect(calls.filter((c) => c.ok !== true).map((c) => c.call)).toEqual([]);
    expect(calls.map((c) => c.call)).toContain('lease_status calls epoch_source');
  });

  it('lists in docs/security.md exactly the statements grant_statements() gives for each level', async () => {
    const statements = async (role: string, level: string) =>
      (await owner.query<{ s: string }>('select s from leasehold.grant_statements($1, $2) s', [role, level])).rows.map((r) => `${r.s};`);
    const reader = await statements('dashboards', 'reader');
    const only = async (role: string, level: string) => {
      const shared = new Set(await statements(role, 'reader'));
      return (await statements(role, level)).filter((s) => !shared.has(s));
    };
    const documented = readFileSync(new URL('../../docs/security.md', import.meta.url), 'utf8')
      .split('\n')
      .filter((line) => /^grant .* to (dashboards|billing_app|oncall);$/.test(line));
    expect(documented).toEqual([...reader, ...(await only('billing_app', 'client')), ...(await only('oncall', 'operator'))]);
  });

  it('gives in docs/sql-api.md the level each function of the contract needs', async () => {
    const page = readFileSync(new URL('../../docs/sql-api.md', import.meta.url), 'utf8');
    const documented = [...page.matchAll(/^\| ((?:`\w+`(?:, )?)+) \| `(reader|client|operator)`/gm)].flatMap((m) =>
      [...m[1]!.matchAll(/`(\w+)`/g)].map((n) => `${n[1]} ${m[2]}`),
    );
    expect(documented.length).toBeGreaterThan(10);
    const { rows } = await owner.query<{ object: string; level: string }>('select object, level from leasehold.access where object = any ($1)', [
      documented.map((d) => d.split(' ')[0]),
    ]);
    expect(documented.sort()).toEqual(rows.map((r) => `${r.object} ${r.level}`).sort());
  });

  it('keeps tokens out of every view and out of a logged Lease', async () => {
    const lh = await leaseholdAs(url, ROLE.app1);
    const got = await lh.acquire(`views-${randomUUID()}`, { ttl: '30s' });
    if (!got.acquired) throw new Error('not acquired');
    const { rows: columns } = await owner.query<{ view: string; type: string }>(
      `select c.relname as view, format_type(a.atttypid, a.atttypmod) as type from pg_class c join pg_attribute a on a.attrelid = c.oid
        where c.relnamespace = 'leasehold'::regnamespace and c.relkind = 'v' and a.attnum > 0 and a.atttypid = 'uuid'::regtype`,
    );
    expect(columns).toEqual([]);
    // a lease that ends up in a log line
    expect(JSON.stringify(got.lease)).not.toContain(got.lease.token);
    expect(inspect(got.lease, { depth: 5 })).not.toContain(got.lease.token);
    expect(JSON.parse(JSON.stringify(got.lease))).toMatchObject({ name: got.lease.name, fence: got.lease.fence, state: 'held' });
    const reader = pool(url, ROLE.reader);
    for (const view of ['lease_status', 'job_status', 'run_history']) {
      const { rows } = await reader.query(`select * from leasehold.${view}`);
      expect(JSON.stringify(rows)).not.toContain(got.lease.token);
    }
    await got.lease.release();
  });
});

describe('search_path attacks (CVE-2018-1058 class)', () => {
  it('an operator and a function planted in schema public never run inside the protocol', async () => {
    expect(await searchPathAttack(url, owner)).toEqual([]);
    const { rows } = await owner.query<{ s: boolean }>('select rolsuper as s from pg_roles where rolname = $1', [ROLE.evil]);
    expect(rows[0]?.s).toBe(false);
  });
});

describe('a dedicated owner role', () => {
  it('installs the schema without superuser rights, grants levels, and its clients work', async () => {
    const db = await emptyDatabase();
    const dbName = new URL(db.url).pathname.slice(1);
    const admin = pool(db.url);
    await admin.query(`grant create on database "${dbName}" to ${ROLE.owner}`);
    const ownerPool = pool(db.url, ROLE.owner);
    expect((await migrate(ownerPool)).to).toBe(latestVersion());
    expect((await admin.query(`select nspowner::regrole::text as o from pg_namespace where nspname = 'leasehold'`)).rows[0].o).toBe(ROLE.owner);
    await ownerPool.query(`select leasehold.grant_access($1, 'client')`, [ROLE.app1]);
    const lh = await leaseholdAs(db.url, ROLE.app1);
    const got = await lh.acquire(`owned-${randomUUID()}`, { ttl: '10s' });
    expect(got.acquired).toBe(true);
    if (got.acquired) {
      await got.lease.transaction(async () => undefined);
      expect(await got.lease.release()).toBe(true);
    }
    await lh.close();
    await admin.query(`drop owned by ${ROLE.owner} cascade`);
  });
});

describe('upgrades and drift', () => {
  it('a client role facing an older schema gets a typed error saying who must migrate, and changes nothing', async () => {
    const db = await installedDatabase();
    await db.owner.query(`select leasehold.grant_access($1, 'client')`, [ROLE.app2]);
    await db.owner.query('update leasehold.migrations set version = version - 1 where version = (select max(version) from leasehold.migrations)');
    const error = await createLeasehold({ connectionString: urlAs(db.url, ROLE.app2), logger: silentLogger() }).catch((e: unknown) => e);
    expect(error).toMatchObject({ code: 'SCHEMA_VERSION' });
    expect((error as Error).message).toMatch(/may not create or change the schema.*leasehold migrate.*as the schema owner/);
    // also when the role may create schemas in the database (it owns it, say): the schema is not its own
    const dbName = new URL(db.url).pathname.slice(1);
    await db.owner.query(`grant create on database "${dbName}" to ${ROLE.app2}`);
    const again = await createLeasehold({ connectionString: urlAs(db.url, ROLE.app2), logger: silentLogger() }).catch((e: unknown) => e);
    expect(again).toMatchObject({ code: 'SCHEMA_VERSION' });
    expect((again as Error).message).toMatch(/may not create or change the schema.*permission denied for schema leasehold/);
    expect((await db.owner.query('select max(version)::int as v from leasehold.migrations')).rows[0].v).toBe(latestVersion() - 1);
  });

  it('secure_schema() takes back CREATE on the schema from anyone but its owner, and restores lost grants', async () => {
    const db = await installedDatabase();
    await db.owner.query(`select leasehold.grant_access($1, 'client')`, [ROLE.app2]);
    await db.owner.query(`grant create on schema leasehold to ${ROLE.app2}; revoke execute on function leasehold.renew_leases(leasehold.lease_renewal[]) from ${ROLE.app2}`);
    const client = pool(db.url, ROLE.app2);
    expect(await outcome(client, `select * from leasehold.renew_leases(('x', gen_random_uuid(), '1s'))`)).toBe('42501');
    await db.owner.query('select leasehold.secure_schema()');
    expect(await outcome(client, 'create function leasehold.planted() returns int language sql as $$ select 1 $$')).toBe('42501');
    expect(await outcome(client, `select * from leasehold.renew_leases(('x', gen_random_uuid(), '1s'))`)).toBe('ok');
  });
});

describe('mutants: the checks above fail when a function loses its protection', () => {
  it('a function without its pinned search_path runs the planted operator, and the schema check names it', async () => {
    const db = await installedDatabase();
    await db.owner.query('alter function leasehold.register_liveness(boolean, text, text[]) reset search_path');
    expect(await insecureFunctions(db.owner)).toEqual(['register_liveness(p_worker boolean, p_holder text, p_handlers text[])']);
    expect((await searchPathAttack(db.url, db.owner)).some((entry) => entry.endsWith(' via *'))).toBe(true);
    await db.owner.query('select leasehold.secure_schema()');
    expect(await insecureFunctions(db.owner)).toEqual([]);
  });

  it('a function without SECURITY DEFINER is named by the schema check and fails for a client role', async () => {
    const db = await installedDatabase();
    await db.owner.query(`select leasehold.grant_access($1, 'client')`, [ROLE.app2]);
    const client = pool(db.url, ROLE.app2);
    const name = `m-${randomUUID()}`;
    expect(await outcome(client, `select * from leasehold.acquire($1, '30s', 'me')`, [name])).toBe('ok');
    await db.owner.query('alter function leasehold.renew_leases(leasehold.lease_renewal[]) security invoker');
    expect(await insecureFunctions(db.owner)).toEqual(['renew_leases(VARIADIC p_leases leasehold.lease_renewal[])']);
    // the invoker has no table privileges, so the documented grants no longer suffice
    expect(await outcome(client, `select * from leasehold.renew_leases(($1, $2, '30s'))`, [name, randomUUID()])).toBe('42501');
  });
});
