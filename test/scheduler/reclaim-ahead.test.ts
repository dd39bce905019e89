// A slot claimed ahead whose holder is gone before its start runs at its slot on a peer, each
// slot once (src/worker/start-queue.ts, sql/baseline/1_leases.sql). Real worker processes,
// both claiming ahead: one is killed (SIGKILL) or stopped (SIGSTOP) in the lead of a slot it
// claimed; the other runs that slot, and a stopped worker that resumes never runs it too. A sole
// worker killed so and started again after the slot runs it at its start (catch-up).
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { client, freshDatabase, rawPool, waitFor } from '../support/db.js';
import { handlerLines, SCHEDULED_WORKER, startFixture, type JsonLinesProcess } from '../support/processes.js';

let url: string;
const children: JsonLinesProcess[] = [];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
});

afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill()));
});

type Run = { slot: Date; holder: string; outcome: string; error: string | null; started_at: Date };
const runsOf = async (job: string) =>
  (await rawPool(url, 2).query<Run>('select slot, holder, outcome, error, started_at from leasehold.runs where job = $1 order by slot, fence', [job])).rows;

/** Two workers claiming `job` ahead by 3 s; resolves when one of them holds a slot claimed at least 1 s before it. */
async function twoWorkersAndAClaim(job: { name: string; every: string; ttl: string }): Promise<{ holder: JsonLinesProcess; peer: JsonLinesProcess; slot: Date }> {
  const workers = await Promise.all(['w1', 'w2'].map((name) => startFixture(url, { JOBS: JSON.stringify([job]), HOLDER: `${job.name}-${name}`, CLAIM_AHEAD: '3s' }, SCHEDULED_WORKER)));
  children.push(...workers);
  const claimed = await waitFor(async () => {
    const { rows } = await rawPool(url, 2).query<{ slot: Date; holder: string; ahead: boolean }>(
      "select last_slot as slot, holder, last_slot > clock_timestamp() + interval '1 second' as ahead from leasehold.leases where name = $1 and token is not null",
      [job.name],
    );
    return rows[0]?.ahead ? rows[0] : undefined;
  }, 30_000, 10);
  const index = workers.findIndex((w) => w.lines.some((l) => l.event === 'ready' && l.holder === claimed.holder));
  expect(index).toBeGreaterThanOrEqual(0);
  return { holder: workers[index]!, peer: workers[1 - index]!, slot: claimed.slot };
}

const handlersOf = (slot: Date) => handlerLines(children, (l) => l.slot === slot.toISOString());

describe('a worker killed (SIGKILL) after claiming a slot ahead, before its start', () => {
  it('leaves the slot to the peer, which runs it at its slot; the killed worker\'s run is recorded aborted, unstarted', async () => {
    // a long ttl: only the holder's liveness session says it is gone
    const { holder, peer, slot } = await twoWorkersAndAClaim({ name: 'killed', every: '10s', ttl: '60s' });
    holder.signal('SIGKILL');
    const ran = await peer.waitFor((l) => l.event === 'handler' && l.slot === slot.toISOString(), 15_000);
    const lateMs = Number(ran.at) - slot.getTime();
    // at its slot (a second pass after the peer's own share: well under a second here), not at
    // the next slot 10 s later
    expect(lateMs).toBeGreaterThanOrEqual(0);
    expect(lateMs).toBeLessThan(5_000);
    await waitFor(async () => (await runsOf('killed')).some((r) => r.slot.getTime() === slot.getTime() && r.outcome === 'succeeded'), 10_000, 50);
    const ofSlot = (await runsOf('killed')).filter((r) => r.slot.getTime() === slot.getTime());
    expect(ofSlot.map((r) => [r.holder, r.outcome])).toEqual([
      [holder.lines.find((l) => l.event === 'ready')!.holder, 'aborted'],
      [peer.lines.find((l) => l.event === 'ready')!.holder, 'succeeded'],
    ]);
    expect(ofSlot[0]!.error).toMatch(/^not started/);
    expect(handlersOf(slot)).toHaveLength(1);
    console.log(`[reclaim] killed in the lead: the slot ran on the peer ${lateMs} ms after it`);
  }, 60_000);
});

