// The scheduler runtime in this process: overlap policies, catch-up, statements per tick.
// Workers here are separate clients with their own connections and liveness sessions.
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { setTimeout as sleep } from 'node:timers/promises';
import { LeaseLostError, startWorker, type JobOptions, type Worker } from '../../src/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { client, freshDatabase, rawPool, waitFor } from '../support/db.js';

let url: string;
const workers: Worker[] = [];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  await rawPool(url, 1).query('create table witness (job text, slot timestamptz, fence bigint, note text)');
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
});

async function worker(jobs: JobOptions[], holder?: string): Promise<Worker> {
  const w = await startWorker({ connectionString: url, jobs, logger: silentLogger(), handleSignals: false, shutdownGrace: '2s', ...(holder ? { holder } : {}) });
  workers.push(w);
  return w;
}

type RunRow = { slot: Date; fence: string; holder: string; started_at: Date; finished_at: Date | null; outcome: string; error: string | null };
const runs = async (job: string) =>
  (await rawPool(url, 2).query<RunRow>('select slot, fence, holder, started_at, finished_at, outcome, error from leasehold.runs where job = $1 order by fence', [job])).rows;
const skips = async (job: string) =>
  (await rawPool(url, 2).query<{ slot: Date; holder: string }>('select slot, holder from leasehold.skips where job = $1 order by slot', [job])).rows;

describe('overlap policies', () => {
  it('buffer-one starts the buffered slot right after the holder releases', async () => {
    await worker([{ name: 'buffer-one', every: '1s', ttl: '5s', overlap: 'buffer-one', handler: () => sleep(1_500) }]);
    await waitFor(async () => (await runs('buffer-one')).length >= 3, 10_000, 50);
    const history = await runs('buffer-one');
    const [first, second] = history as [RunRow, RunRow];
    // the second run is the slot that came due while the first held the lease ...
    expect(second.slot.getTime() - first.slot.getTime()).toBe(1_000);
    // ... and it started as soon as the first released, not at the next tick
    expect(second.started_at.getTime() - first.finished_at!.getTime()).toBeLessThan(300);
    expect(second.started_at.getTime() - second.slot.getTime()).toBeGreaterThan(400);
    for (let i = 1; i < history.length; i++) {
      if (history[i - 1]!.finished_at) expect(history[i]!.started_at.getTime()).toBeGreaterThanOrEqual(history[i - 1]!.finished_at!.getTime());
    }
  });

  it('buffer-all runs queued slots in order, one at a time, and respects its cap', async () => {
    await worker([{ name: 'buffer-all', every: '1s', ttl: '5s', overlap: 'buffer-all', bufferLimit: 2, handler: () => sleep(2_200) }]);
    await waitFor(async () => (await runs('buffer-all')).length >= 3, 12_000, 50);
    const history = await runs('buffer-all');
    const slots = history.map((r) => r.slot.getTime());
    expect(slots).toEqual([...slots].sort((a, b) => a - b));
    for (let i = 1; i < slots.length; i++) expect(slots[i]! - slots[i - 1]!).toBe(1_000); // consecutive: nothing dropped before the cap
    for (let i = 1; i < history.length; i++) expect(history[i]!.started_at.getTime()).toBeGreaterThanOrEqual(history[i - 1]!.finished_at!.getTime());
    const { rows } = await rawPool(url, 1).query<{ n: number }>(`select max(n)::int as n from (select count(*) as n from leasehold.buffered where job = 'buffer-all') b`);
    expect(rows[0]!.n ?? 0).toBeLessThanOrEqual(2);
    // the cap drops the overflow: those slots are skipped for good
    const skipped = await skips('buffer-all');
    expect(skipped.some((s) => !slots.includes(s.slot.getTime()))).toBe(true);
  });

  it('replace takes the lease over: the old run is signalled and its fenced write refused', async () => {
    const seen: Array<{ fence: number; reason: unknown; write: unknown }> = [];
    await worker([
      {
        name: 'replace',
        every: '1s',
        ttl: '5s',
        overlap: 'replace',
        handler: async (ctx) => {
          // the first run is slow and ignores its signal until it tries to write
          if (ctx.fence === 1) await sleep(2_000);
          const write = await ctx
            .transaction((c) => c.query(`insert into witness values ('replace', $1, $2, 'x')`, [ctx.slot, ctx.fence]))
            .then(() => 'written', (e: unknown) => e);
          seen.push({ fence: ctx.fence, reason: ctx.signal.reason, write });
        },
      },
    ]);
    await waitFor(() => seen.some((s) => s.fence === 1), 10_000, 50);
    const old = seen.find((s) => s.fence === 1)!;
    expect(old.reason).toBeInstanceOf(LeaseLostError);
    // taken over, or already released again by the short run that replaced it
    expect(['taken-over', 'released']).toContain((old.reason as LeaseLostError).reason);
    expect(old.write).toBeInstanceOf(LeaseLostError);
    expect(seen.some((s) => s.fence > 1 && s.write === 'written')).toBe(true);
    const first = (await runs('replace'))[0]!;
    expect(first).toMatchObject({ fence: '1', outcome: 'lost' });
    const { rows } = await rawPool(url, 1).query(`select fence from witness where job = 'replace' and fence = 1`);
    expect(rows).toEqual([]);
  });

  it('allow runs overlapping slots in parallel, each slot once', async () => {
    let concurrent = 0;
    let most = 0;
    await worker([
      {
        name: 'allow',
        every: '1s',
        overlap: 'allow',
        handler: async () => {
          most = Math.max(most, ++concurrent);
          await sleep(2_500);
          concurrent--;
        },
      },
    ]);
    await waitFor(() => most >= 2, 10_000, 50);
    const history = await runs('allow');
    expect(new Set(history.map((r) => r.slot.getTime())).size).toBe(history.length);
    expect(await skips('allow')).toEqual([]);
  });
});

