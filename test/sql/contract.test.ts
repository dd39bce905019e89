// The SQL contract's single-sourced rules (sql/baseline/1_leases.sql): the outcome list, claim()
// in any transaction context, a slot either run or recorded skipped (also in the narrow race
// where a peer's claim is in flight), custom plans for the batch functions, and start_run.
import { beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { RUN_OUTCOMES } from '../../src/job/run-outcomes.js';
import { client, connections, freshDatabase, waitFor } from '../support/db.js';

let url: string;
let conns: pg.Client[];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close(); // installs the schema
  conns = await connections(url, 4);
});

type ClaimRow = { job: string; slot: Date; claimed: boolean; reason: string; token: string | null; fence: string | null; skip_recorded: boolean };

/** claim() of one slot per job, exclusive (overlap 'skip'; bufferCap 1: 'buffer-one'). */
const claim = async (c: pg.Client, jobs: string[], slot: Date, holder: string, bufferCap = 0) =>
  (
    await c.query<ClaimRow>(
      `select job, slot, claimed, reason, token, fence, skip_recorded from leasehold.claim($1::text[], array_fill($2::timestamptz, array[cardinality($1::text[])]), array_fill((extract(epoch from interval '30 seconds'::interval) * 1000)::bigint, array[cardinality($1::text[])]), array_fill('exclusive'::text, array[cardinality($1::text[])]), array_fill($4::int, array[cardinality($1::text[])]), $3, null, true)
        order by job, claimed desc`,
      [jobs, slot, holder, bufferCap],
    )
  ).rows;

const register = (c: pg.Client, jobs: string[]) =>
  c.query(`select leasehold.register_jobs($1, array_fill('* * * * *'::text, array[$2::int]), array_fill(null::text, array[$2::int]),
             array_fill(60000::bigint, array[$2::int]), array_fill(30000::bigint, array[$2::int]), array_fill('skip'::text, array[$2::int]),
             array_fill('none'::text, array[$2::int]), 'test')`, [jobs, jobs.length]);

const finish = (c: pg.Client, row: ClaimRow) =>
  c.query(`select * from leasehold.finish_runs(array[$1::text], array[$2::bigint], array[$3::uuid], array['succeeded'::text], array[null::text], array[1::int])`, [row.job, row.fence, row.token]);

/** Slots in the past, one second apart, the same for every call of a test. */
const slots = () => {
  const base = Math.floor(Date.now() / 1000) * 1000 - 30_000;
  return (n: number) => new Date(base + n * 1000);
};

const history = async (c: pg.Client, job: string) => ({
  runs: (await c.query<{ slot: Date }>('select slot from leasehold.runs where job = $1 order by slot', [job])).rows.map((r) => r.slot.getTime()),
  skips: (await c.query<{ slot: Date }>('select slot from leasehold.skips where job = $1 order by slot', [job])).rows.map((r) => r.slot.getTime()),
});

describe('run outcomes', () => {
  it('are one list: the database\'s run_outcomes() is RUN_OUTCOMES, the runs table and the finish functions use it', async () => {
    const [c] = conns as [pg.Client];
    const { rows } = await c.query<{ list: string[] }>('select leasehold.run_outcomes() as list');
    expect(rows[0]!.list).toEqual([...RUN_OUTCOMES]);
    await expect(c.query(`insert into leasehold.run_log (job, slot, fence, holder, outcome) values ('x', now(), 1, 'h', 'exploded')`)).rejects.toMatchObject({
      code: '23514',
    });
    // every outcome of the list passes the table's check
    await c.query('begin');
    try {
      await c.query(`insert into leasehold.run_log (job, slot, fence, holder, outcome) select 'x', now(), f, 'h', o from unnest($1::text[]) with ordinality as u(o, f)`, [RUN_OUTCOMES]);
    } finally {
      await c.query('rollback');
    }
    for (const bad of ['running', 'exploded']) {
      await expect(c.query(`select * from leasehold.finish_runs(array['x'::text], array[1::bigint], array[null::uuid], array[$1::text], array[null::text], array[1::int])`, [bad])).rejects.toMatchObject({
        code: '22023',
        message: `outcome must be one of ${RUN_OUTCOMES.filter((o) => o !== 'running').join(', ')} (got ${bad})`,
      });
    }
  });
});

