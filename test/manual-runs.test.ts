// Run now and backfill with several worker processes on one database (sql/0012_manual_runs.sql,
// src/worker/requests.ts, src/control/manual-runs.ts): the overlap policies while a scheduled run
// holds the lease, one run per request across the fleet, the scheduled slot untouched, backfill
// slots once each (two identical backfills at the same time) and in order, hostile input.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { InvalidArgumentError, type Leasehold, type RunRequest } from '../src/index.js';
import { client, freshDatabase, rawPool } from './support/db.js';
import { startFixture, type JsonLinesProcess, type Line } from './support/processes.js';

const REQUEST_WORKER = fileURLToPath(new URL('./fixtures/request-worker.ts', import.meta.url));

let url: string;
let lh: Leasehold;
const children: JsonLinesProcess[] = [];

const JOBS = [
  // held by its scheduled run for 2 of every 3 seconds
  { name: 'p-skip', every: '3s', ttl: '5s', overlap: 'skip', durationMs: 2_000 },
  { name: 'p-buffer-one', every: '3s', ttl: '5s', overlap: 'buffer-one', durationMs: 2_000 },
  { name: 'p-buffer-all', every: '3s', ttl: '5s', overlap: 'buffer-all', durationMs: 1_000 },
  { name: 'p-replace', every: '3s', ttl: '5s', overlap: 'replace', durationMs: 1_500, write: true, ignoreAbort: true },
  { name: 'p-allow', every: '3s', ttl: '5s', overlap: 'allow', durationMs: 2_000 },
  // short runs every second: run now must not take a scheduled slot's place
  { name: 'idle', every: '1s', ttl: '5s', overlap: 'buffer-one' },
  // slots an hour apart: a backfill over hours
  { name: 'bf', every: '1h', ttl: '5s', overlap: 'skip', durationMs: 300, catchUp: 'none' },
  { name: 'bf-allow', every: '1h', ttl: '5s', overlap: 'allow', durationMs: 300, catchUp: 'none' },
];

beforeAll(async () => {
  url = await freshDatabase();
  lh = await client(url, { liveness: false, poolSize: 3 });
  await rawPool(url, 2).query('create table req_witness (job text, slot timestamptz, fence bigint, trigger text, key text, worker text)');
  children.push(
    ...(await Promise.all([1, 2, 3].map((i) => startFixture(url, { JOBS: JSON.stringify(JOBS), HOLDER: `w${i}` }, REQUEST_WORKER)))),
  );
}, 30_000);

afterAll(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill()));
});

type Run = { job: string; slot: Date; fence: string; holder: string; started_at: Date; finished_at: Date | null; outcome: string; trigger: string; requested_by: string | null; request_id: string | null };
const runs = async (job: string) =>
  (await rawPool(url, 2).query<Run>('select *, request_id::text as request_id from leasehold.runs where job = $1 order by started_at', [job])).rows;

/** The next handler start of `job` by `trigger`, on any worker, after `after` (ms). */
function nextHandler(job: string, trigger: string, after: number, timeoutMs = 10_000): Promise<Line> {
  return Promise.race(children.map((c) => c.waitFor((l) => l.event === 'handler' && l.job === job && l.trigger === trigger && Number(l.at) > after, timeoutMs)));
}

function handlerLines(match: (l: Line) => boolean): Line[] {
  return children.flatMap((c) => c.lines.filter((l) => l.event === 'handler' && match(l)));
}

/** Waits for a scheduled run of `job` to start, then asks for a run now (or two) while it holds the lease. */
async function runNowWhileHeld(job: string, count = 1): Promise<{ scheduled: Line; ids: string[] }> {
  const scheduled = await nextHandler(job, 'schedule', Date.now());
  const ids: string[] = [];
  for (let i = 0; i < count; i++) ids.push(await lh.control.runNow(job, { by: `op-${i}` }));
  return { scheduled, ids };
}

const done = (id: string) => lh.control.waitForRequest(id, { timeout: '15s' });

