// Shared fixture of the privilege tests (test/privileges-*.test.ts, docs/security.md): real
// login roles on one database (two client roles, one of which attacks the other's live lease,
// an operator, a reader, an unprivileged role that plants objects in schema public, an owner).
// Role names are cluster-wide, so they are unique per test file and dropped afterwards.
import { afterAll, beforeAll, inject } from 'vitest';
import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { createLeasehold, type Leasehold } from '../../src/index.js';
import { migrate } from '../../src/schema.js';
import { silentLogger } from '../../src/observe/logger.js';
import { createTestDatabase } from '../../src/testing.js';

export const PASSWORD = 'leasehold-test-pw';
const suffix = `${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
export const ROLE = {
  app1: `lh_app1_${suffix}`,
  app2: `lh_app2_${suffix}`,
  operator: `lh_op_${suffix}`,
  reader: `lh_read_${suffix}`,
  evil: `lh_evil_${suffix}`,
  bare: `lh_bare_${suffix}`,
  owner: `lh_owner_${suffix}`,
};

const databases: Array<{ url: string; drop(): Promise<void> }> = [];
const pools: pg.Pool[] = [];
const clients: Leasehold[] = [];



export function urlAs(base: string, role: string): string {
  const u = new URL(base);
  u.username = role;
  u.password = PASSWORD;
  return u.toString();
}

export function pool(base: string, role?: string): pg.Pool {
  const p = new pg.Pool({ connectionString: role ? urlAs(base, role) : base, max: 3 });
  p.on('error', () => undefined);
  pools.push(p);
  return p;
}

export async function leaseholdAs(base: string, role: string): Promise<Leasehold> {
  const lh = await createLeasehold({ connectionString: urlAs(base, role), logger: silentLogger() });
  clients.push(lh);
  return lh;
}

/** A fresh empty database, dropped after the file's tests. */
export async function emptyDatabase(): Promise<{ url: string }> {
  const db = await createTestDatabase(inject('serverUrl'), 'leasehold_priv');
  databases.push(db);
  return db;
}

/** A fresh database with the schema installed by the superuser, and its owner pool. */
export async function installedDatabase(): Promise<{ url: string; owner: pg.Pool }> {
  const db = await createTestDatabase(inject('serverUrl'), 'leasehold_priv');
  databases.push(db);
  const ownerPool = pool(db.url);
  await migrate(ownerPool);
  return { url: db.url, owner: ownerPool };
}

/** The SQLSTATE a statement fails with, or 'ok'. */
export async function outcome(p: pg.Pool | pg.ClientBase, text: string, values: unknown[] = []): Promise<string> {
  try {
    await p.query(text, values);
    return 'ok';
  } catch (error) {
    return (error as { code?: string }).code ?? String(error);
  }
}

/**
 * Functions of the schema that a role may call (a level other than owner), trigger functions and
 * the privilege functions that are not SECURITY DEFINER with exactly the pinned search_path, and
 * internal steps (level owner) that anyone but the owner may execute.
 */
export async function insecureFunctions(p: pg.Pool): Promise<string[]> {
  const { rows } = await p.query<{ name: string }>(
    `select p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' as name
       from pg_proc p left join leasehold.access a on a.object = p.proname
      where p.pronamespace = 'leasehold'::regnamespace
        and case when coalesce(a.level, 'entry') = 'owner' and p.prorettype <> 'trigger'::regtype
                      and p.proname not in ('secure_schema', 'grant_access', 'grant_statements', 'revoke_access')
                 then p.proacl is null or exists (select 1 from aclexplode(p.proacl) x where x.grantee <> p.proowner)
                 else not (p.prosecdef and 'search_path=pg_catalog, leasehold, pg_temp' = any (coalesce(p.proconfig, '{}')))
            end
      order by 1`,
  );
  return rows.map((r) => r.name);
}

/**
 * The CVE-2018-1058 class: an unprivileged role with CREATE on schema public plants an operator
 * float8 * numeric (the exact types of register_liveness's random() * 9.2e18, which the built-in
 * operators only match after a cast) and a format(text, bigint, text) (more specific than the
 * built-in variadic format, used by assert_lease's error detail). Then the superuser runs a
 * client: liveness, a lease, a refused fenced transaction. Returns who ran the planted code.
 */
export async function searchPathAttack(base: string, ownerPool: pg.Pool): Promise<string[]> {
  await ownerPool.query(`grant create on schema public to ${ROLE.evil}`);
  const evil = pool(base, ROLE.evil);
  await evil.query(`
    create table if not exists public.pwned (who text, via text);
    grant insert on public.pwned to public;
    create or replace function public.evil_mul(double precision, numeric) returns double precision
      language plpgsql as $$ begin insert into public.pwned values (current_user, '*'); return $1 * $2::double precision; end $$;
    create or replace function public.format(text, bigint, text) returns text
      language plpgsql as $$ begin insert into public.pwned values (current_user, 'format'); return 'x'; end $$;
    do $$ begin
      if not exists (select 1 from pg_operator where oprname = '*' and oprnamespace = 'public'::regnamespace) then
        create operator public.* (leftarg = double precision, rightarg = numeric, function = public.evil_mul);
      end if;
    end $$;`);
  const victim = await createLeasehold({ connectionString: base, logger: silentLogger() });
  try {
    const first = await victim.acquire(`sp-${randomUUID()}`, { ttl: '30s' });
    if (!first.acquired) throw new Error('could not acquire');
    const lease = first.lease;
    // move the fence on under the lease, so assert_lease formats its "fence is now" detail
    await ownerPool.query('select leasehold.force_release($1)', [lease.name]);
    await ownerPool.query(`select leasehold.acquire($1, '30s', 'someone else')`, [lease.name]);
    await lease.transaction(async () => undefined).catch(() => undefined);
  } finally {
    await victim.close();
  }
  const { rows } = await ownerPool.query<{ who: string; via: string }>('select who, via from public.pwned');
  return rows.map((r) => `${r.who} via ${r.via}`);
}

/**
 * Creates the roles and a database with the schema installed and the four levels granted before
 * the file's tests, hands its url and owner pool to `ready`, and drops everything afterwards.
 */
export function usePrivilegeFixture(ready: (fixture: { url: string; owner: pg.Pool }) => void): void {
  beforeAll(async () => {
    const admin = new pg.Client({ connectionString: inject('serverUrl') });
    await admin.connect();
    try {
      for (const role of Object.values(ROLE)) await admin.query(`create role ${role} login password '${PASSWORD}'`);
    } finally {
      await admin.end();
    }
    const { url, owner } = await installedDatabase();
    ready({ url, owner });
    await owner.query(`select leasehold.grant_access($1, 'client'), leasehold.grant_access($2, 'client'),
                              leasehold.grant_access($3, 'operator'), leasehold.grant_access($4, 'reader')`, [ROLE.app1, ROLE.app2, ROLE.operator, ROLE.reader]);
  }, 60_000);

  afterAll(async () => {
    await Promise.allSettled(clients.map((c) => c.close()));
    await Promise.allSettled(pools.map((p) => p.end()));
    for (const db of databases) await db.drop().catch(() => undefined);
    const admin = new pg.Client({ connectionString: inject('serverUrl') });
    await admin.connect();
    try {
      for (const role of Object.values(ROLE)) await admin.query(`drop role if exists ${role}`);
    } finally {
      await admin.end();
    }
  }, 60_000);

}