describe('catch-up after all workers were down', () => {
  // "Down for 10 slots": the job last claimed a slot 10 s ago (moved in the database).
  async function downFor(job: string, seconds: number): Promise<Date> {
    const pool = rawPool(url, 1);
    await pool.query(
      `insert into leasehold.leases (name, fence, last_slot) values ($1, 0, date_trunc('second', now()) - make_interval(secs => $2))
       on conflict (name) do update set last_slot = excluded.last_slot`,
      [job, seconds],
    );
    return (await pool.query(`select last_slot from leasehold.leases where name = $1`, [job])).rows[0].last_slot as Date;
  }
  const missedSlots = async (job: string) =>
    (await rawPool(url, 1).query<{ slot: Date }>('select slot from leasehold.missed where job = $1 order by slot', [job])).rows.map((r) => r.slot.getTime());

  it("'latest' runs the most recent missed slot at once and records the others as missed", async () => {
    const last = await downFor('catch-latest', 10);
    const started = Date.now();
    await worker([{ name: 'catch-latest', every: '1s', catchUp: 'latest', handler: async () => undefined }]);
    await waitFor(async () => (await runs('catch-latest')).length >= 1, 5_000, 20);
    const [first] = await runs('catch-latest');
    expect(first!.started_at.getTime() - started).toBeLessThan(900); // before the next regular slot
    expect(first!.slot.getTime() - last.getTime()).toBeGreaterThanOrEqual(9_000);
    const missed = await waitFor(async () => {
      const m = await missedSlots('catch-latest');
      return m.length > 0 ? m : undefined;
    });
    expect(missed[0]).toBe(last.getTime() + 1_000);
    expect(missed.length).toBe((first!.slot.getTime() - last.getTime()) / 1_000 - 1);
  });

  it('records the slots a whole fleet of jobs missed in one statement, not one per job', async () => {
    const pool = rawPool(url, 1);
    const names = Array.from({ length: 300 }, (_, i) => `catch-fleet-${String(i).padStart(3, '0')}`);
    await pool.query(
      `insert into leasehold.leases (name, fence, last_slot) select n, 0, date_trunc('second', now()) - interval '6 seconds' from unnest($1::text[]) n
       on conflict (name) do update set last_slot = excluded.last_slot`,
      [names],
    );
    // statistics of every function call, for the worker's sessions opened from now on
    const db = (await pool.query<{ d: string }>('select current_database() as d')).rows[0]!.d;
    await pool.query(`alter database "${db}" set track_functions = 'all'`);
    try {
      const fleet = await worker(names.map((name) => ({ name, every: '1s', catchUp: 'latest' as const, handler: async () => undefined })));
      const counted = await waitFor(async () => {
        const { rows } = await pool.query<{ n: number; jobs: number }>(
          `select count(*)::int as n, count(distinct job)::int as jobs from leasehold.missed where job like 'catch-fleet-%'`,
        );
        return rows[0]!.jobs === names.length ? rows[0] : undefined;
      }, 10_000, 50);
      expect(counted!.n).toBeGreaterThanOrEqual(names.length * 4);
      // PostgreSQL 14's statistics collector hears of a session's calls at its next transaction
      // after 500 ms or when it ends (15 and later within a second): end the worker's sessions.
      await fleet.stop();
      const calls = await waitFor(async () => {
        const { rows } = await pool.query<{ fn: string; calls: number }>(
          `select funcname as fn, calls::int from pg_stat_user_functions where schemaname = 'leasehold' and funcname in ('record_missed', 'record_missed_slots')`,
        );
        const slots = rows.find((r) => r.fn === 'record_missed_slots');
        return slots ? rows : undefined;
      }, 5_000, 100);
      // one claim of all 300 jobs: one statement for their missed slots
      expect(calls.find((r) => r.fn === 'record_missed_slots')!.calls).toBeLessThanOrEqual(2);
      expect(calls.find((r) => r.fn === 'record_missed')?.calls ?? 0).toBe(0);
    } finally {
      await pool.query(`alter database "${db}" reset track_functions`);
    }
  });

  it("'none' runs nothing until the next slot, and the gap is recorded as missed", async () => {
    const last = await downFor('catch-none', 10);
    await worker([{ name: 'catch-none', every: '1s', catchUp: 'none', handler: async () => undefined }]);
    await waitFor(async () => (await runs('catch-none')).length >= 1, 5_000, 20);
    const [first] = await runs('catch-none');
    expect(first!.started_at.getTime() - first!.slot.getTime()).toBeLessThan(500); // a regular, on-time slot
    const missed = await waitFor(async () => {
      const m = await missedSlots('catch-none');
      return m.length > 0 ? m : undefined;
    });
    expect(missed.length).toBe((first!.slot.getTime() - last.getTime()) / 1_000 - 1);
  });

  it("{ all: 3 } runs the three most recent missed slots in order, the rest are missed", async () => {
    const last = await downFor('catch-all', 10);
    await worker([{ name: 'catch-all', every: '1s', catchUp: { all: 3 }, handler: () => sleep(50) }]);
    await waitFor(async () => (await runs('catch-all')).length >= 3, 5_000, 20);
    const history = await runs('catch-all');
    const firstThree = history.slice(0, 3).map((r) => r.slot.getTime());
    expect(firstThree[1]! - firstThree[0]!).toBe(1_000);
    expect(firstThree[2]! - firstThree[1]!).toBe(1_000);
    const missed = await missedSlots('catch-all');
    expect(missed[0]).toBe(last.getTime() + 1_000);
    expect(missed.at(-1)).toBe(firstThree[0]! - 1_000);
  });
});