describe('run now', () => {
  it('when idle: starts within a second on exactly one of three workers, with its own key, and the scheduled slots keep running', async () => {
    await nextHandler('idle', 'schedule', 0);
    const latencies: number[] = [];
    const requests: RunRequest[] = [];
    for (let i = 0; i < 5; i++) {
      const id = await lh.control.runNow('idle', { by: 'alice' });
      const request = await done(id);
      requests.push(request);
      latencies.push(request.startedAt!.getTime() - request.requestedAt.getTime());
      await sleep(150);
    }
    for (const request of requests) {
      expect(request.state).toBe('done');
      expect(request.outcome).toBe('succeeded');
      expect(request.kind).toBe('manual');
      expect(request.requestedBy).toBe('alice');
      const lines = handlerLines((l) => l.job === 'idle' && l.key === `idle@manual:${request.id}`);
      expect(lines).toHaveLength(1); // one handler call across the three workers
      expect(lines[0]!.trigger).toBe('manual');
    }
    expect(Math.max(...latencies)).toBeLessThan(1_000);
    console.log(`run now latency (request to claim, ms): ${latencies.join(', ')}`);
    await sleep(1_200); // the scheduled slot due after the last run now

    const history = await runs('idle');
    const manual = history.filter((r) => r.trigger === 'manual');
    expect(manual.map((r) => r.request_id).sort()).toEqual(requests.map((r) => r.id).sort());
    expect(manual.every((r) => r.requested_by === 'alice')).toBe(true);
    // every scheduled slot from the first to the last ran once: no run now took a slot's place
    const scheduled = history.filter((r) => r.trigger === 'schedule').map((r) => r.slot.getTime()).sort((a, b) => a - b);
    expect(new Set(scheduled).size).toBe(scheduled.length);
    for (let t = scheduled[0]!; t <= scheduled.at(-1)!; t += 1_000) expect(scheduled, new Date(t).toISOString()).toContain(t);
    expect(scheduled.length).toBeGreaterThanOrEqual(3);
    // the lease's last_slot is the newest scheduled slot, never a run now's moment
    const { rows } = await rawPool(url, 2).query<{ last_slot: Date }>(`select last_slot from leasehold.leases where name = 'idle'`);
    expect(rows[0]!.last_slot.getTime() % 1_000).toBe(0);
    // scheduled keys stay job@slot
    expect(handlerLines((l) => l.job === 'idle' && l.trigger === 'schedule').every((l) => l.key === `idle@${String(l.slot)}`)).toBe(true);
  }, 20_000);

  it('follows each overlap policy while a scheduled run holds the lease', async () => {
    const [skip, one, all, replace, allow] = await Promise.all([
      runNowWhileHeld('p-skip'),
      runNowWhileHeld('p-buffer-one', 2),
      runNowWhileHeld('p-buffer-all', 2),
      runNowWhileHeld('p-replace'),
      runNowWhileHeld('p-allow'),
    ]);

    // skip: not run, recorded skipped naming the holder
    const skipped = await done(skip.ids[0]!);
    expect(skipped.state).toBe('skipped');
    const skipHolder = (await runs('p-skip')).find((r) => Number(r.fence) === skip.scheduled.fence)!;
    expect(skipped.skippedFor).toEqual({ holder: skipHolder.holder, fence: skip.scheduled.fence });
    const { rows: skipRows } = await rawPool(url, 2).query<{ detail: string; trigger: string; requested_by: string }>(
      `select detail, trigger, requested_by from leasehold.run_history where job = 'p-skip' and kind = 'skip' and trigger = 'manual'`,
    );
    expect(skipRows).toHaveLength(1);
    expect(skipRows[0]!.detail).toMatch(/held by w[123] \(fence \d+\)/);
    expect((await runs('p-skip')).filter((r) => r.trigger === 'manual')).toHaveLength(0);

    // buffer-one: the first waits and starts once the holder releases; the second is skipped
    const [oneFirst, oneSecond] = await Promise.all(one.ids.map(done));
    expect(oneSecond!.state).toBe('skipped');
    expect(oneFirst!.state).toBe('done');
    const oneRuns = await runs('p-buffer-one');
    const heldBy = oneRuns.find((r) => Number(r.fence) === one.scheduled.fence)!;
    expect(oneFirst!.startedAt!.getTime()).toBeGreaterThanOrEqual(heldBy.finished_at!.getTime());
    // the scheduled slot that came due during the run now was buffered, and started as soon as
    // the run now released (not at the next tick, a second or more later)
    await sleep(1_000);
    const behind = (await runs('p-buffer-one')).find(
      (r) => r.trigger === 'schedule' && r.slot > oneFirst!.startedAt! && r.slot < oneFirst!.finishedAt!,
    );
    expect(behind, 'a scheduled slot buffered behind the run now').toBeDefined();
    expect(behind!.started_at.getTime() - oneFirst!.finishedAt!.getTime()).toBeLessThan(500);

    // buffer-all: both wait and run, one after the other, after the holder
    const allDone = await Promise.all(all.ids.map(done));
    expect(allDone.map((r) => r.state)).toEqual(['done', 'done']);
    const allHolder = (await runs('p-buffer-all')).find((r) => Number(r.fence) === all.scheduled.fence)!;
    expect(allDone[0]!.startedAt!.getTime()).toBeGreaterThanOrEqual(allHolder.finished_at!.getTime());
    expect(allDone[1]!.startedAt!.getTime()).toBeGreaterThanOrEqual(allDone[0]!.finishedAt!.getTime());

    // replace: takes the lease at once; the old run's fenced write is refused, it ends lost
    const replaced = await done(replace.ids[0]!);
    expect(replaced.outcome).toBe('succeeded');
    const old = (await runs('p-replace')).find((r) => Number(r.fence) === replace.scheduled.fence)!;
    expect(replaced.startedAt!.getTime()).toBeLessThan(old.started_at.getTime() + 2_000);
    await sleep(2_500); // the old handler (ignoring its signal) tries its write now
    const oldAfter = (await runs('p-replace')).find((r) => Number(r.fence) === replace.scheduled.fence)!;
    expect(oldAfter.outcome).toBe('lost');
    const { rows: witness } = await rawPool(url, 2).query<{ fence: string; trigger: string; key: string }>(
      `select fence, trigger, key from req_witness where job = 'p-replace' and fence in ($1, $2)`,
      [replace.scheduled.fence, replaced.fence],
    );
    expect(witness.map((w) => w.trigger)).toEqual(['manual']);
    expect(witness[0]!.key).toBe(`p-replace@manual:${replaced.id}`);

    // allow: runs alongside the scheduled run, with a fence of its own
    const alongside = await done(allow.ids[0]!);
    const scheduledAllow = (await runs('p-allow')).find((r) => Number(r.fence) === allow.scheduled.fence)!;
    expect(alongside.outcome).toBe('succeeded');
    expect(alongside.startedAt!.getTime()).toBeLessThan(scheduledAllow.finished_at!.getTime());
    expect(alongside.fence).toBeGreaterThan(allow.scheduled.fence as number);
  }, 30_000);
});

