// Schedules defined as data and pause/resume through the API and SQL: validation of hostile
// input (client and SQL), the claim refused on another connection, the code/data name rule,
// the change feed, and the privilege levels with real roles (client defines, operator pauses).
import { performance } from 'node:perf_hooks';
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { InvalidArgumentError, startWorker, type Leasehold } from '../../src/index.js';
import { PermissionDeniedError } from '../../src/errors.js';
import { silentLogger } from '../../src/observe/logger.js';
import { jobPage } from '../../src/monitor/queries.js';
import { cli } from '../support/cli.js';
import { client } from '../support/db.js';
import { leaseholdAs, outcome, pool, ROLE, urlAs, usePrivilegeFixture } from '../support/privileges.js';

let url: string;
let owner: pg.Pool;
usePrivilegeFixture((fixture) => ({ url, owner } = fixture));

const claimSql = `select job, claimed, reason from leasehold.claim(array[$1::text], array[now() - interval '1 second'], array[(extract(epoch from '30s'::interval) * 1000)::bigint], array['exclusive'::text], array[0::int], 'probe', null, true)`;

async function app(): Promise<Leasehold> {
  return leaseholdAs(url, ROLE.app1);
}

describe('control.define / remove / list / get', () => {
  it('stores a schedule as data, upserts it, lists it and removes it (a tombstone the feed returns)', async () => {
    const lh = await app();
    const first = await lh.control.define({ name: 'acme-sync', handler: 'sync-customer', by: 'billing-api', cron: '*/5 * * * *', timezone: 'Europe/Berlin', payload: { tenant: 'acme' }, timeout: '2m', jitter: '30s' });
    expect(first).toMatchObject({ name: 'acme-sync', created: true, changed: true });
    const same = await lh.control.define({ name: 'acme-sync', handler: 'sync-customer', by: 'billing-api', cron: '*/5 * * * *', timezone: 'Europe/Berlin', payload: { tenant: 'acme' }, timeout: '2m', jitter: '30s' });
    expect(same).toEqual({ name: 'acme-sync', revision: first.revision, created: false, changed: false, liveWorkers: 0 });
    const changed = await lh.control.define({ name: 'acme-sync', handler: 'sync-customer', by: 'billing-api', every: '10m', payload: { tenant: 'acme', full: true } });
    expect(changed.changed).toBe(true);
    expect(changed.revision).toBeGreaterThan(first.revision);
    const info = await lh.control.get('acme-sync');
    expect(info).toMatchObject({ source: 'data', handler: 'sync-customer', schedule: '10m', intervalMs: 600_000, payload: { tenant: 'acme', full: true }, timeoutMs: null, definedBy: 'billing-api', paused: null });
    expect((await lh.control.list({ source: 'data' })).map((s) => s.name)).toContain('acme-sync');
    expect(await lh.control.remove('acme-sync', { by: 'billing-api' })).toBe(true);
    expect(await lh.control.remove('acme-sync', { by: 'billing-api' })).toBe(false);
    expect(await lh.control.get('acme-sync')).toBeNull();
    const { rows } = await owner.query('select name, removed, revision from leasehold.schedule_changes($1, null) where name = $2', [changed.revision, 'acme-sync']);
    expect(rows).toEqual([{ name: 'acme-sync', removed: true, revision: expect.any(String) }]);
    const { rows: acts } = await owner.query("select action, actor, db_role from leasehold.actions where job = 'acme-sync' order by id");
    expect(acts.map((a: { action: string }) => a.action)).toEqual(['schedule-defined', 'schedule-changed', 'schedule-removed']);
    expect(acts[0]).toMatchObject({ actor: 'billing-api', db_role: ROLE.app1 });
    // removed: the claim is refused on any connection
    expect((await owner.query(claimSql, ['acme-sync'])).rows).toEqual([{ job: 'acme-sync', claimed: false, reason: 'removed' }]);
  });

  it('rejects hostile input in the client with typed errors, and in SQL for callers that bypass it', async () => {
    const lh = await app();
    const base = { name: 'h1', handler: 'h', by: 'app', cron: '* * * * *' };
    const bad: Array<[object, string]> = [
      [{ ...base, cron: '61 * * * *' }, 'cron'],
      [{ ...base, cron: '* * *' }, 'cron'],
      [{ ...base, timezone: 'Mars/Olympus' }, 'timezone'],
      [{ ...base, payload: { blob: 'x'.repeat(70_000) } }, 'payload'],
      [{ ...base, payload: () => 1 }, 'payload'],
      [{ ...base, name: 'evil\u202Egnp' }, 'lease name'],
      [{ ...base, by: 'a\nb' }, 'holder'],
      [{ ...base, handler: 'h\u0000' }, 'handler'],
      [{ ...base, overlap: 'sometimes' }, 'overlap'],
      [{ ...base, cronn: '* * * * *' }, 'cronn'],
      [{ ...base, timeout: '-5s' }, 'timeout'],
      [{ ...base, jitter: '2d' }, 'jitter'],
      [{ ...base, ttl: '10ms' }, 'ttl'],
    ];
    for (const [options, argument] of bad) {
      const error = await lh.control.define(options as never).catch((e: unknown) => e);
      expect(error, JSON.stringify(options).slice(0, 80)).toBeInstanceOf(InvalidArgumentError);
      // (defineJob's duration settings name the job in front: 'job "h1": ttl')
      expect((error as InvalidArgumentError).argument).toMatch(new RegExp(`(^|: )${argument}$`));
    }
    const p = pool(url, ROLE.app1);
    const sql = (args: string, values: unknown[] = []) => outcome(p, `select * from leasehold.define_schedule(${args})`, values);
    expect(await sql(`'s1', 'h', 'app', p_cron => 'rm -rf /; * * *'`)).toBe('LH005');
    expect(await sql(`'s1', 'h', 'app', p_cron => '* * * * *', p_every => '1 minute'`)).toBe('LH005');
    expect(await sql(`'s1', 'h', 'app', p_cron => '* * * * *', p_timezone => 'Nowhere/Land'`)).toBe('LH005');
    expect(await sql(`'s1', 'h', 'app', p_every => '10 milliseconds'`)).toBe('LH005');
    expect(await sql(`'s1', 'h', 'app', p_every => '1 minute', p_overlap => 'never'`)).toBe('LH005');
    expect(await sql(`'s1', 'h', 'app', p_every => '1 minute', p_catch_up => 'all:0'`)).toBe('LH005');
    expect(await sql(`'s1', 'h', 'app', p_every => '1 minute', p_payload => $1::jsonb`, [JSON.stringify({ x: 'y'.repeat(66_000) })])).toBe('LH005');
    expect(await sql(`'s1', 'h', 'app', p_every => '1 minute', p_payload => '"x"'::jsonb || $1::jsonb`, [JSON.stringify(Array(70_000).fill(1))])).toBe('LH005');
    expect(await sql(`'s1', 'h', 'app', p_every => '1 minute', p_timeout => '-1 second'`)).toBe('LH005');
    expect(await sql(`'s1', 'h', 'app', p_every => '1 minute', p_ttl => '1 year'`)).toBe('LH002');
    expect(await sql(`E's\\n1', 'h', 'app', p_every => '1 minute'`)).toBe('LH001');
    expect(await sql(`'s1', 'h', E'a\\u200bb', p_every => '1 minute'`)).toBe('LH004');
    expect(await sql(`'s1', '', 'app', p_every => '1 minute'`)).toBe('LH005');
    const { rows } = await owner.query("select count(*)::int as n from leasehold.jobs where name = 's1'");
    expect(rows[0].n).toBe(0);
  });

  it('keeps code and data names apart: a data schedule cannot take a code job\'s name; a code job takes a data job\'s over', async () => {
    const lh = await app();
    await owner.query(`select * from leasehold.register_jobs(array['code-job'], array['* * * * *'], array[null], array[60000], array[30000], array['skip'], array['latest'], 'w')`);
    const error = await lh.control.define({ name: 'code-job', handler: 'h', by: 'app', every: '1m' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as Error).message).toMatch(/defined in code/);
    expect(await lh.control.remove('code-job', { by: 'app' }).catch((e: unknown) => (e as InvalidArgumentError).argument)).toBe('name');
    await lh.control.define({ name: 'shared', handler: 'h', by: 'app', every: '1m' });
    await lh.control.remove('shared', { by: 'app' });
    await owner.query(`select * from leasehold.register_jobs(array['shared'], array['* * * * *'], array[null], array[60000], array[30000], array['skip'], array['latest'], 'w')`);
    expect(await lh.control.get('shared')).toMatchObject({ source: 'code', handler: null });
    // claimable again as a code job
    expect((await owner.query(claimSql, ['shared'])).rows[0]).toMatchObject({ claimed: true });
  });
});