describe('many jobs', () => {
  it("registers and claims jobs whose durations are not whole milliseconds in floating point ('4.1m')", async () => {
    // 4.1 * 60,000 is 245999.99999999997: a duration is read as whole milliseconds, which the
    // bigint arguments of register_jobs and claim_due take (they refused it before)
    await worker([
      { name: 'odd-ttl', every: '1s', ttl: '4.1m', timeout: '8.3m', handler: () => sleep(100) },
      { name: 'seconds-ttl', every: '1s', ttl: '2.5s', handler: () => sleep(100) },
    ]);
    await waitFor(async () => (await runs('odd-ttl')).some((r) => r.outcome === 'succeeded') && (await runs('seconds-ttl')).some((r) => r.outcome === 'succeeded'), 5_000, 50);
    const { rows } = await rawPool(url, 1).query<{ name: string; ttl_ms: string }>(
      `select name, (extract(epoch from ttl) * 1000)::bigint::text as ttl_ms from leasehold.leases where name in ('odd-ttl', 'seconds-ttl') order by name`,
    );
    expect(rows).toEqual([
      { name: 'odd-ttl', ttl_ms: '246000' },
      { name: 'seconds-ttl', ttl_ms: '2500' },
    ]);
  });

  it('claims 300 jobs due at the same tick with one statement per tick, each slot once', async () => {
    const jobs: JobOptions[] = Array.from({ length: 300 }, (_, i) => ({ name: `bulk-${i}`, every: '1s', handler: async () => undefined }));
    const pool = rawPool(url, 1);
    // the earlier tests' workers are gone, liveness sessions included: this worker's share is all
    await waitFor(async () => (await pool.query<{ n: number }>('select count(*)::int as n from leasehold.liveness_locks()')).rows[0]!.n === 0, 5_000, 20);
    await worker(jobs);
    let claims = 0;
    const claimedPerTick: number[] = [];
    // count claim statements (one claim_slots() call each) for the next ~3 ticks
    const spy = (await import('../../src/worker/claims.js')).SchedulerStore.prototype;
    const claim = spy.claim;
    spy.claim = async function (this: typeof spy, ...args: Parameters<typeof claim>) {
      claims++;
      claimedPerTick.push(args[0].length);
      return claim.apply(this, args);
    };
    try {
      await sleep(3_300);
    } finally {
      spy.claim = claim;
    }
    const ticks = claimedPerTick.filter((n) => n === 300).length;
    expect(ticks).toBeGreaterThanOrEqual(2);
    expect(claims).toBeLessThanOrEqual(ticks + 2); // retries of a few transient refusals at most
    const { rows } = await pool.query<{ dupes: number; jobs: number }>(
      `select (select count(*)::int from (select job, slot from leasehold.runs where job like 'bulk-%' group by 1, 2 having count(*) > 1) d) as dupes,
              (select count(distinct job)::int from leasehold.runs where job like 'bulk-%') as jobs`,
    );
    expect(rows[0]).toEqual({ dupes: 0, jobs: 300 });
  });
});

describe('outcomes', () => {
  it('records a handler whose promise rejects without a reason (undefined) as failed, saying so', async () => {
    await worker([{ name: 'rejects-undefined', every: '1s', handler: () => Promise.reject(undefined) }]);
    const [run] = await waitFor(async () => {
      const ended = (await runs('rejects-undefined')).filter((r) => r.finished_at);
      return ended.length > 0 ? ended : null;
    });
    expect([run!.outcome, run!.error]).toEqual(['failed', 'Error: the handler rejected without a reason (undefined)']);
  });
});
