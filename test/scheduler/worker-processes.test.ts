// Several scheduler worker processes on one database: no overlap, each slot once, killed and
// stopped workers, skewed clocks. Checked against the run history in the database.
import { fakeClockEnv, findLibfaketime } from '../../src/testing/faketime.js';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { client, freshDatabase, rawPool } from '../support/db.js';
import { SCHEDULED_WORKER, startFixture, type JsonLinesProcess } from '../support/processes.js';

let url: string;
const children: JsonLinesProcess[] = [];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  await rawPool(url, 1).query('create table sched_witness (job text, slot timestamptz, fence bigint, worker text)');
});

afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill()));
});

async function workers(count: number, jobs: object[], env: (i: number) => Record<string, string> = () => ({})): Promise<JsonLinesProcess[]> {
  const started = await Promise.all(
    Array.from({ length: count }, (_, i) => startFixture(url, { JOBS: JSON.stringify(jobs), HOLDER: `w${i + 1}`, ...env(i) }, SCHEDULED_WORKER)),
  );
  children.push(...started);
  return started;
}

type Run = { slot: Date; fence: string; holder: string; started_at: Date; finished_at: Date | null; outcome: string };
const history = async (job: string) =>
  (await rawPool(url, 2).query<Run>('select slot, fence, holder, started_at, finished_at, outcome from leasehold.runs where job = $1 order by slot', [job])).rows;
const skipped = async (job: string) =>
  (await rawPool(url, 2).query<{ slot: Date; holder: string }>('select slot, holder from leasehold.skips where job = $1 order by slot', [job])).rows;

describe('three workers', () => {
  it('never overlap a 2.5 s job scheduled every second, run each slot at most once, and record each skip once', async () => {
    const jobs = [
      { name: 'slow', every: '1s', ttl: '5s', durationMs: 2_500, write: true },
      { name: 'fast', every: '1s', ttl: '5s', write: true },
    ];
    await workers(3, jobs);
    await sleep(9_000);
    const stopAt = (await rawPool(url, 1).query<{ now: Date }>('select clock_timestamp() as now')).rows[0]!.now;
    await Promise.all(children.map(async (c) => c.signal('SIGTERM')));
    await Promise.all(children.map((c) => c.exited));

    const slow = await history('slow');
    expect(slow.length).toBeGreaterThanOrEqual(2);
    for (let i = 1; i < slow.length; i++) {
      // no overlap: each run started after the previous one finished (database clock)
      expect(slow[i]!.started_at.getTime()).toBeGreaterThanOrEqual(slow[i - 1]!.finished_at!.getTime());
    }
    const slowSkips = await skipped('slow');
    expect(slowSkips.length).toBeGreaterThanOrEqual(slow.length); // ~2 skips per run
    const ranSlots = new Set(slow.map((r) => r.slot.getTime()));
    for (const skip of slowSkips) {
      expect(ranSlots.has(skip.slot.getTime())).toBe(false); // a skipped slot did not also run
      expect(skip.holder).toMatch(/^w[123]$/); // and names the holder
    }
    // every slot between the first and the last run either ran or was skipped: none lost
    const accounted = new Set([...ranSlots, ...slowSkips.map((s) => s.slot.getTime())]);
    for (let t = slow[0]!.slot.getTime(); t <= slow.at(-1)!.slot.getTime(); t += 1_000) expect(accounted.has(t), new Date(t).toISOString()).toBe(true);

    // the fast job: every slot exactly once although the workers' timers fire at different moments
    const fast = await history('fast');
    expect(fast.length).toBeGreaterThanOrEqual(7);
    const slots = fast.map((r) => r.slot.getTime());
    expect(new Set(slots).size).toBe(slots.length);
    for (let i = 1; i < slots.length; i++) expect(slots[i]! - slots[i - 1]!).toBe(1_000);
    // every run succeeded, but for one claimed just as the workers were told to stop: that one
    // is handed back unrun, as aborted (nothing else may end otherwise)
    const unsucceeded = fast.filter((r) => r.outcome !== 'succeeded');
    expect(unsucceeded.filter((r) => !(r.outcome === 'aborted' && r.started_at >= new Date(stopAt.getTime() - 1_000))), JSON.stringify(unsucceeded)).toEqual([]);
    const { rows } = await rawPool(url, 1).query<{ n: number }>(`select count(*)::int as n from sched_witness where job = 'fast'`);
    expect(rows[0]!.n).toBe(fast.length - unsucceeded.length);
  });
});