describe('pause and resume', () => {
  it('a client may define but not pause (typed PermissionDeniedError); an operator pauses, and the claim is refused on another connection', async () => {
    const lh = await app();
    await lh.control.define({ name: 'pz', handler: 'h', by: 'app', every: '1m' });
    const denied = await lh.control.pause('pz', { by: 'app' }).catch((e: unknown) => e);
    expect(denied).toBeInstanceOf(PermissionDeniedError);
    expect(denied).toMatchObject({ level: 'operator', role: ROLE.app1 });
    const reader = pool(url, ROLE.reader);
    expect(await outcome(reader, `select * from leasehold.define_schedule('r1', 'h', 'x', p_every => '1 minute')`)).toBe('42501');
    const op = pool(url, ROLE.operator);
    expect(await outcome(op, `select * from leasehold.define_schedule('o1', 'h', 'x', p_every => '1 minute')`)).toBe('42501');
    expect(await outcome(op, `select * from leasehold.pause_job('pz', E'bad\\nby')`)).toBe('LH004');
    expect(await outcome(op, `select * from leasehold.pause_job('pz', 'alice', E'why\\u202e')`)).toBe('LH005');
    expect(await outcome(op, `select * from leasehold.pause_job('no-such-job', 'alice')`)).toBe('LH006');
    const { rows } = await op.query(`select * from leasehold.pause_job('pz', 'alice', 'incident 42')`);
    expect(rows[0]).toMatchObject({ paused: true, already_paused: false });
    // a client's claim on its own connection: refused, nothing recorded, last_slot unchanged
    const appPool = pool(url, ROLE.app1);
    expect((await appPool.query(claimSql, ['pz'])).rows).toEqual([{ job: 'pz', claimed: false, reason: 'paused' }]);
    const { rows: lease } = await owner.query("select last_slot from leasehold.leases where name = 'pz'");
    expect(lease[0].last_slot).toBeNull();
    expect((await op.query(`select * from leasehold.resume_job('pz', 'alice')`)).rows[0]).toMatchObject({ resumed: true, paused_by: 'alice' });
    expect((await appPool.query(claimSql, ['pz'])).rows[0]).toMatchObject({ claimed: true });
    const { rows: acts } = await owner.query("select action, actor, db_role from leasehold.actions where job = 'pz' and action in ('paused', 'resumed') order by id");
    expect(acts).toEqual([
      { action: 'paused', actor: 'alice', db_role: ROLE.operator },
      { action: 'resumed', actor: 'alice', db_role: ROLE.operator },
    ]);
  });

  it('a pause that races a claim: either the claim ran first (and the pause waited for it) or the claim is refused', async () => {
    const lh = await client(url);
    await lh.control.define({ name: 'race', handler: 'h', by: 'app', every: '1s' });
    const a = new pg.Client({ connectionString: url });
    await a.connect();
    try {
      // a claim holding the row lock: the pause waits for it
      await a.query('begin');
      const claimed = await a.query(claimSql, ['race']);
      expect(claimed.rows[0]).toMatchObject({ claimed: true });
      const pausing = lh.control.pause('race', { by: 'alice', stopRunning: true });
      await new Promise((resolve) => setTimeout(resolve, 300));
      await a.query('commit');
      const paused = await pausing;
      // it waited, then saw the claim's lease and stopped it
      expect(paused.stopped).toMatchObject({ holder: 'probe' });
      expect((await a.query(claimSql.replace("'1 second'", "'0 seconds'"), ['race'])).rows[0]).toMatchObject({ claimed: false, reason: 'paused' });
    } finally {
      await a.end();
    }
  });

  it('validates pause/resume options (unknown keys, missing by, long reasons)', async () => {
    const lh = await client(url);
    const cases: Array<[() => Promise<unknown>, string]> = [
      [() => lh.control.pause('x', { by: 'a', stopRuning: true } as never), 'stopRuning'],
      [() => lh.control.pause('x', {} as never), 'holder'],
      [() => lh.control.pause('x', { by: 'a', reason: 'r'.repeat(1_001) }), 'reason'],
      [() => lh.control.pause('x', { by: 'a', reason: 'a\u0007' }), 'reason'],
      [() => lh.control.resume('x\u200b', { by: 'a' }), 'lease name'],
      [() => lh.control.resume('x', undefined as never), 'by'],
      [() => lh.control.remove('x', { by: 'a', force: true } as never), 'force'],
    ];
    for (const [call, argument] of cases) {
      const error = await call().catch((e: unknown) => e);
      expect(error).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).toBe(argument);
    }
  });
});

