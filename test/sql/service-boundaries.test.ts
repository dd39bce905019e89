// Services that share one database (docs/security.md, "Services in one database"): real login
// roles, two services at the client level, an operator, a reader and a role with nothing. With
// namespaces (leasehold grant ROLE --as client --namespace app1:) every act of one service on the
// other's names is refused with 42501; without them (the whole schema, one service per
// database) a job still belongs to the login role that registered or defined it: another
// client can neither change, remove nor run it, nor take its run-now and backfill requests.
// Every change is audited with the real login role. A mutant without the boundary check fails.
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { installMutantFunction } from '../support/service-boundaries.js';
import { installedDatabase, leaseholdAs, outcome, pool, ROLE, usePrivilegeFixture } from '../support/privileges.js';
import { PermissionDeniedError } from '../../src/errors.js';

let url: string;
let owner: pg.Pool;
usePrivilegeFixture((fixture) => ({ url, owner } = fixture));

const PAST = `now() - interval '1 second'`;
const claimOf = (job: string) =>
  `select claimed, reason from leasehold.claim(array['${job}'], array[${PAST}], array[30000::bigint], array['exclusive'], array[0], 'w', null, true)`;

/** Every act of the control surface and the lease protocol on `job` (a code job) and `data` (a data job). */
const acts = (job: string, data: string): Array<[string, string]> => [
  ['acquire', `select * from leasehold.acquire('${job}', '30 seconds', 'thief')`],
  ['record_skip', `select leasehold.record_skip('${job}', 'thief')`],
  ['register_jobs', `select * from leasehold.register_jobs(array['${job}'], array['0 0 1 1 *'], array[null::text], array[null::bigint], array[300::bigint], array['skip'], array['none'], 'forged')`],
  ['claim', claimOf(job)],
  ['enqueue_slots', `select leasehold.enqueue_slots('${job}', array[${PAST}])`],
  ['record_missed_slots', `select * from leasehold.record_missed_slots(array['${job}'], array[${PAST}], 'forged', 'thief')`],
  ['claim_requests', `select * from leasehold.claim_requests(array['${job}'], 'thief')`],
  ['define_schedule', `select * from leasehold.define_schedule(p_name => '${data}', p_handler => 'export', p_by => 'thief', p_every => '1 second', p_payload => '{"action":"delete-all"}')`],
  ['remove_schedule', `select leasehold.remove_schedule('${data}', 'thief')`],
];

/** Acts that need a live grant to succeed: across the boundary they are refused before anything is looked at. */
const grantActs = (job: string): Array<[string, string]> => [
  ['start_run', `select leasehold.start_run('${job}', gen_random_uuid(), 1)`],
  ['finish_runs', `select * from leasehold.finish_runs(array['${job}'], array[1::bigint], array[gen_random_uuid()], array['succeeded'], array[null::text], array[1])`],
  ['finish_held_run', `select * from leasehold.finish_held_run('${job}', 1, gen_random_uuid(), 'succeeded')`],
];

