// Jobs defined as data, changed and removed while several worker processes run them, and
// pause/resume: checked against the runs table and fenced witness writes in the database.
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Leasehold } from '../../src/index.js';
import { client, freshDatabase, rawPool, waitFor } from '../support/db.js';
import { startFixture, type JsonLinesProcess } from '../support/processes.js';

const DATA_WORKER = fileURLToPath(new URL('../fixtures/data-worker.ts', import.meta.url));

let url: string;
let lh: Leasehold;
const children: JsonLinesProcess[] = [];

beforeAll(async () => {
  url = await freshDatabase();
  lh = await client(url, { liveness: false });
  await rawPool(url, 1).query('create table sched_witness (job text, slot timestamptz, fence bigint, worker text)');
});

afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill()));
});

async function workers(count: number, env: (i: number) => Record<string, string> = () => ({})): Promise<JsonLinesProcess[]> {
  const started = await Promise.all(Array.from({ length: count }, (_, i) => startFixture(url, { HOLDER: `w${i + 1}`, ...env(i) }, DATA_WORKER)));
  children.push(...started);
  return started;
}

async function stopAll(): Promise<void> {
  await Promise.all(children.map(async (c) => c.signal('SIGTERM')));
  await Promise.all(children.map((c) => c.exited));
}

const dbNow = async () => (await rawPool(url, 2).query<{ now: Date }>('select clock_timestamp() as now')).rows[0]!.now;

type Run = { job: string; slot: Date; fence: string; holder: string; started_at: Date; outcome: string; error: string | null };
const runs = async (prefix: string) =>
  (await rawPool(url, 2).query<Run>("select job, slot, fence, holder, started_at, outcome, error from leasehold.runs where job like $1 || '%' order by job, slot", [prefix])).rows;

/** No (job, slot) ran twice, and no fenced write was made twice for one. */
async function eachSlotOnce(prefix: string): Promise<void> {
  const { rows: twice } = await rawPool(url, 2).query(
    `select job, slot, count(*) from leasehold.runs where job like $1 || '%' group by job, slot having count(*) > 1
     union all
     select job, slot, count(*) from sched_witness where job like $1 || '%' group by job, slot having count(*) > 1`,
    [prefix],
  );
  expect(twice).toEqual([]);
}

