// Run now with several worker processes on one database (sql/baseline/4_control.sql,
// src/worker/requests.ts, src/control/manual-runs.ts): the overlap policies while a scheduled run
// holds the lease, one run per request across the fleet, the scheduled slot untouched.
// Backfill, the SQL-level race and hostile input: test/control/backfill.test.ts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Leasehold } from '../../src/index.js';
import type { RunRequest } from '../../src/control/index.js';
import { client, freshDatabase, rawPool } from '../support/db.js';
import { handlerLines, startFixture, type JsonLinesProcess, type Line } from '../support/processes.js';

const REQUEST_WORKER = fileURLToPath(new URL('../fixtures/request-worker.ts', import.meta.url));

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

const handlers = (match: (l: Line) => boolean): Line[] => handlerLines(children, match);

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
      const lines = handlers((l) => l.job === 'idle' && l.key === `idle@manual:${request.id}`);
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
    expect(handlers((l) => l.job === 'idle' && l.trigger === 'schedule').every((l) => l.key === `idle@${String(l.slot)}`)).toBe(true);
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
    expect(handlers((l) => l.job === 'p-replace' && l.trigger === 'manual')[0]!.leaseKey).toBe(`p-replace#${replaced.fence}`);

    // allow: runs alongside the scheduled run, with a fence of its own
    const alongside = await done(allow.ids[0]!);
    const scheduledAllow = (await runs('p-allow')).find((r) => Number(r.fence) === allow.scheduled.fence)!;
    expect(alongside.outcome).toBe('succeeded');
    expect(alongside.startedAt!.getTime()).toBeLessThan(scheduledAllow.finished_at!.getTime());
    expect(alongside.fence).toBeGreaterThan(allow.scheduled.fence as number);
  }, 30_000);
});