describe('with namespaces: two services in one database', () => {
  it('refuses every act of one service on the other\'s names (42501), allows each its own, and hides the other\'s schedules', async () => {
    const db = await installedDatabase();
    for (const [role, prefix] of [[ROLE.app1, 'app1:'], [ROLE.app2, 'app2:']] as const) {
      await db.owner.query(`select leasehold.grant_access($1, 'client', $2)`, [role, prefix]);
    }
    await db.owner.query(`select leasehold.grant_access($1, 'operator'), leasehold.grant_access($2, 'reader')`, [ROLE.operator, ROLE.reader]);
    const [app1, app2] = [pool(db.url, ROLE.app1), pool(db.url, ROLE.app2)];
    // each service's own acts work
    for (const [name, sql] of acts('app1:report', 'app1:data')) expect(await outcome(app1, sql), `app1 ${name}`).toBe('ok');
    for (const [name, sql] of acts('app2:report', 'app2:data')) expect(await outcome(app2, sql), `app2 ${name}`).toBe('ok');
    // and none across the boundary
    for (const [name, sql] of [...acts('app1:report', 'app1:data'), ...grantActs('app1:report')]) {
      expect(await outcome(app2, sql), `app2 ${name} on app1`).toBe('42501');
    }
    // a clock step app2 reports leaves app1's missed slots alone
    await db.owner.query(`insert into leasehold.missed (job, slot, reason, recorded_by) values ('app1:report', now() - interval '1 minute', 'test', 'w')`);
    const missedOfApp1 = async () => (await db.owner.query(`select count(*)::int as n from leasehold.missed where job = 'app1:report'`)).rows[0].n as number;
    const before = await missedOfApp1();
    await app2.query(`select leasehold.record_clock_step(now() - interval '1 hour', now(), 'app2:worker')`);
    expect(before).toBeGreaterThan(0);
    expect(await missedOfApp1()).toBe(before);
    const refused = await app2.query(`select * from leasehold.acquire('app1:report', '30 seconds', 'thief')`).catch((e: Error) => e);
    expect((refused as Error).message).toMatch(/may not act on "app1:report": it is bound to the namespace app2:/);
    // the TypeScript client: a typed error that says so, not a raw 42501
    const client = await leaseholdAs(db.url, ROLE.app2);
    const typed = await client.acquire('app1:report', { ttl: '30s' }).catch((e: unknown) => e);
    expect(typed).toBeInstanceOf(PermissionDeniedError);
    expect((typed as Error).message).toMatch(/may not act on "app1:report".*Services in one database/);
    // app2's schedule with app1's handler name never reaches app1's workers
    await app2.query(`select * from leasehold.define_schedule(p_name => 'app2:evil', p_handler => 'export', p_by => 'app2', p_every => '1 second')`);
    const seen = await app1.query<{ name: string }>(`select name from leasehold.schedule_changes(0, array['export'], 1000, true)`);
    expect(seen.rows.map((r) => r.name)).not.toContain('app2:evil');
    // the operator (whole schema) acts on both; the reader and a role with nothing act on neither
    const operator = pool(db.url, ROLE.operator);
    expect(await outcome(operator, `select * from leasehold.pause_job('app1:report', 'ops', 'vendor outage')`)).toBe('ok');
    expect(await outcome(operator, `select * from leasehold.pause_job('app2:report', 'ops', 'vendor outage')`)).toBe('ok');
    // the reader and a role with nothing: no act at all, on either side
    for (const role of [ROLE.reader, ROLE.bare]) {
      for (const [name, sql] of [...acts('app1:report', 'app1:data'), ...grantActs('app1:report'), ...acts('app2:x', 'app2:y')]) {
        expect(await outcome(pool(db.url, role), sql), `${role} ${name}`).toBe('42501');
      }
    }
  });

  it('a mutant without the namespace check lets one service take the other\'s lease (the test above would fail)', async () => {
    const db = await installedDatabase();
    await db.owner.query(`select leasehold.grant_access($1, 'client', 'app1:'), leasehold.grant_access($2, 'client', 'app2:')`, [ROLE.app1, ROLE.app2]);
    const app2 = pool(db.url, ROLE.app2);
    expect(await outcome(app2, `select * from leasehold.acquire('app1:report', '30 seconds', 'thief')`)).toBe('42501');
    await installMutantFunction(db.owner, 'check_namespace(text[])', 'begin end');
    expect(await outcome(app2, `select * from leasehold.acquire('app1:report', '30 seconds', 'thief')`)).toBe('ok');
  });
});