describe('jobs defined as data', () => {
  it('are added, changed and removed while three workers run them: each slot once, changes within a tick', async () => {
    const define = (name: string, every: string) => lh.control.define({ name, handler: 'tenant', by: 'billing-api', every, payload: { write: true }, ttl: '5s' });
    for (let i = 0; i < 10; i++) await define(`dyn-${i}`, '1s');
    // runs 1.5 s of every second: running when it is removed, it must finish under its lease
    await lh.control.define({ name: 'dyn-long', handler: 'tenant', by: 'billing-api', every: '1s', payload: { write: true, durationMs: 1_500 }, ttl: '5s' });
    // code jobs next to data jobs; w3's code also has a job named dyn-9: code wins, w1 and w2
    // (which may have loaded dyn-9 as data) drop it at their next refresh
    const code = [{ name: 'dyn-code', every: '1s', write: true }];
    await workers(3, (i) => ({ CODE_JOBS: JSON.stringify(i === 2 ? [...code, { name: 'dyn-9', every: '1s', write: true }] : code) }));
    await sleep(2_000);
    // add five, change three to every 2s, remove three
    const addedAt = await dbNow();
    for (let i = 10; i < 15; i++) await define(`dyn-${i}`, '1s');
    for (let i = 0; i < 3; i++) await define(`dyn-${i}`, '2s');
    for (let i = 3; i < 6; i++) expect(await lh.control.remove(`dyn-${i}`, { by: 'billing-api' })).toBe(true);
    // removed while one of its runs is in progress (it runs 1.5 s of every 2 s under 'skip')
    const longRunning = await waitFor(async () => {
      const { rows } = await rawPool(url, 2).query<{ fence: string }>("select fence from leasehold.runs where job = 'dyn-long' and outcome = 'running'");
      return rows.length > 0 ? rows : undefined;
    }, 5_000);
    expect(await lh.control.remove('dyn-long', { by: 'billing-api' })).toBe(true);
    const removedAt = await dbNow();
    // the last slot claimed before the removal committed (the removal waits for a claim's row lock)
    const {
      rows: [atRemoval],
    } = await rawPool(url, 2).query<{ last_slot: Date }>("select last_slot from leasehold.leases where name = 'dyn-long'");
    await sleep(3_000);
    await stopAll();

    const all = await runs('dyn-');
    expect(all.filter((r) => r.job === 'dyn-code').length).toBeGreaterThanOrEqual(5);
    expect((await lh.control.get('dyn-9'))?.source).toBe('code');
    // after the takeover only the worker with the code job runs dyn-9
    const late9 = all.filter((r) => r.job === 'dyn-9' && r.started_at.getTime() > addedAt.getTime());
    expect(late9.length).toBeGreaterThan(0);
    expect(new Set(late9.map((r) => r.holder))).toEqual(new Set(['w3']));
    await eachSlotOnce('dyn-');
    // removed: nothing started later than one refresh after the removal (and the claim refuses)
    for (const run of all.filter((r) => ['dyn-3', 'dyn-4', 'dyn-5'].includes(r.job))) {
      expect(run.started_at.getTime()).toBeLessThan(removedAt.getTime() + 1_000);
    }
    // the run in progress at removal finished normally, its fenced write included
    expect(longRunning).toHaveLength(1);
    const { rows: longRun } = await rawPool(url, 2).query<{ outcome: string; w: string }>(
      "select r.outcome, (select count(*) from sched_witness w where w.job = r.job and w.fence = r.fence)::text as w from leasehold.runs r where r.job = 'dyn-long' and r.fence = $1",
      [longRunning[0]!.fence],
    );
    expect(longRun).toEqual([{ outcome: 'succeeded', w: '1' }]);
    // and no slot claimed after the removal: one claimed just before it may start just after it
    expect(all.filter((r) => r.job === 'dyn-long' && r.slot.getTime() > atRemoval!.last_slot.getTime())).toEqual([]);
    expect(all.filter((r) => r.job === 'dyn-long' && r.started_at.getTime() > removedAt.getTime()).length).toBeLessThanOrEqual(1);
    // added: each started within about a tick (refresh 200 ms + the next 1 s slot)
    for (let i = 10; i < 15; i++) {
      const first = all.find((r) => r.job === `dyn-${i}`);
      expect(first, `dyn-${i} ran`).toBeDefined();
      expect(first!.started_at.getTime() - addedAt.getTime()).toBeLessThan(2_000);
    }
    // changed to every 2s: after the change only even seconds
    for (let i = 0; i < 3; i++) {
      const after = all.filter((r) => r.job === `dyn-${i}` && r.slot.getTime() > removedAt.getTime() + 500);
      expect(after.length).toBeGreaterThan(0);
      for (const run of after) expect(run.slot.getTime() % 2_000).toBe(0);
    }
    // the handler saw the payload (a code job none); every run finished
    const lines = children.flatMap((c) => c.lines);
    expect(lines.some((l) => l.event === 'handler' && JSON.stringify(l.payload) === '{"write":true}')).toBe(true);
    expect(lines.some((l) => l.event === 'handler' && l.job === 'dyn-code' && l.payload === null)).toBe(true);
    // every run finished, but for slots handed back unrun, as documented: claimed just as the
    // workers were told to stop, or as dyn-9 went over to the code job
    const handedBack = /^(the worker was stopping|the job was removed from this worker while it was being claimed)$/;
    expect(all.filter((r) => r.outcome !== 'succeeded' && !(r.outcome === 'aborted' && handedBack.test(r.error ?? '')))).toEqual([]);
    // the witness agrees with the runs
    const { rows: witnessed } = await rawPool(url, 2).query<{ n: string }>("select count(*)::text as n from sched_witness where job like 'dyn-%'");
    expect(Number(witnessed[0]!.n)).toBe(all.filter((r) => r.outcome === 'succeeded').length);
  }, 30_000);
});