describe('the runs of a small fleet', () => {
  // Ten names whose hashes all fall in one share of two or of three workers (FNV-1a % 6 = 0):
  // a few jobs can hash like this by chance, and by name alone one worker then ran them all.
  const NAMES = ['report-0', 'report-11', 'report-17', 'report-22', 'report-28', 'report-37', 'report-39', 'report-42', 'report-44', 'report-53'];

  it('spread over the live workers: 10 jobs every second on 3 workers, the busiest within 1.5x its fair share', async () => {
    const jobs = NAMES.map((name) => ({ name, every: '1s', ttl: '5s' }));
    await workers(3, jobs);
    // each worker's list of live peers is re-read at most every 10 s: measure once all have it
    await sleep(11_000);
    const from = (await rawPool(url, 1).query<{ now: Date }>('select clock_timestamp() as now')).rows[0]!.now;
    await sleep(12_000);
    await Promise.all(children.map(async (c) => c.signal('SIGTERM')));
    await Promise.all(children.map((c) => c.exited));
    const { rows } = await rawPool(url, 2).query<{ holder: string; n: number }>(
      "select holder, count(*)::int as n from leasehold.runs where job like 'report-%' and slot > $1 group by holder order by n desc",
      [from],
    );
    const total = rows.reduce((sum, r) => sum + r.n, 0);
    console.log(`runs per worker: ${rows.map((r) => `${r.holder} ${r.n}`).join(', ')} (of ${total})`);
    expect(total).toBeGreaterThan(90);
    expect(rows.map((r) => r.holder).sort()).toEqual(['w1', 'w2', 'w3']);
    expect(rows[0]!.n).toBeLessThanOrEqual(1.5 * (total / 3));
  }, 60_000);
});

describe('a worker killed mid-run (SIGKILL)', () => {
  it('is replaced for the next slot on time, and its run ends as lost', async () => {
    const [a, b] = await workers(2, [{ name: 'killed', every: '1s', ttl: '20s', durationMs: 2_500 }]);
    const first = await Promise.race([a!, b!].map((w) => w.waitFor((l) => l.event === 'handler', 10_000).then((line) => ({ w, line }))));
    const victim = first.w;
    const survivor = victim === a ? b! : a!;
    await sleep(300);
    const killedAt = Date.now();
    victim.signal('SIGKILL');
    // the next slot after the kill is run by the survivor, on time (liveness, not the 20 s TTL)
    const next = Math.ceil((killedAt + 1) / 1_000) * 1_000;
    const line = await survivor.waitFor((l) => l.event === 'handler' && Date.parse(String(l.slot)) >= next, 10_000);
    expect(Number(line.at) - Date.parse(String(line.slot))).toBeLessThan(1_000);
    const runs = await history('killed');
    const killedRun = runs.find((r) => r.slot.toISOString() === first.line.slot);
    expect(killedRun).toMatchObject({ holder: victim.holderName, outcome: 'lost' });
    expect(killedRun!.finished_at).toBeInstanceOf(Date);
  });
});

describe('graceful shutdown (SIGTERM)', () => {
  it('aborts the running handler, records the outcome, releases the lease; the next slot runs elsewhere', async () => {
    const [a, b] = await workers(2, [{ name: 'stopping', every: '1s', ttl: '20s', durationMs: 5_000 }], () => ({ GRACE: '3s' }));
    const first = await Promise.race([a!, b!].map((w) => w.waitFor((l) => l.event === 'handler', 10_000).then((line) => ({ w, line }))));
    const stopped = first.w;
    const other = stopped === a ? b! : a!;
    await sleep(200);
    const stoppedAt = Date.now();
    stopped.signal('SIGTERM');
    expect((await stopped.exited).code).toBe(0);
    expect(Date.now() - stoppedAt).toBeLessThan(3_000);
    const finished = stopped.lines.find((l) => l.event === 'finished' && l.slot === first.line.slot);
    expect(finished).toMatchObject({ outcome: 'aborted' });
    const run = (await history('stopping')).find((r) => r.slot.toISOString() === first.line.slot);
    expect(run).toMatchObject({ outcome: 'aborted' });
    const line = await other.waitFor((l) => l.event === 'handler' && Date.parse(String(l.slot)) > stoppedAt, 5_000);
    expect(Number(line.at) - Date.parse(String(line.slot))).toBeLessThan(1_000);
  });
});

describe('workers with clocks skewed by minutes', () => {
  const libfaketime = findLibfaketime();

  // libfaketime comes from Debian's faketime package, which .ci/run installs.
  it.skipIf(!libfaketime)('run each slot on time by the database clock, neither early nor late (uses libfaketime)', async () => {
    const skew = (offset: string) => fakeClockEnv(libfaketime!, offset);
    await workers(2, [{ name: 'skewed', every: '1s', ttl: '5s' }], (i) => skew(i === 0 ? '+5m' : '-5m'));
    await sleep(4_500);
    const runs = await history('skewed');
    expect(runs.length).toBeGreaterThanOrEqual(3);
    for (const run of runs) {
      const lateness = run.started_at.getTime() - run.slot.getTime();
      expect(lateness).toBeGreaterThanOrEqual(0); // never before its slot by the database clock
      expect(lateness).toBeLessThan(1_000); // nor minutes late
    }
    const slots = runs.map((r) => r.slot.getTime());
    for (let i = 1; i < slots.length; i++) expect(slots[i]! - slots[i - 1]!).toBe(1_000);
  });
});