describe('a worker with handlers', () => {
  it('loads 10,000 data jobs in a few paged queries and stays idle; unusable definitions are logged once and skipped', async () => {
    await owner.query(`
      select leasehold.define_schedule('bulk-' || i, 'bulk', 'seed', p_cron => (i % 60) || ' 3 * * *', p_timezone => 'Europe/Berlin', p_payload => jsonb_build_object('tenant', i))
        from generate_series(1, 10000) i`);
    // a psql caller stored a cron croner refuses (the SQL check is only a cheap sanity check)
    await owner.query(`select leasehold.define_schedule('bulk-bad', 'bulk', 'seed', p_cron => '99 99 * * *')`);
    const logged: string[] = [];
    const logger = { ...silentLogger(), error: (fields: object, message: string) => void logged.push(`${(fields as { job?: string }).job}: ${message}`) };
    const started = performance.now();
    const worker = await startWorker({ connectionString: url, logger, handleSignals: false, handlers: { bulk: async () => undefined } });
    const ms = performance.now() - started;
    try {
      expect(worker.jobs.length).toBe(10_000);
      expect(logged.filter((l) => l.startsWith('bulk-bad'))).toHaveLength(1);
      // (how fast is for the benchmarks; this prints it for the record)
      console.log(`[schedules] 10,000 data jobs: worker started in ${Math.round(ms)} ms`);
    } finally {
      await worker.stop();
    }
  }, 60_000);

  it('starts from a snapshot of its own data jobs and the paused jobs only, not every definition of the fleet', async () => {
    const define = (name: string, handler: string) => owner.query(`select leasehold.define_schedule($1, $2, 'seed', p_every => '1 hour', p_payload => '{"k": 1}')`, [name, handler]);
    await define('snap-a1', 'snap-a');
    await define('snap-a2', 'snap-a');
    await define('snap-b1', 'snap-b');
    await define('snap-b2', 'snap-b');
    await define('snap-a3', 'snap-a');
    await owner.query(`select leasehold.remove_schedule('snap-a3', 'seed')`);
    await owner.query(`select * from leasehold.pause_job('snap-b2', 'ops')`);
    const snapshot = async (after = 0, limit = 1000) =>
      (await owner.query<{ name: string; payload: unknown; paused_by: string | null; revision: string }>(
        "select name, payload, paused_by, revision from leasehold.schedule_changes($1, array['snap-a'], $2, true) where name like 'snap-%' order by revision",
        [after, limit],
      )).rows;
    const all = await snapshot();
    expect(all.map((r) => [r.name, r.payload, r.paused_by])).toEqual([
      ['snap-a1', { k: 1 }, null],
      ['snap-a2', { k: 1 }, null],
      ['snap-b2', null, 'ops'], // another handler's job, paused: its pause, without its payload
    ]);
    // paged by revision
    expect((await snapshot(Number(all[0]!.revision), 1000)).map((r) => r.name)).toEqual(['snap-a2', 'snap-b2']);
  });

  it('a definition stored from psql that the worker cannot parse is logged once and skipped at run time; fixed, it runs', async () => {
    const logged: string[] = [];
    const logger = { ...silentLogger(), error: (fields: object) => void logged.push(String((fields as { job?: string }).job)) };
    const ran: string[] = [];
    const worker = await startWorker({ connectionString: url, logger, handleSignals: false, scheduleRefresh: '100ms', handlers: { later: async (ctx) => void ran.push(ctx.job) } });
    try {
      // passes the SQL sanity check, but croner refuses it (no 31st of February)
      await owner.query(`select leasehold.define_schedule('later-bad', 'later', 'psql', p_cron => '* * 31 2 *')`);
      await new Promise((resolve) => setTimeout(resolve, 600));
      expect(logged.filter((job) => job === 'later-bad')).toHaveLength(1);
      expect(worker.jobs.map((j) => j.name)).not.toContain('later-bad');
      await owner.query(`select leasehold.define_schedule('later-bad', 'later', 'psql', p_every => '1 second')`);
      const deadline = Date.now() + 5_000;
      while (!ran.includes('later-bad') && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 100));
      expect(ran).toContain('later-bad');
      expect(logged.filter((job) => job === 'later-bad')).toHaveLength(1);
    } finally {
      await worker.stop();
    }
  }, 20_000);

  it('refuses startWorker without jobs or handlers, and handlers that are not functions', async () => {
    const base = { connectionString: urlAs(url, ROLE.app1), logger: silentLogger(), handleSignals: false };
    await expect(startWorker({ ...base })).rejects.toMatchObject({ argument: 'jobs' });
    await expect(startWorker({ ...base, handlers: { x: 'nope' } as never })).rejects.toMatchObject({ argument: 'handlers' });
    await expect(startWorker({ ...base, handlers: { 'a\nb': async () => undefined } })).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});

describe('the CLI', () => {
  it('schedule define/list/remove as a client; pause/resume as an operator (a client gets exit 77), with --json', async () => {
    const asApp = { DATABASE_URL: urlAs(url, ROLE.app1) };
    const asOp = { DATABASE_URL: urlAs(url, ROLE.operator) };
    const defined = await cli(['schedule', 'define', 'cli-job', '--handler', 'h', '--by', 'ops-script', '--every', '5m', '--payload', '{"tenant":7}', '--json'], asApp);
    expect(defined.code, defined.stderr).toBe(0);
    expect(JSON.parse(defined.stdout)).toMatchObject({ name: 'cli-job', created: true, changed: true });
    const badCron = await cli(['schedule', 'define', 'cli-bad', '--handler', 'h', '--by', 'x', '--cron', '0 25 * * *'], asApp);
    expect(badCron.code).toBe(2);
    expect(badCron.stderr).toMatch(/invalid cron/);
    const denied = await cli(['pause', 'cli-job', '--by', 'app', '--json'], asApp);
    expect(denied.code).toBe(77);
    expect(JSON.parse(denied.stderr)).toMatchObject({ code: 'PERMISSION_DENIED' });
    const paused = await cli(['pause', 'cli-job', '--by', 'carol', '--reason', 'db maintenance', '--json'], asOp);
    expect(paused.code, paused.stderr).toBe(0);
    expect(JSON.parse(paused.stdout)).toEqual({ job: 'cli-job', alreadyPaused: false, stopped: null });
    const status = await cli(['status', '--job', 'cli-job', '--json'], asOp);
    expect(status.code, status.stderr).toBe(0);
    const job = (JSON.parse(status.stdout) as { jobs: Array<{ job: string; state: string; paused: unknown }> }).jobs.find((j) => j.job === 'cli-job');
    expect(job).toMatchObject({ state: 'paused', paused: { by: 'carol', reason: 'db maintenance', at: expect.any(String) } });
    const text = await cli(['status', '--job', 'cli-job'], asOp);
    expect(text.stdout).toMatch(/paused: cli-job by carol since .*: db maintenance/);
    const listed = await cli(['schedule', 'list', '--json'], asApp);
    expect(JSON.parse(listed.stdout)).toEqual(expect.arrayContaining([expect.objectContaining({ name: 'cli-job', payload: { tenant: 7 }, paused: expect.objectContaining({ by: 'carol' }) })]));
    // the table: one line per schedule under its header (the table's line breaks were escaped once)
    const listedText = await cli(['schedule', 'list'], asApp);
    expect(listedText.code, listedText.stderr).toBe(0);
    const tableLines = listedText.stdout.trimEnd().split('\n');
    expect(tableLines[0]).toMatch(/^NAME\s+SOURCE\s+HANDLER\s+SCHEDULE\s+PAUSED$/);
    expect(tableLines.find((line) => line.startsWith('cli-job '))).toMatch(/^cli-job\s+data\s+h\s+.*by carol since .*: db maintenance$/);
    expect(listedText.stdout).not.toContain('\\n');
    // the dashboard's page: state paused, who and why, and a filter for paused jobs
    const page = await jobPage(pool(url, ROLE.reader), { offset: 0, limit: 50, filter: 'paused' });
    expect(page.jobs.every((j) => j.paused !== null)).toBe(true);
    expect(page.jobs.map((j) => [j.job, j.state, j.paused?.by, j.paused?.reason])).toContainEqual(['cli-job', 'paused', 'carol', 'db maintenance']);
    const all = await jobPage(pool(url, ROLE.reader), { offset: 0, limit: 200, filter: 'all' });
    expect(all.jobs.some((j) => j.job === 'acme-sync')).toBe(false); // removed: not shown
    const unknown = await cli(['pause', 'no-such', '--by', 'carol'], asOp);
    expect(unknown.code).toBe(2);
    const resumed = await cli(['resume', 'cli-job', '--by', 'carol'], asOp);
    expect(resumed.code, resumed.stderr).toBe(0);
    expect(resumed.stdout).toMatch(/resumed "cli-job" \(paused by carol since/);
    const removed = await cli(['schedule', 'remove', 'cli-job', '--by', 'ops-script'], asApp);
    expect(removed.code).toBe(0);
    expect((await cli(['schedule', 'remove', 'cli-job', '--by', 'ops-script'], asApp)).code).toBe(1);
  }, 60_000);
});
