// The privilege model (docs/security.md), the roles' side: what a client, an operator and a
// reader can and cannot do, and a second client role attacking the first one's live lease.
// Real login roles: test/support/privileges.ts.
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { randomUUID } from 'node:crypto';
import { startDashboard } from '../../src/dashboard/server.js';
import { createLeasehold, startWorker } from '../../src/index.js';
import { PermissionDeniedError } from '../../src/errors.js';
import { createMetrics } from '../../src/monitor/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { cli } from '../support/cli.js';
import { waitFor } from '../support/db.js';
import { leaseholdAs, outcome, pool, ROLE, urlAs, usePrivilegeFixture } from '../support/privileges.js';

let url: string;
let owner: pg.Pool;
usePrivilegeFixture((fixture) => ({ url, owner } = fixture));

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
    expect((await attacker.query('select * from leasehold.renew_leases(($1, $2, $3))', [name, guess, '7 days'])).rows[0]).toMatchObject({ renewed: false, reason: 'taken-over' });
    expect((await attacker.query('select leasehold.release($1, $2) as r', [name, guess])).rows[0].r).toBe(false);
    expect(await outcome(attacker, 'select leasehold.assert_lease($1, $2, $3)', [name, guess, lease.fence])).toBe('LH003');
    expect((await attacker.query('select leasehold.holds_lease($1, $2, $3) as h', [name, guess, lease.fence])).rows[0].h).toBe(false);
    expect((await attacker.query('select * from leasehold.acquire($1, $2, $3)', [name, '30s', 'thief'])).rows[0]).toMatchObject({ acquired: false, reason: 'held' });
    // direct writes: set the fence back, make the lease unacquirable, plant a row, delete it
    expect(await outcome(attacker, 'update leasehold.leases set fence = 0 where name = $1', [name])).toBe('42501');
    expect(await outcome(attacker, `update leasehold.leases set expires_at = 'infinity' where name = $1`, [name])).toBe('42501');
    expect(await outcome(attacker, `insert into leasehold.leases (name, token, expires_at) values ('planted', gen_random_uuid(), 'infinity')`)).toBe('42501');
    expect(await outcome(attacker, 'delete from leasehold.leases where name = $1', [name])).toBe('42501');
    expect(await outcome(attacker, 'update leasehold.run_log set outcome = $1', ['failed'])).toBe('42501');
    // leasehold.runs is a view (schema 17): not writable by anyone
    expect(['42501', '55000']).toContain(await outcome(attacker, 'update leasehold.runs set outcome = $1', ['failed']));
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
      await outcome(attacker, `select * from leasehold.claim(array[$1], array[now() - interval '1 second'], array(select (extract(epoch from t) * 1000)::bigint from unnest(array[interval '100 years']) t), array['exclusive'], array[0], 'thief', null, true)`, [free]),
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
    await owner.query('select leasehold.start_run($1, $2, $3)', [job, held[0].token, held[0].fence]);
    await owner.query(`select * from leasehold.finish_runs(array[$1::text], array[$2::bigint], array[$3::uuid], array['failed'::text], array['boom'::text], array[1::int])`, [job, held[0].fence, held[0].token]);
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
      for (const path of ['api/jobs', 'api/history?hours=1', 'api/summary', 'api/trends?hours=1', `api/trends?job=${job}&hours=1`, '']) {
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