describe('pause and resume', () => {
  it('the database refuses a paused job to a worker that has not heard of the pause; stopRunning aborts the run and refuses its fenced write', async () => {
    await lh.control.define({ name: 'p-tick', handler: 'tenant', by: 'app', every: '1s', payload: { write: true } });
    await lh.control.define({ name: 'p-long', handler: 'tenant', by: 'app', every: '1s', ttl: '10s', payload: { durationMs: 30_000, write: true } });
    // refreshes once a minute: it never hears of the pause
    const [deaf] = await workers(1, () => ({ REFRESH: '60s' }));
    const started = await deaf!.waitFor((l) => l.event === 'handler' && l.job === 'p-long', 5_000);
    await deaf!.waitFor((l) => l.event === 'handler' && l.job === 'p-tick', 5_000);
    const pausedTick = await lh.control.pause('p-tick', { by: 'alice', reason: 'vendor outage' });
    expect(pausedTick).toEqual({ job: 'p-tick', alreadyPaused: false, stopped: null });
    const stopped = await lh.control.pause('p-long', { by: 'alice', stopRunning: true });
    expect(stopped.stopped).toEqual({ holder: 'w1', fence: Number(started.fence) });
    const pausedAt = await dbNow();
    await deaf!.waitFor((l) => l.event === 'handler-error' && l.job === 'p-long', 10_000);
    await sleep(2_500);
    await stopAll();
    const tick = await runs('p-tick');
    expect(tick.length).toBeGreaterThan(0);
    for (const run of tick) expect(run.started_at.getTime()).toBeLessThan(pausedAt.getTime());
    const long = await runs('p-long');
    expect(long).toHaveLength(1);
    expect(long[0]!.outcome).toBe('aborted');
    expect(long[0]!.error).toMatch(/paused by alice/);
    // the stopped run's fenced write was refused
    const { rows: w } = await rawPool(url, 2).query("select * from sched_witness where job = 'p-long'");
    expect(w).toEqual([]);
    const aborted = deaf!.lines.find((l) => l.event === 'handler-error' && l.job === 'p-long');
    expect(aborted?.aborted).toBe(true);
    // status shows who paused, when and why
    const { rows: status } = await rawPool(url, 2).query("select state, paused_by, pause_reason from leasehold.job_status where job = 'p-tick'");
    expect(status).toEqual([{ state: 'paused', paused_by: 'alice', pause_reason: 'vendor outage' }]);
  }, 30_000);

  it('resume applies the catch-up policy; slots it does not run are recorded missed as paused', async () => {
    await lh.control.define({ name: 'r-job', handler: 'tenant', by: 'app', every: '1s', catchUp: { all: 2 }, startingDeadline: '30s', payload: { write: true } });
    await workers(2);
    await sleep(1_500);
    await lh.control.pause('r-job', { by: 'bob', reason: 'maintenance' });
    const pausedAt = await dbNow();
    await sleep(3_500);
    const resumedAt = await dbNow();
    expect((await lh.control.resume('r-job', { by: 'bob' })).resumed).toBe(true);
    await sleep(3_000);
    const seen = children.map((c) => c.lines.filter((l) => (l as { job?: string }).job === 'r-job'));
    await stopAll();
    await eachSlotOnce('r-job');
    const all = await runs('r-job');
    // what the workers and the database saw, for the messages of the checks below
    const q = async (sql: string) => (await rawPool(url, 2).query(sql)).rows;
    const diagnosis = JSON.stringify({
      pausedAt,
      resumedAt,
      runs: all,
      skips: await q("select slot, holder, recorded_by from leasehold.skips where job = 'r-job'"),
      buffered: await q("select slot from leasehold.buffered where job = 'r-job'"),
      lease: await q("select fence, holder, token is not null as held, last_slot, released_at, suspended from leasehold.leases where name = 'r-job'"),
      seen,
    });
    // nothing of the job started while it was paused
    expect(all.filter((r) => r.slot.getTime() > pausedAt.getTime() && r.started_at.getTime() < resumedAt.getTime()), diagnosis).toEqual([]);
    // catch-up { all: 2 }, applied when the workers saw the resume (within a refresh, 1 s): the
    // two latest slots due by then ran after the resume
    const caughtUp = all.filter((r) => r.slot.getTime() > pausedAt.getTime() && r.slot.getTime() <= resumedAt.getTime() + 1_500);
    expect(caughtUp.length, diagnosis).toBeGreaterThanOrEqual(2);
    const { rows: allMissed } = await rawPool(url, 2).query<{ slot: Date; reason: string }>("select slot, reason from leasehold.missed where job = 'r-job'");
    // the slots of the pause; outside it, a tick late on a loaded machine records its gap as
    // missed for downtime, which is right there
    const missed = allMissed.filter((m) => m.slot.getTime() > pausedAt.getTime() && m.slot.getTime() <= resumedAt.getTime());
    expect(missed.length, diagnosis).toBeGreaterThanOrEqual(1);
    for (const m of missed) expect(m.reason, `${m.slot.toISOString()} ${JSON.stringify(allMissed)} ${diagnosis}`).toMatch(/^paused by bob .*\(maintenance\)$/);
    // every slot of the pause ran after the resume, is recorded missed as paused, or was skipped
    // (overlap 'skip': a peer's tick asked for it while a catch-up run held the lease), naming
    // the holder
    const ran = new Set(all.map((r) => r.slot.getTime()));
    const missedAt = new Set(missed.map((m) => m.slot.getTime()));
    const skips = await q("select slot, holder from leasehold.skips where job = 'r-job'");
    for (const skip of skips) expect(skip.holder, diagnosis).toMatch(/^w[12]$/);
    const skippedAt = new Set(skips.map((k) => (k.slot as Date).getTime()));
    for (let t = Math.floor(pausedAt.getTime() / 1_000) * 1_000 + 1_000; t <= resumedAt.getTime(); t += 1_000) {
      expect(ran.has(t) || missedAt.has(t) || skippedAt.has(t), `${new Date(t).toISOString()} ${diagnosis}`).toBe(true);
      expect([ran.has(t), missedAt.has(t), skippedAt.has(t)].filter(Boolean), `${new Date(t).toISOString()} once ${diagnosis}`).toHaveLength(1);
    }
    const { rows: actions } = await rawPool(url, 2).query("select action, actor from leasehold.actions where job = 'r-job' order by id");
    expect(actions).toEqual([
      { action: 'schedule-defined', actor: 'app' },
      { action: 'paused', actor: 'bob' },
      { action: 'resumed', actor: 'bob' },
    ]);
  }, 30_000);
});