describe('without namespaces: a job belongs to the role that registered or defined it', () => {
  it('another client can neither change, remove nor run it, nor take its requests; the operator can act; all audited by login role', async () => {
    const [app1, app2, operator] = [pool(url, ROLE.app1), pool(url, ROLE.app2), pool(url, ROLE.operator)];
    await app1.query(`select * from leasehold.register_jobs(array['report'], array['* * * * *'], array[null::text], array[60000::bigint], array[30000::bigint], array['skip'], array['none'], 'app1-worker')`);
    await app1.query(`select * from leasehold.define_schedule(p_name => 'nightly-export', p_handler => 'export', p_by => 'app1', p_cron => '0 3 * * *')`);
    for (const [name, sql] of [
      ['register_jobs', `select * from leasehold.register_jobs(array['report'], array['0 0 1 1 *'], array[null::text], array[null::bigint], array[300::bigint], array['skip'], array['none'], 'app1')`],
      ['register_jobs (a timeout)', `select * from leasehold.register_jobs(array['report'], array['* * * * *'], array[null::text], array[60000::bigint], array[30000::bigint], array['skip'], array['none'], 'app1', array[300::bigint])`],
      ['remove_schedule', `select leasehold.remove_schedule('nightly-export', 'app2')`],
      ['define_schedule', `select * from leasehold.define_schedule(p_name => 'nightly-export', p_handler => 'export', p_by => 'app2', p_every => '1 second')`],
      ['claim', claimOf('report')],
      ['claim (a data job)', claimOf('nightly-export')],
      ['enqueue_slots', `select leasehold.enqueue_slots('report', array[${PAST}])`],
      ['record_skip', `select leasehold.record_skip('report', 'app2')`],
      ['record_missed_slots', `select * from leasehold.record_missed_slots(array['report'], array[${PAST}], 'forged', 'app2')`],
    ] as const) {
      expect(await outcome(app2, sql), name).toBe('42501');
    }
    const refused = await app2.query(claimOf('report')).catch((e: Error) => e);
    expect((refused as Error).message).toBe(`role "${ROLE.app2}" may not change job "report": it belongs to role "${ROLE.app1}"`);
    const definition = (await owner.query(`select schedule, ttl_ms, registered_by from leasehold.jobs where name = 'report'`)).rows[0];
    expect(definition).toEqual({ schedule: '* * * * *', ttl_ms: '30000', registered_by: 'app1-worker' });
    const touched = await owner.query(`select (select count(*) from leasehold.buffered where job = 'report')::int as queued,
      (select count(*) from leasehold.skips where job = 'report')::int as skips, (select last_slot from leasehold.leases where name = 'report') as last_slot`);
    expect(touched.rows[0]).toEqual({ queued: 0, skips: 0, last_slot: null });

    // a schedule app2 defines with app1's handler name is not app1's workers' business
    await app2.query(`select * from leasehold.define_schedule(p_name => 'app2-evil', p_handler => 'export', p_by => 'app2', p_every => '1 second', p_payload => '{"customer":"victim-42"}')`);
    const feed = await app1.query<{ name: string }>(`select name from leasehold.schedule_changes(0, array['export'])`);
    expect(feed.rows.map((r) => r.name)).toContain('nightly-export');
    expect(feed.rows.map((r) => r.name)).not.toContain('app2-evil');

    // the operator's run now is taken by app1's worker only
    await operator.query(`select * from leasehold.run_now('report', 'ops')`);
    expect((await app2.query(`select * from leasehold.claim_requests(array['report'], 'app2-worker')`)).rows).toEqual([]);
    const taken = await app1.query<{ claimed: boolean }>(`select claimed from leasehold.claim_requests(array['report'], 'app1-worker')`);
    expect(taken.rows.map((r) => r.claimed)).toEqual([true]);

    // a clock step app2 reports clears only missed slots of jobs it may act for
    await owner.query(`insert into leasehold.missed (job, slot, reason, recorded_by) values ('report', now() - interval '1 minute', 'test', 'w')`);
    await app2.query(`select leasehold.record_clock_step(now() - interval '1 hour', now(), 'app2-worker')`);
    expect((await owner.query(`select count(*)::int as n from leasehold.missed where job = 'report'`)).rows[0].n).toBe(1);
    await app1.query(`select leasehold.record_clock_step(now() - interval '1 hour', now(), 'app1-worker')`);
    expect((await owner.query(`select count(*)::int as n from leasehold.missed where job = 'report'`)).rows[0].n).toBe(0);

    // the audit names the login role of every change, whatever name the caller gave
    await app1.query(`select * from leasehold.register_jobs(array['report'], array['*/5 * * * *'], array[null::text], array[300000::bigint], array[30000::bigint], array['skip'], array['none'], 'anyone')`);
    await app1.query(`select * from leasehold.register_jobs(array['report'], array['*/5 * * * *'], array[null::text], array[300000::bigint], array[30000::bigint], array['skip'], array['none'], 'anyone', array[60000::bigint])`);
    await operator.query(`select * from leasehold.force_release('report')`); // no by: the login role is the actor
    const audit = await owner.query<{ action: string; db_role: string }>(
      `select action, db_role from leasehold.actions where job in ('report', 'nightly-export', 'app2-evil') order by id`,
    );
    expect(audit.rows).toEqual([
      { action: 'schedule-defined', db_role: ROLE.app1 },
      { action: 'schedule-defined', db_role: ROLE.app2 },
      { action: 'run-now', db_role: ROLE.operator },
      { action: 'request-claimed', db_role: ROLE.app1 },
      { action: 'job-changed', db_role: ROLE.app1 },
      { action: 'job-changed', db_role: ROLE.app1 },
      { action: 'force-released', db_role: ROLE.operator },
    ]);
    const steps = await owner.query(`select actor, db_role from leasehold.actions where action = 'clock-step' order by id`);
    expect(steps.rows).toEqual([{ actor: 'app2-worker', db_role: ROLE.app2 }]); // the second report widened no window
    const forced = await owner.query(`select actor from leasehold.actions where action = 'force-released' and job = 'report'`);
    expect(forced.rows).toEqual([{ actor: ROLE.operator }]);
  });

  it('a mutant without the job-owner check lets one service claim and rewrite the other\'s job (the test above would fail)', async () => {
    const db = await installedDatabase();
    const [app1, app2] = [pool(db.url, ROLE.app1), pool(db.url, ROLE.app2)];
    await db.owner.query(`select leasehold.grant_access($1, 'client'), leasehold.grant_access($2, 'client')`, [ROLE.app1, ROLE.app2]);
    await app1.query(`select * from leasehold.register_jobs(array['report'], array['* * * * *'], array[null::text], array[60000::bigint], array[30000::bigint], array['skip'], array['none'], 'app1')`);
    const rewrite = `select * from leasehold.register_jobs(array['report'], array['0 0 1 1 *'], array[null::text], array[null::bigint], array[300::bigint], array['skip'], array['none'], 'app1')`;
    expect(await outcome(app2, claimOf('report'))).toBe('42501');
    expect(await outcome(app2, rewrite)).toBe('42501');
    await installMutantFunction(db.owner, 'check_job_owner(text[])', 'begin end');
    expect(await outcome(app2, claimOf('report'))).toBe('ok');
    expect(await outcome(app2, rewrite)).toBe('ok');
  });

  it('a schedule is unhandled until a worker that may run it has its handler: another service\'s worker with that handler name does not count', async () => {
    const [app1, app2] = [pool(url, ROLE.app1), pool(url, ROLE.app2)];
    const defined = await app1.query<{ live_workers: number }>(`select live_workers from leasehold.define_schedule(p_name => 'billing-export', p_handler => 'ledger', p_by => 'app1', p_every => '1 minute')`);
    expect(defined.rows[0]?.live_workers).toBe(0);
    const unhandled = async (p: pg.Pool) => (await p.query<{ job: string }>(`select job from leasehold.unhandled_schedules()`)).rows.map((r) => r.job);
    // a live worker of app2 with a handler of that name: app1's schedule is still unhandled
    const app2Worker = await app2.connect();
    try {
      await app2Worker.query(`select leasehold.register_liveness(true, 'app2-worker', array['ledger'])`);
      expect(await unhandled(app1)).toContain('billing-export');
      expect(await unhandled(app2)).not.toContain('billing-export'); // not app2's to record
      const again = await app1.query<{ live_workers: number }>(`select live_workers from leasehold.define_schedule(p_name => 'billing-export', p_handler => 'ledger', p_by => 'app1', p_every => '1 minute')`);
      expect(again.rows[0]?.live_workers).toBe(0);
      // app1's own worker with the handler: handled
      const app1Worker = await app1.connect();
      try {
        await app1Worker.query(`select leasehold.register_liveness(true, 'app1-worker', array['ledger'])`);
        expect(await unhandled(app1)).not.toContain('billing-export');
        const counted = await app1.query<{ live_workers: number }>(`select live_workers from leasehold.define_schedule(p_name => 'billing-export', p_handler => 'ledger', p_by => 'app1', p_every => '1 minute')`);
        expect(counted.rows[0]?.live_workers).toBe(1);
      } finally {
        app1Worker.release(true);
      }
    } finally {
      app2Worker.release(true);
    }
  });

  it('a paused job runs no occurrence by any path: acquire with its slot is declined as paused', async () => {
    const app1 = pool(url, ROLE.app1);
    await app1.query(`select * from leasehold.register_jobs(array['paused-job'], array['* * * * *'], array[null::text], array[60000::bigint], array[30000::bigint], array['skip'], array['none'], 'app1')`);
    await pool(url, ROLE.operator).query(`select * from leasehold.pause_job('paused-job', 'ops', 'maintenance')`);
    const { rows } = await app1.query(`select acquired, reason from leasehold.acquire('paused-job', '30 seconds', 'app1', null, ${PAST})`);
    expect(rows[0]).toEqual({ acquired: false, reason: 'paused' });
    expect((await owner.query(`select last_slot from leasehold.leases where name = 'paused-job'`)).rows[0].last_slot).toBeNull();
    expect((await app1.query(claimOf('paused-job'))).rows[0]).toEqual({ claimed: false, reason: 'paused' });
  });
});
