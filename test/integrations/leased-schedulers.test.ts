// leased() with croner, toad-scheduler and setInterval: two replicas (two clients, two
// holders) in this process, each with its own timer firing every second at its own offset;
// every second-slot runs once across them or is recorded skipped, never twice. Then bree in two
// processes, and what a call resolves to.
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { Cron } from 'croner';
import { SimpleIntervalJob, AsyncTask, ToadScheduler } from 'toad-scheduler';
import { beforeAll, describe, expect, it } from 'vitest';
import { leased, type JobContext, type Leasehold, type LeasedFunction } from '../../src/index.js';
import { client, freshDatabase, rawPool } from '../support/db.js';
import { JsonLinesProcess, startFixture } from '../support/processes.js';

let url: string;
let replicas: Leasehold[];

beforeAll(async () => {
  url = await freshDatabase();
  replicas = [await client(url, { holder: 'replica-1' }), await client(url, { holder: 'replica-2' })];
  await rawPool(url, 2).query('create table sched_witness (job text, slot timestamptz, holder text)');
});

const handler = (job: string, holder: string) => async (ctx: JobContext) => {
  // every third slot overruns, so the next one is skipped. By 1.9 s: toad-scheduler (by default)
  // does not fire a replica's timer while that replica's own call is running, so the skip is
  // the other replica's to record, 0.35 s later in each second; an overrun of 1.4 s left that
  // call a 50 ms margin, which a loaded machine's timer delays used up.
  if (ctx.slot.getTime() % 3_000 === 0) await sleep(1_900, undefined, { signal: ctx.signal });
  await ctx.transaction((c) => c.query('insert into sched_witness values ($1, $2, $3)', [job, ctx.slot, holder]));
};

/** Starts the schedulers, waits, stops them; then checks every slot of the window against the history. */
async function check(job: string, start: (fn: LeasedFunction, replica: number) => () => void): Promise<void> {
  const fns = replicas.map((r, i) => leased(r, { name: job, every: '1s', ttl: '5s' }, handler(job, `replica-${i + 1}`)));
  const stops: Array<() => void> = [];
  for (const [i, fn] of fns.entries()) {
    stops.push(start(fn, i));
    await sleep(350); // the second replica's timer runs at another offset
  }
  const from = new Date(Math.ceil(Date.now() / 1000) * 1000 + 1000);
  await sleep(8_500);
  const until = new Date(Math.floor(Date.now() / 1000) * 1000 - 2000);
  // at least 5 slots, so the window holds an overrunning slot (a multiple of 3 s) and the one after it
  expect(until.getTime() - from.getTime()).toBeGreaterThanOrEqual(4_000);
  for (const stop of stops) stop();
  await Promise.all(fns.map((fn) => fn.stop()));
  const db = rawPool(url, 2);
  const count = async (table: string) => {
    const { rows } = await db.query<{ slot: Date; n: string }>(`select slot, count(*) n from ${table} where job = $1 and slot between $2 and $3 group by slot`, [job, from, until]);
    return new Map(rows.map((r) => [r.slot.getTime(), Number(r.n)]));
  };
  const [witness, runs, skips, missed] = [await count('sched_witness'), await count('leasehold.runs'), await count('leasehold.skips'), await count('leasehold.missed')];
  const detail = JSON.stringify({ from, until, witness: [...witness], runs: [...runs], skips: [...skips], missed: [...missed] });
  let skipped = 0;
  for (let t = from.getTime(); t <= until.getTime(); t += 1000) {
    const at = `${job} ${new Date(t).toISOString()}`;
    expect(witness.get(t) ?? 0, at).toBeLessThanOrEqual(1);
    // each slot once: run, skipped, or (when a loaded machine delayed both replicas' timers past
    // the next slot) recorded missed by the next claim
    expect((runs.get(t) ?? 0) + (skips.get(t) ?? 0) + (missed.get(t) ?? 0), `${at} ${detail}`).toBe(1);
    skipped += skips.get(t) ?? 0;
  }
  expect(skipped, detail).toBeGreaterThan(0);
}