describe('backfill', () => {
  it('two identical backfills started together run each slot once, in slot order, one at a time', async () => {
    const other = await client(url, { liveness: false, poolSize: 2 });
    const to = new Date();
    const from = new Date(to.getTime() - 5 * 3_600_000);
    const [a, b] = await Promise.all([
      lh.control.backfill('bf', { from, to, by: 'alice' }),
      other.control.backfill('bf', { from: from.toISOString(), to: to.toISOString(), by: 'bob' }),
    ]);
    expect(a.slots).toHaveLength(5);
    expect(a.requested.length + b.requested.length).toBe(5);
    expect(a.alreadyRequested + b.alreadyRequested).toBe(5);
    await Promise.all([...a.requested, ...b.requested].map((r) => done(r.id)));
    const backfilled = (await runs('bf')).filter((r) => r.trigger === 'backfill');
    expect(backfilled.map((r) => r.slot.getTime())).toEqual(a.slots.map((s) => s.getTime())); // once each, started in slot order
    for (let i = 1; i < backfilled.length; i++) expect(backfilled[i]!.started_at.getTime()).toBeGreaterThanOrEqual(backfilled[i - 1]!.finished_at!.getTime());
    expect(backfilled.every((r) => r.outcome === 'succeeded')).toBe(true);
    const keys = handlerLines((l) => l.job === 'bf' && l.trigger === 'backfill').map((l) => l.key);
    expect(keys).toEqual(a.slots.map((s) => `bf@backfill:${s.toISOString()}`));

    // a later backfill of the same range requests nothing again
    const again = await lh.control.backfill('bf', { from, to, by: 'carol' });
    expect(again.requested).toHaveLength(0);
    expect(again.alreadyRequested).toBe(5);
    const { rows } = await rawPool(url, 2).query<{ actor: string; detail: { requested: number } }>(
      `select actor, detail from leasehold.actions where job = 'bf' and action = 'backfill' order by id`,
    );
    expect(rows.map((r) => r.detail.requested).reduce((x, y) => x + y, 0)).toBe(5);
    expect(rows).toHaveLength(3);
  }, 20_000);

  it('under overlap allow, still one backfill run at a time', async () => {
    const to = new Date();
    const result = await lh.control.backfill('bf-allow', { from: new Date(to.getTime() - 4 * 3_600_000), to, by: 'alice' });
    expect(result.requested).toHaveLength(4);
    await Promise.all(result.requested.map((r) => done(r.id)));
    const backfilled = (await runs('bf-allow')).filter((r) => r.trigger === 'backfill');
    expect(backfilled).toHaveLength(4);
    for (let i = 1; i < backfilled.length; i++) expect(backfilled[i]!.started_at.getTime()).toBeGreaterThanOrEqual(backfilled[i - 1]!.finished_at!.getTime());
  }, 20_000);
});