describe('the lease name rule', () => {
  it('holds for a row written by any path, and costs an update of the other columns no row lock', async () => {
    const [c] = conns as [pg.Client];
    await c.query('begin');
    try {
      // written directly (as the owner): the table's own check, check_name()'s rule
      for (const bad of ['', 'x'.repeat(201), 'pay\u200bments', 'invoice\u202egnp.exe', 'tab\there']) {
        await c.query('savepoint s');
        await expect(c.query('insert into leasehold.leases (name) values ($1)', [bad])).rejects.toMatchObject({ code: '23514', constraint: 'leases_name_valid' });
        await c.query('rollback to savepoint s');
      }
      await c.query(`insert into leasehold.leases (name) values ('name-rule')`);
      await expect(c.query(`update leasehold.leases set name = 'name\u200brule' where name = 'name-rule'`)).rejects.toMatchObject({ code: '23514' });
    } finally {
      await c.query('rollback');
    }
    // A row trigger BEFORE UPDATE locks every row an update changes before it changes it: one more
    // WAL record (54 bytes) for each release, renewal and finish, the rule was a trigger once.
    const { rows } = await c.query<{ name: string }>(
      `select tgname as name from pg_trigger where tgrelid = 'leasehold.leases'::regclass and not tgisinternal
          and (tgtype & 1) = 1 and (tgtype & 2) = 2 and (tgtype & 16) = 16`,
    );
    expect(rows).toEqual([]);
  });
});

