// The privilege model (docs/security.md): every function SECURITY DEFINER with a pinned
// search_path, nothing for PUBLIC, three access levels. Real login roles on one database: two
// client roles (one attacks the other's live lease), an operator, a reader, and an unprivileged
// role that plants objects in schema public. Role names are cluster-wide, so they are unique per
// run and dropped afterwards.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { inject } from 'vitest';
import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { inspect } from 'node:util';
import { startDashboard } from '../src/dashboard/server.js';
import { LEVEL_OF } from '../src/db/permissions.js';
import { createLeasehold, createMetrics, latestVersion, migrate, PermissionDeniedError, startWorker, type Leasehold } from '../src/index.js';
import { silentLogger } from '../src/observe/logger.js';
import { createTestDatabase } from '../src/testing.js';
import { cli } from './support/cli.js';
import { waitFor } from './support/db.js';

const PASSWORD = 'leasehold-test-pw';
const suffix = `${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
const ROLE = {
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
let url: string;
let owner: pg.Pool;

function urlAs(base: string, role: string): string {
  const u = new URL(base);
  u.username = role;
  u.password = PASSWORD;
  return u.toString();
}

function pool(base: string, role?: string): pg.Pool {
  const p = new pg.Pool({ connectionString: role ? urlAs(base, role) : base, max: 3 });
  p.on('error', () => undefined);
  pools.push(p);
  return p;
}

async function leaseholdAs(base: string, role: string): Promise<Leasehold> {
  const lh = await createLeasehold({ connectionString: urlAs(base, role), logger: silentLogger() });
  clients.push(lh);
  return lh;
}

/** A fresh database with the schema installed by the superuser, and its owner pool. */
async function installedDatabase(): Promise<{ url: string; owner: pg.Pool }> {
  const db = await createTestDatabase(inject('serverUrl'), 'leasehold_priv');
  databases.push(db);
  const ownerPool = pool(db.url);
  await migrate(ownerPool);
  return { url: db.url, owner: ownerPool };
}

/** The SQLSTATE a statement fails with, or 'ok'. */
async function outcome(p: pg.Pool | pg.ClientBase, text: string, values: unknown[] = []): Promise<string> {
  try {
    await p.query(text, values);
    return 'ok';
  } catch (error) {
    return (error as { code?: string }).code ?? String(error);
  }
}

/** Functions of the schema that are not SECURITY DEFINER with exactly the pinned search_path. */
async function insecureFunctions(p: pg.Pool): Promise<string[]> {
  const { rows } = await p.query<{ name: string }>(
    `select p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' as name
       from pg_proc p
      where p.pronamespace = 'leasehold'::regnamespace
        and not (p.prosecdef and 'search_path=pg_catalog, leasehold, pg_temp' = any (coalesce(p.proconfig, '{}')))
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
async function searchPathAttack(base: string, ownerPool: pg.Pool): Promise<string[]> {
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

beforeAll(async () => {
  const admin = new pg.Client({ connectionString: inject('serverUrl') });
  await admin.connect();
  try {
    for (const role of Object.values(ROLE)) await admin.query(`create role ${role} login password '${PASSWORD}'`);
  } finally {
    await admin.end();
  }
  ({ url, owner } = await installedDatabase());
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
    expect(calls.map((c) => c.call)).toContain('lease_status calls incarnation');
  });

  it('lists in docs/security.md exactly the statements grant_statements() gives for each level', async () => {
    const statements = async (role: string, level: string) =>
      (await owner.query<{ s: string }>('select s from leasehold.grant_statements($1, $2) s', [role, level])).rows.map((r) => `${r.s};`);
    const reader = await statements('dashboards', 'reader');
    const only = async (role: string, level: string) => {
      const shared = new Set(await statements(role, 'reader'));
      return (await statements(role, level)).filter((s) => !shared.has(s));
    };
    const documented = readFileSync(new URL('../docs/security.md', import.meta.url), 'utf8')
      .split('\n')
      .filter((line) => /^grant .* to (dashboards|billing_app|oncall);$/.test(line));
    expect(documented).toEqual([...reader, ...(await only('billing_app', 'client')), ...(await only('oncall', 'operator'))]);
  });

  it('gives in docs/sql-api.md the level each function of the contract needs', async () => {
    const page = readFileSync(new URL('../docs/sql-api.md', import.meta.url), 'utf8');
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

describe('a client role', () => {
  it('takes leases, fences writes, renews and releases with nothing but the client grant (createLeasehold migrates nothing)', async () => {
    await owner.query(`create table if not exists app1_data (v int, fence bigint); grant insert, select on app1_data to ${ROLE.app1}`);
    const lh = await leaseholdAs(url, ROLE.app1);
    const name = `own-${randomUUID()}`;
    const result = await lh.run(name, { ttl: '10s' }, async (ctx) => {
      await ctx.transaction(async (c) => c.query('insert into app1_data values (1, $1)', [ctx.fence]));
      await ctx.lease.renew();
      return 'done';
    });
    expect(result).toMatchObject({ ran: true, value: 'done' });
    expect((await owner.query('select count(*)::int as n from app1_data')).rows[0].n).toBe(1);
    expect((await lh.leases()).find((l) => l.name === name)?.state).toBe('free');
  });

  it('runs scheduled jobs with startWorker, and leaves history pruning to an operator', async () => {
    const name = `job-${randomUUID()}`;
    let ran = 0;
    const logged: Array<{ level: string; event: unknown }> = [];
    const log = (level: string) => (fields: object) => void logged.push({ level, event: (fields as { event?: unknown }).event });
    const worker = await startWorker({
      connectionString: urlAs(url, ROLE.app1),
      jobs: [{ name, every: '1s', ttl: '5s', handler: async () => void ran++ }],
      logger: { debug: log('debug'), info: log('info'), warn: log('warn'), error: log('error') },
      handleSignals: false,
      shutdownGrace: '2s',
    });
    try {
      await waitFor(async () => (await owner.query(`select count(*)::int as n from leasehold.runs where job = $1 and outcome = 'succeeded'`, [name])).rows[0].n >= 2, 15_000, 100);
    } finally {
      await worker.stop();
    }
    expect(ran).toBeGreaterThanOrEqual(2);
    expect(logged.filter((l) => String(l.event).startsWith('history:'))).toEqual([{ level: 'info', event: 'history:prune-skipped' }]);
    expect(logged.filter((l) => l.level === 'warn' || l.level === 'error')).toEqual([]);
  });

  it('runs `leasehold exec`, which hands the token to the command unless --no-token-env', async () => {
    const env = { DATABASE_URL: urlAs(url, ROLE.app1) };
    const name = `exec-${randomUUID()}`;
    const withToken = await cli(['exec', '--name', name, '--ttl', '10s', '--', 'sh', '-c', 'echo "token=${LEASEHOLD_TOKEN:-none} fence=$LEASEHOLD_FENCE"'], env);
    expect(withToken.code, withToken.stderr).toBe(0);
    expect(withToken.stdout).toMatch(/^token=[0-9a-f-]{36} fence=\d+$/m);
    const without = await cli(['exec', '--name', name, '--ttl', '10s', '--no-token-env', '--', 'sh', '-c', 'echo "token=${LEASEHOLD_TOKEN:-none} fence=$LEASEHOLD_FENCE"'], {
      ...env,
      LEASEHOLD_TOKEN: 'inherited',
    });
    expect(without.code, without.stderr).toBe(0);
    expect(without.stdout).toMatch(/^token=none fence=\d+$/m);
  });
});

describe('an attacking client role against another role\'s live lease', () => {
  it('cannot read the token, renew, release, fence, force-release, prune, write the table, or block the lease', async () => {
    const lh = await leaseholdAs(url, ROLE.app1);
    const name = `victim-${randomUUID()}`;
    const got = await lh.acquire(name, { ttl: '30s' });
    if (!got.acquired) throw new Error('not acquired');
    const { lease } = got;
    const attacker = pool(url, ROLE.app2);
    const guess = randomUUID();

    // reading the token
    expect(await outcome(attacker, 'select token from leasehold.leases where name = $1', [name])).toBe('42501');
    expect(await outcome(attacker, 'select * from leasehold.leases')).toBe('42501');
    // the protocol with a guessed token
    expect((await attacker.query('select * from leasehold.renew($1, $2, $3)', [name, guess, '7 days'])).rows[0]).toMatchObject({ renewed: false, reason: 'taken-over' });
    expect((await attacker.query('select leasehold.release($1, $2) as r', [name, guess])).rows[0].r).toBe(false);
    expect(await outcome(attacker, 'select leasehold.assert_lease($1, $2, $3)', [name, guess, lease.fence])).toBe('LH003');
    expect((await attacker.query('select leasehold.holds_lease($1, $2, $3) as h', [name, guess, lease.fence])).rows[0].h).toBe(false);
    expect((await attacker.query('select * from leasehold.acquire($1, $2, $3)', [name, '30s', 'thief'])).rows[0]).toMatchObject({ acquired: false, reason: 'held' });
    // direct writes: set the fence back, make the lease unacquirable, plant a row, delete it
    expect(await outcome(attacker, 'update leasehold.leases set fence = 0 where name = $1', [name])).toBe('42501');
    expect(await outcome(attacker, `update leasehold.leases set expires_at = 'infinity' where name = $1`, [name])).toBe('42501');
    expect(await outcome(attacker, `insert into leasehold.leases (name, token, expires_at) values ('planted', gen_random_uuid(), 'infinity')`)).toBe('42501');
    expect(await outcome(attacker, 'delete from leasehold.leases where name = $1', [name])).toBe('42501');
    expect(await outcome(attacker, 'update leasehold.runs set outcome = $1', ['failed'])).toBe('42501');
    // operator functions
    expect(await outcome(attacker, 'select * from leasehold.force_release($1)', [name])).toBe('42501');
    expect(await outcome(attacker, `select leasehold.prune_history('0 seconds')`)).toBe('42501');
    // owner functions: granting itself more, or re-securing the schema
    expect(await outcome(attacker, `select * from leasehold.grant_access($1, 'operator')`, [ROLE.app2])).toBe('42501');
    expect(await outcome(attacker, 'select leasehold.secure_schema()')).toBe('42501');
    // planting a function in the schema
    expect(await outcome(attacker, 'create function leasehold.now() returns timestamptz language sql as $$ select now() $$')).toBe('42501');
    // holding a free job for a century through the scheduler's claim instead of acquire
    const free = `free-${randomUUID()}`;
    await owner.query(`select leasehold.register_jobs(array[$1], array['1m'], array[null]::text[], array[60000::bigint], array[60000::bigint], array['skip'], array['latest'], 'owner')`, [free]);
    expect(
      await outcome(attacker, `select * from leasehold.claim_slots(array[$1], array[now() - interval '1 second'], array[interval '100 years'], array['exclusive'], array[0], 'thief')`, [free]),
    ).toBe('LH002');

    // nothing changed: the owner's lease is intact and works
    const { rows } = await owner.query('select token, fence, expires_at < now() + interval \'1 minute\' as short from leasehold.leases where name = $1', [name]);
    expect(rows[0]).toMatchObject({ token: lease.token, fence: String(lease.fence), short: true });
    await lease.renew();
    await lease.transaction(async () => undefined);
    expect(await lease.release()).toBe(true);
  });

  it('gets a typed error that names the grant to add', async () => {
    const lh = await leaseholdAs(url, ROLE.app2);
    const error = await lh.forceRelease('anything').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(PermissionDeniedError);
    expect(error).toMatchObject({ code: 'PERMISSION_DENIED', role: ROLE.app2, level: 'operator' });
    expect((error as Error).message).toContain(`leasehold grant ${ROLE.app2} --as operator`);
    const bare = await createLeasehold({ connectionString: urlAs(url, ROLE.bare), logger: silentLogger() }).catch((e: unknown) => e);
    expect(bare).toBeInstanceOf(PermissionDeniedError);
    expect((bare as Error).message).toMatch(new RegExp(`leasehold grant ${ROLE.bare} --as (client|reader)`));
    const status = await cli(['status'], { DATABASE_URL: urlAs(url, ROLE.bare) });
    expect(status.code).toBe(77);
    expect(status.stderr).toContain(`leasehold grant ${ROLE.bare} --as`);
  });
});

describe('the operator and reader roles', () => {
  it('operator: force-releases, prunes and reads history, but takes no lease', async () => {
    const lh = await leaseholdAs(url, ROLE.app1);
    const name = `forced-${randomUUID()}`;
    const got = await lh.acquire(name, { ttl: '30s' });
    if (!got.acquired) throw new Error('not acquired');
    const op = pool(url, ROLE.operator);
    expect((await op.query('select * from leasehold.force_release($1)', [name])).rows[0]).toMatchObject({ released: true });
    expect(await outcome(op, `select leasehold.prune_history('3650 days')`)).toBe('ok');
    expect(await outcome(op, 'select * from leasehold.job_status')).toBe('ok');
    expect(await outcome(op, `select * from leasehold.acquire('x', '1s', 'op')`)).toBe('42501');
    expect(await outcome(op, 'select token from leasehold.leases')).toBe('42501');
    const forced = await cli(['release', name, '--force', '--yes'], { DATABASE_URL: urlAs(url, ROLE.operator) });
    expect(forced.code, forced.stderr).toBe(0);
  });

  it('reader: status, runs and the dashboard work; no lease function does', async () => {
    const job = `hist-${randomUUID()}`;
    const { rows: held } = await owner.query(`select token, fence from leasehold.acquire($1, '10s', 'h')`, [job]);
    await owner.query(`select leasehold.register_external_job($1, null, 10000, 'h')`, [job]);
    await owner.query('select leasehold.start_run($1, $2, $3)', [job, held[0].token, held[0].fence]);
    await owner.query(`select * from leasehold.finish_run($1, $2, $3, 'failed', 'boom')`, [job, held[0].fence, held[0].token]);
    const env = { DATABASE_URL: urlAs(url, ROLE.reader) };
    const status = await cli(['status'], env);
    expect(status.code, status.stderr).toBe(0);
    expect(status.stdout).toContain(job);
    const runs = await cli(['runs', job], env);
    expect(runs.code, runs.stderr).toBe(0);
    expect(runs.stdout).toContain('boom');
    const readerPool = pool(url, ROLE.reader);
    const dashboard = await startDashboard({ pool: readerPool, port: 0 });
    try {
      for (const path of ['api/jobs', 'api/history?hours=1', '']) {
        const res = await fetch(`${dashboard.url}${path}`, { headers: { 'sec-fetch-site': 'same-origin', 'x-leasehold-dashboard': '1' } });
        expect([path, res.status]).toEqual([path, 200]);
      }
    } finally {
      await dashboard.close();
    }
    const metrics = createMetrics();
    metrics.observeDatabase(readerPool);
    expect(await metrics.metrics()).toContain(job);
    expect(await outcome(readerPool, `select * from leasehold.acquire('x', '1s', 'reader')`)).toBe('42501');
    expect(await outcome(readerPool, `select * from leasehold.force_release('x')`)).toBe('42501');
    expect(await outcome(readerPool, 'select * from leasehold.leases')).toBe('42501');
  });

  it('`leasehold grant` prints and applies the statements of a level, and revokes them', async () => {
    const env = { DATABASE_URL: url };
    const printed = await cli(['grant', ROLE.bare, '--as', 'reader', '--print'], env);
    expect(printed.code, printed.stderr).toBe(0);
    expect(printed.stdout).toContain(`grant usage on schema leasehold to ${ROLE.bare};`);
    expect(printed.stdout).toContain(`grant select on table leasehold.job_status to ${ROLE.bare};`);
    expect(printed.stdout).not.toContain('acquire');
    const bare = pool(url, ROLE.bare);
    expect(await outcome(bare, 'select * from leasehold.job_status')).toBe('42501');
    expect((await cli(['grant', ROLE.bare, '--as', 'client'], env)).code).toBe(0);
    expect(await outcome(bare, 'select leasehold.schema_version()')).toBe('ok');
    expect(await outcome(bare, `select * from leasehold.acquire($1, '1s', 'bare')`, [`g-${randomUUID()}`])).toBe('ok');
    expect(await outcome(bare, 'select * from leasehold.force_release($1)', ['x'])).toBe('42501');
    expect((await cli(['grant', ROLE.bare, '--as', 'client', '--revoke'], env)).code).toBe(0);
    expect(await outcome(bare, 'select leasehold.schema_version()')).toBe('42501');
    const wrong = await cli(['grant', ROLE.bare, '--as', 'admin'], env);
    expect(wrong.code).toBe(2);
    // a hostile role name stays one quoted identifier, and a missing role is named
    const hostile = 'Robert"; drop schema leasehold cascade; --';
    const quoted = await cli(['grant', hostile, '--as', 'reader', '--print'], env);
    expect(quoted.stdout.split('\n')[0]).toBe('grant usage on schema leasehold to "Robert""; drop schema leasehold cascade; --";');
    const missing = await cli(['grant', hostile, '--as', 'reader'], env);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain('does not exist');
    expect(await outcome(owner, 'select leasehold.schema_version()')).toBe('ok');
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
    const db = await createTestDatabase(inject('serverUrl'), 'leasehold_priv');
    databases.push(db);
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
    await db.owner.query('delete from leasehold.migrations where version = (select max(version) from leasehold.migrations)');
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
    await db.owner.query(`grant create on schema leasehold to ${ROLE.app2}; revoke execute on function leasehold.renew(text, uuid, interval) from ${ROLE.app2}`);
    const client = pool(db.url, ROLE.app2);
    expect(await outcome(client, `select * from leasehold.renew('x', gen_random_uuid(), '1s')`)).toBe('42501');
    await db.owner.query('select leasehold.secure_schema()');
    expect(await outcome(client, 'create function leasehold.planted() returns int language sql as $$ select 1 $$')).toBe('42501');
    expect(await outcome(client, `select * from leasehold.renew('x', gen_random_uuid(), '1s')`)).toBe('ok');
  });
});

describe('mutants: the checks above fail when a function loses its protection', () => {
  it('a function without its pinned search_path runs the planted operator, and the schema check names it', async () => {
    const db = await installedDatabase();
    await db.owner.query('alter function leasehold.register_liveness() reset search_path');
    expect(await insecureFunctions(db.owner)).toEqual(['register_liveness()']);
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
    await db.owner.query('alter function leasehold.renew(text, uuid, interval) security invoker');
    expect(await insecureFunctions(db.owner)).toEqual(['renew(p_name text, p_token uuid, p_ttl interval)']);
    // the invoker has no table privileges, so the documented grants no longer suffice
    expect(await outcome(client, `select * from leasehold.renew($1, $2, '30s')`, [name, randomUUID()])).toBe('42501');
  });
});