describe('hostile input', () => {
  it('is refused with typed errors before anything is requested', async () => {
    const now = Date.now();
    const cases: Array<[string, () => Promise<unknown>]> = [
      ['job', () => lh.control.runNow('no-such-job', { by: 'alice' })],
      ['job', () => lh.control.backfill('no-such-job', { from: new Date(now - 3_600_000), to: new Date(now), by: 'alice' })],
      ['to', () => lh.control.backfill('bf', { from: new Date(now - 3_600_000), to: new Date(now + 7_200_000), by: 'alice' })],
      ['from', () => lh.control.backfill('bf', { from: new Date(now), to: new Date(now - 3_600_000), by: 'alice' })],
      ['max', () => lh.control.backfill('bf', { from: new Date(now - 200 * 3_600_000), to: new Date(now), by: 'alice' })],
      ['max', () => lh.control.backfill('bf', { from: new Date(now - 3_600_000), to: new Date(now), by: 'alice', max: 5_000 })],
      ['from', () => lh.control.backfill('bf', { from: 'yesterday', to: new Date(now), by: 'alice' })],
      ['by', () => lh.control.runNow('idle', { by: '' })],
      ['by', () => lh.control.runNow('idle', { by: 'x'.repeat(201) })],
      ['by', () => lh.control.runNow('idle', { by: 'evil\u202Ename' })],
      ['by', () => lh.control.runNow('idle', { by: 42 as unknown as string })],
      ['byy', () => lh.control.runNow('idle', { by: 'a', byy: 'b' } as unknown as { by: string })],
      ['options', () => lh.control.runNow('idle', undefined as unknown as { by: string })],
      ['id', () => lh.control.request('1; drop table x')],
    ];
    for (const [argument, call] of cases) {
      const error = await call().then(() => null, (e: unknown) => e);
      expect(error, argument).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument, String(error)).toBe(argument);
    }
    // the SQL functions check again, for callers that are not this client
    const sql = rawPool(url, 2);
    const code = (text: string, values: unknown[]) => sql.query(text, values).then(() => 'ok', (e: { code?: string }) => e.code);
    expect(await code('select leasehold.run_now($1, $2)', ['nope', 'alice'])).toBe('P0002');
    expect(await code('select leasehold.run_now($1, $2)', ['idle', ''])).toBe('LH004');
    expect(await code('select * from leasehold.request_backfill($1, array[now() + interval \'1 hour\'], $2)', ['bf', 'alice'])).toBe('22023');
    expect(await code('select * from leasehold.request_backfill($1, array(select now() - g * interval \'1 s\' from generate_series(1, 1001) g), $2)', ['bf', 'alice'])).toBe('22023');
    expect(await code('select * from leasehold.request_backfill($1, $2::timestamptz[], $3)', ['bf', [], 'alice'])).toBe('22023');
    expect(await code('select * from leasehold.claim_requests(array[\'bf\'], $1, null, 0)', ['w'])).toBe('22023');
    // nothing of the above left a request behind
    const { rows } = await sql.query<{ n: number }>(`select count(*)::int as n from leasehold.run_requests where job in ('nope', 'no-such-job') or requested_by = 'evil'`);
    expect(rows[0]!.n).toBe(0);
    // a dry run computes the slots and requests nothing
    const dry = await lh.control.backfill('bf', { from: new Date(now - 50 * 3_600_000), to: new Date(now - 40 * 3_600_000), by: 'alice', dryRun: true });
    expect(dry.slots).toHaveLength(10);
    expect(dry.requested).toHaveLength(0);
    expect(await lh.control.request('999999')).toBeNull();
  });
});