describe('claim()', () => {
  it('works inside a savepoint after other writes: each job is reported once, claimed', async () => {
    const [c] = conns as [pg.Client];
    const t = slots();
    await register(c, ['sp-a', 'sp-b']);
    await c.query('begin');
    try {
      await c.query(`select leasehold.acquire('sp-other', '30 seconds', 'h')`); // this transaction has written already
      await c.query('savepoint s');
      const rows = await claim(c, ['sp-a', 'sp-b'], t(1), 'w');
      expect(rows.map((r) => [r.job, r.claimed, r.reason])).toEqual([
        ['sp-a', true, 'claimed'],
        ['sp-b', true, 'claimed'],
      ]);
      await c.query('release savepoint s');
    } finally {
      await c.query('commit');
    }
  });

  it('never runs a slot recorded as skipped: a later claim of it (late tick, retry, catch-up) is refused', async () => {
    // the bug the fault suite found (skipped-slot-ran; its reproduction lived in faults/repro/)
    const [c] = conns as [pg.Client];
    const t = slots();
    await register(c, ['report']);
    const [a] = await claim(c, ['report'], t(0), 'worker-a');
    const [b] = await claim(c, ['report'], t(1), 'worker-b');
    expect([a!.claimed, b!.claimed, b!.reason, b!.skip_recorded]).toEqual([true, false, 'held', true]);
    // another worker noticing the same slot: skipped already, recorded once (by B)
    const [again] = await claim(c, ['report'], t(1), 'worker-d');
    expect([again!.claimed, again!.reason, again!.skip_recorded]).toEqual([false, 'slot-skipped', false]);
    await finish(c, a!);
    const [late] = await claim(c, ['report'], t(1), 'worker-c');
    expect([late!.claimed, late!.reason]).toEqual([false, 'slot-skipped']);
    expect(await history(c, 'report')).toEqual({ runs: [t(0).getTime()], skips: [t(1).getTime()] });
  });

  it('records a skip once per slot under buffer-one too, and runs the buffered slot after the release', async () => {
    const [c] = conns as [pg.Client];
    const t = slots();
    await register(c, ['buffered']);
    const [a] = await claim(c, ['buffered'], t(0), 'worker-a', 1);
    const [b] = await claim(c, ['buffered'], t(1), 'worker-b', 1);
    const [d] = await claim(c, ['buffered'], t(1), 'worker-d', 1); // a second worker noticing it
    expect([b!.reason, b!.skip_recorded, d!.reason, d!.skip_recorded]).toEqual(['held', true, 'held', false]);
    const { rows } = await c.query<{ next_buffered_slot: Date }>(`select next_buffered_slot from leasehold.finish_runs(array[$1::text], array[$2::bigint], array[$3::uuid], array['succeeded'::text], array[null::text], array[1::int])`, [a!.job, a!.fence, a!.token]);
    expect(rows[0]!.next_buffered_slot.getTime()).toBe(t(1).getTime());
    const [next] = await claim(c, ['buffered'], t(1), 'worker-a', 1);
    expect([next!.claimed, next!.slot.getTime()]).toEqual([true, t(1).getTime()]);
    // the history names the skip 'buffered' with the fence it ran under (in flight, then ended)
    const skipRow = async () =>
      (await c.query<{ outcome: string; detail: string }>(`select outcome, detail from leasehold.run_history where job = 'buffered' and kind = 'skip'`)).rows;
    expect(await skipRow()).toEqual([{ outcome: 'buffered', detail: expect.stringContaining(`ran later (fence ${next!.fence})`) }]);
    await c.query(`select * from leasehold.finish_runs(array['buffered'], array[$1::bigint], array[$2::uuid], array['succeeded'], array[null::text], array[1])`, [next!.fence, next!.token]);
    expect(await skipRow()).toEqual([{ outcome: 'buffered', detail: expect.stringContaining(`ran later (fence ${next!.fence})`) }]);
  });

  it('a skip in flight keeps a claim of the same slot out: the holder\'s release waits for it, the claim after sees it', async () => {
    const [a, b, cc] = conns as [pg.Client, pg.Client, pg.Client];
    const t = slots();
    await register(a, ['race-1']);
    const [held] = await claim(a, ['race-1'], t(0), 'worker-a');
    const holderPid = (await a.query<{ pid: number }>('select pg_backend_pid() as pid')).rows[0]!.pid;
    let releasing: Promise<unknown> | undefined;
    await b.query('begin');
    try {
      const [skip] = await claim(b, ['race-1'], t(1), 'worker-b'); // B records the skip, not yet committed
      expect([skip!.reason, skip!.skip_recorded]).toEqual(['held', true]);
      releasing = finish(a, held!); // the holder's release waits for B's decision (its row lock)
      await waitFor(async () => {
        const { rows } = await cc.query<{ waiting: boolean }>(`select wait_event_type = 'Lock' as waiting from pg_stat_activity where pid = $1`, [holderPid]);
        return rows[0]?.waiting;
      });
    } finally {
      await b.query('commit');
    }
    await releasing;
    const [after] = await claim(cc, ['race-1'], t(1), 'worker-c'); // a late claim of slot 1, after the release
    expect([after!.claimed, after!.reason]).toEqual([false, 'slot-skipped']);
    expect(await history(a, 'race-1')).toEqual({ runs: [t(0).getTime()], skips: [t(1).getTime()] });
  });

  it('a claim in flight keeps a skip of the same slot out, even for a peer that still saw the lease held', async () => {
    const [a, b, cc] = conns as [pg.Client, pg.Client, pg.Client];
    const t = slots();
    await register(a, ['race-2']);
    const [held] = await claim(a, ['race-2'], t(0), 'worker-a');
    // B's view of the database is taken now, while A holds the lease: REPEATABLE READ stands for
    // a statement whose snapshot came before the holder's release committed
    await b.query('begin isolation level repeatable read');
    try {
      await b.query('select 1 from leasehold.schema_version()');
      await finish(a, held!);
      await cc.query('begin');
      try {
        const [run] = await claim(cc, ['race-2'], t(1), 'worker-c'); // C claims slot 1, not yet committed
        expect(run!.claimed).toBe(true);
        // B decides 'held' from its view, but records no skip: under READ COMMITTED the newest
        // version is locked by C (SKIP LOCKED: 'holder-committing'); under this REPEATABLE READ
        // stand-in the lock finds the row changed since the snapshot (serialization failure)
        const seen = await claim(b, ['race-2'], t(1), 'worker-b').then(
          ([row]) => `${row!.reason} skip_recorded=${row!.skip_recorded}`,
          (error: { code?: string }) => error.code,
        );
        expect(['holder-committing skip_recorded=false', '40001']).toContain(seen);
      } finally {
        await cc.query('commit');
      }
    } finally {
      await b.query('rollback');
    }
    expect(await history(a, 'race-2')).toEqual({ runs: [t(0).getTime(), t(1).getTime()], skips: [] });
  });
});

