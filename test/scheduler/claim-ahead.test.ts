// Claiming ahead (src/worker/claim-ahead.ts, docs/scheduler.md "Claim ahead"): workers claim
// their share of a tick before its slot and start each run at its slot, never before; each slot
// still runs once; a lease still held is claimed at the slot as usual (and its skip recorded
// then); a worker that stops before the start hands the run back, unrun.
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { InvalidArgumentError, startWorker, type JobContext, type JobOptions, type Worker } from '../../src/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { AUTO_ENGAGE_MS, AUTO_MAX_MS, AUTO_MIN_JOBS, LeadPolicy, PRIOR_MS_PER_JOB } from '../../src/worker/claim-ahead.js';
import { client, freshDatabase, rawPool, waitFor } from '../support/db.js';

let url: string;
const workers: Worker[] = [];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
});

async function worker(jobs: JobOptions[], claimAhead: string, holder: string): Promise<Worker> {
  const w = await startWorker({ connectionString: url, jobs, logger: silentLogger(), handleSignals: false, shutdownGrace: '2s', claimAhead, holder });
  workers.push(w);
  return w;
}

type RunRow = { job: string; slot: Date; holder: string; started_at: Date; finished_at: Date | null; outcome: string; error: string | null };
const runs = async (prefix: string) =>
  (await rawPool(url, 2).query<RunRow>(`select job, slot, holder, started_at, finished_at, outcome, error from leasehold.runs where job like $1 || '%' order by job, slot`, [prefix])).rows;

/** One handler start: the job, its slot, when it started (local clock, the database's on this machine) and when its lease was granted. */
interface Start {
  job: string;
  slot: number;
  at: number;
  acquiredAt: number;
}