describe('leased() with other schedulers, two replicas', () => {
  it('croner', { timeout: 60_000 }, async () => {
    await check('croner-job', (fn) => {
      const job = new Cron('* * * * * *', () => void fn());
      return () => job.stop();
    });
  });

  it('toad-scheduler', { timeout: 60_000 }, async () => {
    await check('toad-job', (fn) => {
      const scheduler = new ToadScheduler();
      scheduler.addSimpleIntervalJob(new SimpleIntervalJob({ seconds: 1 }, new AsyncTask('report', () => fn().then(() => undefined))));
      return () => scheduler.stop();
    });
  });

  it('setInterval', { timeout: 60_000 }, async () => {
    await check('interval-job', (fn) => {
      const timer = setInterval(() => void fn(), 1_000);
      return () => clearInterval(timer);
    });
  });
});

describe('what a call resolves to', () => {
  it('one of two replicas calling for the same occurrence runs it; the other is told slot-taken', async () => {
    const [a, b] = replicas.map((r) => leased(r, { name: 'same-occurrence', every: '1h', tolerance: 0, ttl: '5s' }, async () => undefined));
    // (an hourly schedule: both calls surely fall in the same occurrence, however slow each one's first connection is)
    const results = await Promise.all([a!(), b!()]);
    expect(results.filter((r) => r.ran)).toHaveLength(1);
    expect(results.find((r) => !r.ran)).toMatchObject({ ran: false, reason: 'slot-taken' });
    expect(results[0]!.slot).toEqual(results[1]!.slot);
  });

  it('a handler that throws is a failed run, not a rejection', async () => {
    const fn = leased(replicas[0]!, { name: 'throws', every: '1s', ttl: '5s' }, async () => {
      throw new Error('report service down');
    });
    const result = await fn();
    expect(result).toMatchObject({ ran: true, outcome: 'failed' });
    expect(result.ran && result.error).toMatch(/report service down/);
  });

  it('stop() aborts a running handler, records it aborted, and refuses later calls', async () => {
    let started!: () => void;
    const running = new Promise<void>((resolve) => (started = resolve));
    const fn = leased(replicas[0]!, { name: 'stopped', every: '1s', ttl: '5s', shutdownGrace: '5s' }, async (ctx) => {
      started();
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
      ctx.signal.throwIfAborted();
    });
    const call = fn();
    await running;
    await fn.stop();
    const result = await call;
    expect(result).toMatchObject({ ran: true, outcome: 'aborted' });
    const { rows } = await rawPool(url, 2).query<{ outcome: string }>("select outcome from leasehold.runs where job = 'stopped'");
    expect(rows).toEqual([{ outcome: 'aborted' }]);
    expect(await fn()).toMatchObject({ ran: false, reason: 'stopped' });
  });
});

describe('bree (each run in a new worker thread with its own client)', () => {
  it('two bree processes: no occurrence runs twice', { timeout: 120_000 }, async () => {
    const main = fileURLToPath(new URL('../fixtures/bree/main.ts', import.meta.url));
    await rawPool(url, 2).query('create table bree_witness (slot timestamptz, holder text)');
    const procs = await Promise.all(['bree-1', 'bree-2'].map((holder) => startFixture(url, { HOLDER: holder }, main)));
    try {
      await sleep(10_000);
    } finally {
      for (const p of procs) p.signal('SIGTERM');
      await Promise.all(procs.map((p) => p.exited));
    }
    for (const p of procs) expect(p.lines.filter((l) => l.event === 'error'), p.stderr).toEqual([]);
    const db = rawPool(url, 2);
    const witness = (await db.query<{ slot: Date; n: string }>('select slot, count(*) n from bree_witness group by slot')).rows;
    const runs = (await db.query<{ slot: Date; n: string }>("select slot, count(*) n from leasehold.runs where job = 'bree-report' group by slot")).rows;
    expect(witness.length).toBeGreaterThanOrEqual(2);
    for (const row of [...witness, ...runs]) expect(Number(row.n), row.slot.toISOString()).toBe(1);
    // both processes called (how often depends on how fast bree starts its worker threads);
    // whichever call came first for an occurrence ran it, the others did not
    const calls = procs.map((p) => p.lines.filter((l) => l.event === 'job'));
    for (const own of calls) expect(own.length).toBeGreaterThan(0);
    expect(calls.flat().length).toBeGreaterThanOrEqual(witness.length);
  });
});