describe('a sole worker killed (SIGKILL) after claiming a slot ahead, restarted after the slot', () => {
  it('runs the slot at its start (catch-up \'latest\'): the killed worker\'s run is recorded aborted, the slot runs once', async () => {
    const job = { name: 'sole', every: '10s', ttl: '60s' };
    const first = await startFixture(url, { JOBS: JSON.stringify([job]), HOLDER: 'sole-1', CLAIM_AHEAD: '3s' }, SCHEDULED_WORKER);
    children.push(first);
    const claimed = await waitFor(async () => {
      const { rows } = await rawPool(url, 2).query<{ slot: Date; ahead: boolean }>(
        "select last_slot as slot, last_slot > clock_timestamp() + interval '1 second' as ahead from leasehold.leases where name = 'sole' and token is not null",
      );
      return rows[0]?.ahead ? rows[0] : undefined;
    }, 30_000, 10);
    const slot = claimed.slot;
    first.signal('SIGKILL');
    // nobody runs the job at its slot; the worker comes back a second after it
    await sleep(Math.max(0, slot.getTime() + 1_000 - Date.now()));
    const second = await startFixture(url, { JOBS: JSON.stringify([job]), HOLDER: 'sole-2', CLAIM_AHEAD: '3s' }, SCHEDULED_WORKER);
    children.push(second);
    const ran = await second.waitFor((l) => l.event === 'handler' && l.slot === slot.toISOString(), 8_000);
    // at the restart, not left for the next slot's claim (10 s later) to record lost
    expect(Number(ran.at) - slot.getTime()).toBeLessThan(9_000);
    await waitFor(async () => (await runsOf('sole')).some((r) => r.slot.getTime() === slot.getTime() && r.outcome === 'succeeded'), 10_000, 50);
    const ofSlot = (await runsOf('sole')).filter((r) => r.slot.getTime() === slot.getTime());
    expect(ofSlot.map((r) => [r.holder, r.outcome])).toEqual([
      [first.lines.find((l) => l.event === 'ready')!.holder, 'aborted'],
      [second.lines.find((l) => l.event === 'ready')!.holder, 'succeeded'],
    ]);
    expect(handlersOf(slot)).toHaveLength(1);
  }, 60_000);
});

describe('a worker stopped (SIGSTOP) after claiming a slot ahead, then resumed (SIGCONT)', () => {
  it('stopped past its lease: the peer runs the slot once the lease expired, and the resumed worker never runs it', async () => {
    const { holder, peer, slot } = await twoWorkersAndAClaim({ name: 'stopped', every: '10s', ttl: '5s' });
    holder.signal('SIGSTOP');
    const ran = await peer.waitFor((l) => l.event === 'handler' && l.slot === slot.toISOString(), 15_000);
    const lateMs = Number(ran.at) - slot.getTime();
    await sleep(Math.max(0, slot.getTime() + 12_000 - Date.now()));
    holder.signal('SIGCONT');
    await holder.waitFor((l) => l.event === 'lost', 10_000);
    await sleep(1_000);
    expect(handlersOf(slot).map((l) => l.fence)).toHaveLength(1);
    expect(holder.lines.filter((l) => l.event === 'handler' && l.slot === slot.toISOString())).toEqual([]);
    const ofSlot = (await runsOf('stopped')).filter((r) => r.slot.getTime() === slot.getTime());
    expect(ofSlot.map((r) => r.outcome).sort()).toEqual(['aborted', 'succeeded']);
    console.log(`[reclaim] stopped in the lead for 12 s (ttl 5 s): the slot ran on the peer ${lateMs} ms after it`);
  }, 60_000);

  it('stopped for less than its lease: the resumed worker runs the slot late, and the peer does not', async () => {
    const { holder, slot } = await twoWorkersAndAClaim({ name: 'paused', every: '10s', ttl: '20s' });
    holder.signal('SIGSTOP');
    await sleep(Math.max(0, slot.getTime() + 1_500 - Date.now()));
    holder.signal('SIGCONT');
    await holder.waitFor((l) => l.event === 'handler' && l.slot === slot.toISOString(), 10_000);
    await sleep(2_000);
    expect(handlersOf(slot)).toHaveLength(1);
    const ofSlot = (await runsOf('paused')).filter((r) => r.slot.getTime() === slot.getTime());
    expect(ofSlot.map((r) => [r.holder, r.outcome])).toEqual([[holder.lines.find((l) => l.event === 'ready')!.holder, 'succeeded']]);
  }, 60_000);
});