describe('claiming ahead', () => {
  it('starts every run at its slot, never before, each slot once across two workers, with its lease granted before the slot', async () => {
    const starts: Start[] = [];
    const handler = async (ctx: JobContext) => {
      starts.push({ job: ctx.job, slot: ctx.slot.getTime(), at: Date.now(), acquiredAt: ctx.lease!.acquiredAt.getTime() });
    };
    const jobs = Array.from({ length: 40 }, (_, i) => ({ name: `ahead-${String(i).padStart(2, '0')}`, every: '1s', handler }));
    await worker(jobs, '400ms', 'ahead-w1');
    await worker(jobs, '400ms', 'ahead-w2');
    await waitFor(() => new Set(starts.map((s) => s.slot)).size >= 5, 15_000, 50);
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    const slots = [...new Set(starts.map((s) => s.slot))].sort((a, b) => a - b).slice(1, -1); // whole ticks
    expect(slots.length).toBeGreaterThanOrEqual(3);
    const early = starts.filter((s) => s.at < s.slot);
    expect(early, 'no handler starts before its slot').toEqual([]);
    const ahead = starts.filter((s) => slots.includes(s.slot) && s.acquiredAt < s.slot);
    // the leases of the whole ticks were granted before their slots (a slot claimed at the slot
    // is the exception: a row a peer was committing, say)
    expect(ahead.length).toBeGreaterThan(0.9 * slots.length * jobs.length);
    const history = await runs('ahead-');
    for (const slot of slots) {
      const ofSlot = history.filter((r) => r.slot.getTime() === slot);
      expect(ofSlot.map((r) => r.job), `slot ${new Date(slot).toISOString()}`).toEqual(jobs.map((j) => j.name));
      for (const run of ofSlot) expect(run.started_at.getTime()).toBeGreaterThanOrEqual(slot);
    }
    const keys = history.map((r) => `${r.job}@${r.slot.getTime()}`);
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('leaves a lease still held to the claim at the slot: runs never overlap, and each skip is recorded once, at its slot', async () => {
    let running = 0;
    let overlapped = false;
    const handler = async () => {
      running++;
      if (running > 1) overlapped = true;
      await sleep(1_300);
      running--;
    };
    await worker([{ name: 'ahead-long', every: '1s', ttl: '5s', handler }], '400ms', 'ahead-long-w1');
    await worker([{ name: 'ahead-long', every: '1s', ttl: '5s', handler }], '400ms', 'ahead-long-w2');
    await waitFor(async () => (await runs('ahead-long')).filter((r) => r.outcome === 'succeeded').length >= 3, 15_000, 50);
    expect(overlapped).toBe(false);
    const history = (await runs('ahead-long')).filter((r) => r.finished_at);
    for (let i = 1; i < history.length; i++) expect(history[i]!.started_at.getTime()).toBeGreaterThanOrEqual(history[i - 1]!.finished_at!.getTime());
    const { rows: skips } = await rawPool(url, 1).query<{ slot: Date; recorded_at: Date }>(`select slot, recorded_at from leasehold.skips where job = 'ahead-long' order by slot`);
    expect(skips.length).toBeGreaterThan(0);
    // recorded at (or after) the slot it skips, not while claiming ahead
    for (const skip of skips) expect(skip.recorded_at.getTime()).toBeGreaterThanOrEqual(skip.slot.getTime());
    const ran = new Set(history.map((r) => r.slot.getTime()));
    expect(skips.filter((s) => ran.has(s.slot.getTime()))).toEqual([]);
  });

  it('hands back a run claimed ahead when the worker stops before its start: recorded aborted, its handler never called', async () => {
    let called = 0;
    const w = await worker([{ name: 'ahead-stop', every: '5s', handler: async () => void called++ }], '3s', 'ahead-stop-w');
    const granted = new Promise<{ slot: Date | null }>((resolve) => w.leasehold.on('lease:acquired', (info) => resolve(info)));
    const { slot } = await granted;
    expect(slot!.getTime()).toBeGreaterThan(Date.now()); // claimed ahead of its slot
    await w.stop();
    expect(called).toBe(0);
    const [run] = (await runs('ahead-stop')).filter((r) => r.slot.getTime() === slot!.getTime());
    expect([run?.outcome, run?.error]).toEqual(['aborted', "the worker was stopping before the run's start"]);
    const { rows } = await rawPool(url, 1).query<{ token: string | null }>(`select token from leasehold.leases where name = 'ahead-stop'`);
    expect(rows[0]!.token).toBeNull();
  });

  it('takes claimAhead as a duration from 0 (never) up to 10 s, or auto, and refuses anything else', async () => {
    const job = { name: 'ahead-setting', every: '1m', handler: async () => undefined };
    for (const claimAhead of ['11s', 'sometimes', '-1s', 10_001, -5, '1.5ms']) {
      await expect(startWorker({ connectionString: url, jobs: [job], logger: silentLogger(), handleSignals: false, claimAhead })).rejects.toBeInstanceOf(InvalidArgumentError);
    }
    for (const claimAhead of ['0ms', 0, '10s', 'auto']) {
      const w = await startWorker({ connectionString: url, jobs: [job], logger: silentLogger(), handleSignals: false, claimAhead });
      await w.stop();
    }
  });

  it("with claimAhead '0ms' claims every slot at the slot, as without it", async () => {
    const starts: Start[] = [];
    const handler = async (ctx: JobContext) => {
      starts.push({ job: ctx.job, slot: ctx.slot.getTime(), at: Date.now(), acquiredAt: ctx.lease!.acquiredAt.getTime() });
    };
    await worker([{ name: 'never-ahead', every: '1s', handler }], '0ms', 'never-ahead-w');
    await waitFor(() => starts.length >= 3, 10_000, 50);
    expect(starts.filter((s) => s.acquiredAt < s.slot)).toEqual([]);
  });
});

describe('the lead of claimAhead: auto', () => {
  it('stays 0 for small ticks and quick ones, engages once a share of a large tick took longer than the threshold, and is capped', () => {
    const policy = new LeadPolicy('auto');
    policy.observe(AUTO_MIN_JOBS - 1, 10 * AUTO_ENGAGE_MS);
    expect(policy.leadMs()).toBe(0);
    policy.observe(AUTO_MIN_JOBS, AUTO_ENGAGE_MS / 2);
    expect(policy.leadMs()).toBe(0);
    policy.observe(10_000, 400);
    policy.observe(10_000, 400);
    const lead = policy.leadMs();
    expect(lead).toBeGreaterThan(400);
    expect(lead).toBeLessThan(1_000);
    policy.observe(100_000, 60_000);
    expect(policy.leadMs()).toBe(AUTO_MAX_MS);
    // claims that got quick again take the lead back down, to none
    for (let i = 0; i < 20; i++) policy.observe(10_000, 5);
    expect(policy.leadMs()).toBe(0);
    // and so do ticks that got small (a slow tick of a small fleet does not count)
    policy.observe(10_000, 400);
    expect(policy.leadMs()).toBeGreaterThan(0);
    for (let i = 0; i < 5; i++) policy.observe(AUTO_MIN_JOBS - 1, 400);
    expect(policy.leadMs()).toBe(0);
    expect(new LeadPolicy(750).leadMs()).toBe(750);
    expect(new LeadPolicy(0).leadMs()).toBe(0);
  });

  it('before its first measurement, guesses the lead from the next slot\'s due jobs and the live workers, then follows what it measures', () => {
    const asked: number[] = [];
    const next = (dueJobs: number, workers: number) => () => (asked.push(dueJobs), { dueJobs, workers });
    // 10,000 jobs on 4 workers: a share of 2,500, about 500 ms expected, so it claims ahead
    const policy = new LeadPolicy('auto');
    const first = policy.leadMs(next(10_000, 4));
    expect(first).toBe(Math.ceil(1.5 * 2_500 * PRIOR_MS_PER_JOB + 25));
    // a small tick, or a share too small to be slow, does not
    expect(new LeadPolicy('auto').leadMs(next(AUTO_MIN_JOBS - 1, 1))).toBe(0);
    expect(new LeadPolicy('auto').leadMs(next(1_000, 8))).toBe(0);
    expect(new LeadPolicy('auto').leadMs(next(1_000_000, 1))).toBe(AUTO_MAX_MS);
    expect(new LeadPolicy('auto').leadMs()).toBe(0);
    // once measured, the guess is not asked for any more: a quick first share takes the lead away
    policy.observe(10_000, 5);
    asked.length = 0;
    expect(policy.leadMs(next(10_000, 4))).toBe(0);
    expect(asked).toEqual([]);
    // a fixed setting never guesses
    expect(new LeadPolicy(0).leadMs(next(100_000, 1))).toBe(0);
  });
});