describe('the batch functions', () => {
  const BATCH = ['claim', 'finish_runs', 'register_jobs'];

  it('plan each call for its own arrays (plan_cache_mode = force_custom_plan) without JIT, next to the pinned search_path', async () => {
    const [c] = conns as [pg.Client];
    const { rows } = await c.query<{ proname: string; proconfig: string[] }>(
      `select proname, proconfig from pg_proc where pronamespace = 'leasehold'::regnamespace and proname = any ($1) order by proname`,
      [BATCH],
    );
    expect(rows.map((r) => r.proname)).toEqual([...BATCH].sort());
    for (const row of rows) {
      expect(row.proconfig, row.proname).toContain('plan_cache_mode=force_custom_plan');
      // the estimates for joins of unnest() are far too high: no JIT compilation for seconds
      expect(row.proconfig, row.proname).toContain('jit=off');
      expect(row.proconfig, row.proname).toContain('search_path=pg_catalog, leasehold, pg_temp');
    }
  });

  it('keep custom plans after the fifth call on a connection (auto_explain shows the arrays as constants), generic without the setting', async () => {
    const [, , , d] = conns as [pg.Client, pg.Client, pg.Client, pg.Client];
    try {
      await d.query(`load 'auto_explain'`);
    } catch {
      // an embedded server without contrib modules: the proconfig test above still holds
      return;
    }
    const plans: string[] = [];
    d.on('notice', (notice: { message?: string | undefined }) => {
      if (notice.message?.includes('update leasehold.run_log')) plans.push(notice.message);
    });
    // the session asks for generic plans outright; the function's own setting must win
    await d.query(`set auto_explain.log_min_duration = 0; set auto_explain.log_nested_statements = on; set auto_explain.log_verbose = on;
                   set plan_cache_mode = force_generic_plan; set client_min_messages = log`);
    const finishSeven = async () => {
      plans.length = 0;
      for (let i = 0; i < 7; i++) {
        await d.query(`select * from leasehold.finish_runs(array['plan-a', 'plan-b'], array[1, 2]::bigint[], array[null, null]::uuid[],
                         array['succeeded', 'failed'], array[null, 'x'], array[1, 1])`);
      }
      return plans.slice();
    };
    const custom = await finishSeven();
    expect(custom).toHaveLength(7);
    for (const plan of custom) expect(plan).toMatch(/Function Call: unnest\('\{plan-a,plan-b\}'::text\[\]\)/);
    // without the function's setting the session's applies: generic plans, parameters unbound
    const signature = 'leasehold.finish_runs(text[], bigint[], uuid[], text[], text[], integer[], double precision[])';
    await conns[0]!.query(`alter function ${signature} reset plan_cache_mode`);
    try {
      await d.query('discard plans');
      const generic = await finishSeven();
      expect(generic).toHaveLength(7);
      for (const plan of generic) expect(plan).toMatch(/Function Call: unnest\(\$1\), unnest\(\$2\)/);
    } finally {
      await conns[0]!.query(`alter function ${signature} set plan_cache_mode = force_custom_plan`);
      await d.query('set client_min_messages = notice; reset plan_cache_mode');
    }
  });
});

describe('a caught-up slot that was skipped', () => {
  it('does not block the job: later slots are claimed (a catch-up slot skipped behind a peer\'s run was waiting forever)', async () => {
    const [a, b] = conns as [pg.Client, pg.Client];
    const at = slots();
    await register(a, ['caught']);
    // a runs slot 1; catch-up { all: 2 } queued slots 2 and 3 (as after a resume or downtime)
    const [first] = await claim(a, ['caught'], at(1), 'holder-a');
    expect(first).toMatchObject({ claimed: true });
    await a.query(`select leasehold.enqueue_slots('caught', array[$1, $2]::timestamptz[])`, [at(2), at(3)]);
    // b's late tick asks for slot 3 while a's run holds the lease: slot 3 is skipped, for good
    const [late] = await claim(b, ['caught'], at(3), 'holder-b');
    expect(late).toMatchObject({ claimed: false, reason: 'held', skip_recorded: true });
    // a finishes and runs the next queued slot, 2; slot 3 stays skipped
    await finish(a, first!);
    const [second] = await claim(a, ['caught'], at(2), 'holder-a');
    expect(second).toMatchObject({ claimed: true, slot: at(2) });
    await finish(a, second!);
    // the next scheduled slot runs: the skipped queued slot 3 does not stand in its way
    const [next] = await claim(b, ['caught'], at(4), 'holder-b');
    expect(next).toMatchObject({ claimed: true, slot: at(4) });
    expect(await history(a, 'caught')).toEqual({ runs: [at(1), at(2), at(4)].map((d) => d.getTime()), skips: [at(3).getTime()] });
  });
});

describe('start_run', () => {
  it('records the run once per fence and makes the name an external job, leaving a scheduled job as it is', async () => {
    const [c] = conns as [pg.Client];
    const take = async (name: string) =>
      (await c.query<{ token: string; fence: string }>(`select token, fence from leasehold.acquire($1, '20 seconds', 'exec-host')`, [name])).rows[0]!;
    const ext = await take('ext-job');
    await c.query(`select leasehold.start_run('ext-job', $1, $2, null, 60000)`, [ext.token, ext.fence]);
    await c.query(`select leasehold.start_run('ext-job', $1, $2)`, [ext.token, ext.fence]);
    const job = (name: string) => c.query(`select schedule, interval_ms::int, ttl_ms::int, registered_by from leasehold.jobs where name = $1`, [name]);
    expect((await job('ext-job')).rows).toEqual([{ schedule: 'external', interval_ms: 60000, ttl_ms: 20000, registered_by: 'exec-host' }]);
    expect((await c.query(`select count(*)::int as n from leasehold.runs where job = 'ext-job'`)).rows[0].n).toBe(1);
    // a job a worker schedules keeps its definition
    await register(c, ['scheduled-job']);
    const scheduled = await take('scheduled-job');
    await c.query(`select leasehold.start_run('scheduled-job', $1, $2, null, 5000)`, [scheduled.token, scheduled.fence]);
    expect((await job('scheduled-job')).rows).toEqual([{ schedule: '* * * * *', interval_ms: 60000, ttl_ms: 30000, registered_by: 'test' }]);
    // an interval out of bounds, and a lease not held, record nothing
    const other = await take('ext-bad');
    await expect(c.query(`select leasehold.start_run('ext-bad', $1, $2, null, 0)`, [other.token, other.fence])).rejects.toMatchObject({ code: 'LH005' });
    await expect(c.query(`select leasehold.start_run('ext-bad', gen_random_uuid(), $1)`, [other.fence])).rejects.toMatchObject({ code: 'LH003' });
    expect((await job('ext-bad')).rows).toEqual([]);
  });
});
