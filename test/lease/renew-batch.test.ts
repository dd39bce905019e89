// Heartbeats that do not grow with the number of leases: leasehold.renew_leases (one statement
// renews many leases) and the client's shared heartbeat
// (one statement per beat for all of its kept leases, whatever their ttls).
//
// Renewals in one statement share one transaction time: a renewal event's expiresAt minus the
// lease's ttl is that time, so counting distinct values counts statements, under any load.
import { randomUUID } from 'node:crypto';
import { beforeAll, describe, expect, it } from 'vitest';
import { startWorker, type Lease, type Leasehold } from '../../src/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { client, freshDatabase, rawPool, sleep, waitFor } from '../support/db.js';

let url: string;

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
});

const held = (result: Awaited<ReturnType<Leasehold['acquire']>>): Lease => {
  if (!result.acquired) throw new Error(`expected to acquire, got ${result.reason}`);
  return result.lease;
};

/** Transaction times (ms) of the renewals `leasehold` reports, per lease name. */
function renewalTimes(leasehold: Leasehold, ttlOf: (name: string) => number): Map<string, number[]> {
  const times = new Map<string, number[]>();
  leasehold.on('lease:renewed', (info) => {
    const list = times.get(info.name) ?? [];
    list.push(info.expiresAt.getTime() - ttlOf(info.name));
    times.set(info.name, list);
  });
  return times;
}

describe('leasehold.renew_leases', () => {
  it('answers one row per element, in order; a bad element renews nothing', async () => {
    const pool = rawPool(url, 1);
    const take = async (name: string) =>
      (await pool.query<{ token: string }>(`select token from leasehold.acquire($1, '1 minute', 'sql')`, [name])).rows[0]!.token;
    const mine = await take('batch-mine');
    const released = await take('batch-released');
    await pool.query(`select leasehold.release('batch-released', $1)`, [released]);
    const theirs = await take('batch-theirs');
    const expired = (await pool.query<{ token: string }>(`select token from leasehold.acquire('batch-expired', '100 milliseconds', 'sql')`)).rows[0]!.token;
    await sleep(150);
    const call = `select * from leasehold.renew_leases(variadic array(
                    select row(n, t, i)::leasehold.lease_renewal
                      from unnest($1::text[], $2::uuid[], $3::interval[]) with ordinality as u(n, t, i, k) order by k))`;
    const { rows } = await pool.query<{ name: string; renewed: boolean; reason: string; database_time: Date; expires_at: Date | null }>(call, [
      ['batch-mine', 'batch-released', 'batch-theirs', 'batch-unknown', 'batch-expired'],
      [mine, released, randomUUID(), randomUUID(), expired],
      ['2 minutes', '1 minute', '1 minute', '1 minute', '1 minute'],
    ]);
    expect(rows.map((r) => [r.name, r.renewed, r.reason])).toEqual([
      ['batch-mine', true, 'renewed'],
      ['batch-released', false, 'released'],
      ['batch-theirs', false, 'taken-over'],
      ['batch-unknown', false, 'unknown'],
      ['batch-expired', false, 'expired'],
    ]);
    expect(new Set(rows.map((r) => r.database_time.getTime())).size).toBe(1);
    expect(rows[0]!.expires_at!.getTime() - rows[0]!.database_time.getTime()).toBe(120_000);

    // one bad ttl: the statement fails with the ttl's SQLSTATE and renews nothing
    const before = (await pool.query<{ seconds_left: number }>(`select seconds_left from leasehold.lease_status where name = 'batch-mine'`)).rows[0]!;
    await expect(pool.query(call, [['batch-mine', 'batch-theirs'], [mine, theirs], ['10 minutes', '8 days']])).rejects.toMatchObject({ code: 'LH002' });
    const after = (await pool.query<{ seconds_left: number }>(`select seconds_left from leasehold.lease_status where name = 'batch-mine'`)).rows[0]!;
    expect(after.seconds_left).toBeLessThanOrEqual(before.seconds_left);
    // a hostile name is refused (LH001), not answered 'unknown'
    await expect(pool.query(call, [['batch-mine', 'bad\u0007name'], [mine, randomUUID()], ['1 minute', '1 minute']])).rejects.toMatchObject({ code: 'LH001' });
    expect((await pool.query(`select * from leasehold.renew_leases(variadic null)`)).rows).toEqual([]);
    expect((await pool.query(`select * from leasehold.renew_leases(variadic '{}')`)).rows).toEqual([]);
  });
});

describe('leasehold.renew_leases at scale', () => {
  // Statistics taken while most leases were released estimate "not expired" at one row. The
  // renewal joins its input with the lease rows; planned as a nested loop on that estimate it
  // compared every lease with every element (1,000 leases: 220 ms instead of 10). Its plan must
  // not rest on that estimate: a hash or merge join (confirm_leases sets enable_nestloop off).
  it('renews 300 leases without a nested loop over them, even right after ANALYZE saw them released', async () => {
    // a database of its own: only these leases in the statistics
    const own = await freshDatabase();
    await (await client(own, { liveness: false })).close();
    const pool = rawPool(own, 2);
    const names = Array.from({ length: 300 }, (_, i) => `scale-${i}`);
    const take = async () =>
      (
        await pool.query<{ name: string; token: string }>(
          `select n as name, a.token::text as token from unnest($1::text[]) n, leasehold.acquire(n, '1 minute', 'sql') a`,
          [names],
        )
      ).rows;
    const first = await take();
    await pool.query(`select leasehold.release(n, t) from unnest($1::text[], $2::uuid[]) as u(n, t)`, [first.map((r) => r.name), first.map((r) => r.token)]);
    await pool.query('vacuum analyze leasehold.leases');
    const leases = await take();
    const c = await pool.connect();
    try {
      try {
        await c.query(`load 'auto_explain'`);
      } catch {
        return; // an embedded server without contrib modules
      }
      const plans: string[] = [];
      c.on('notice', (notice: { message?: string | undefined }) => {
        if (notice.message?.includes('Update on leases')) plans.push(notice.message);
      });
      await c.query(`set auto_explain.log_min_duration = 0; set auto_explain.log_nested_statements = on; set client_min_messages = log`);
      const renew = () =>
        c.query<{ renewed: number }>(
          `select count(*) filter (where renewed)::int as renewed from leasehold.renew_leases(variadic array(
             select row(n, t, interval '1 minute')::leasehold.lease_renewal from unnest($1::text[], $2::uuid[]) as u(n, t)))`,
          [leases.map((r) => r.name), leases.map((r) => r.token)],
        );
      expect((await renew()).rows[0]!.renewed).toBe(300);
      expect(plans).toHaveLength(1);
      expect(plans[0]).not.toMatch(/Nested Loop/);
      // the same function without its two settings, on the generic plan a connection settles on
      // after five calls (the input's size unknown when it is planned): the nested loop this
      // guards against
      const original = (await c.query<{ def: string }>(`select pg_get_functiondef('leasehold.confirm_leases(text[], uuid[], interval[])'::regprocedure) as def`)).rows[0]!.def;
      const unguarded = original
        .replace(/^\s*SET enable_nestloop TO 'off'\s*$/im, '')
        .replace(/^\s*SET plan_cache_mode TO 'force_custom_plan'\s*$/im, " SET plan_cache_mode TO 'force_generic_plan'");
      expect(unguarded).not.toMatch(/enable_nestloop|force_custom_plan/);
      await c.query(unguarded);
      try {
        plans.length = 0;
        await renew();
        expect(plans[0]).toMatch(/Nested Loop/);
      } finally {
        await c.query(original);
      }
    } finally {
      await c.query('set client_min_messages = notice').catch(() => undefined);
      c.release();
      await pool.end();
    }
  });
});

describe('the shared heartbeat', () => {
  it('renews 40 leases of one ttl with one statement per beat, not one per lease', async () => {
    const leasehold = await client(url, { liveness: false });
    const ttlMs = 900; // a beat every 300 ms
    const times = renewalTimes(leasehold, () => ttlMs);
    const leases: Lease[] = [];
    for (let i = 0; i < 40; i++) {
      leases.push(held(await leasehold.acquire(`one-ttl-${i}`, { ttl: ttlMs, heartbeat: true })));
      if (i % 10 === 9) await sleep(100); // acquired at different moments, so not in step at first
    }
    const started = Date.now();
    await sleep(2_400); // 2.7 × ttl: only renewals keep them
    const elapsed = Date.now() - started;
    for (const lease of leases) expect(lease.lost, lease.name).toBe(false);
    const statements = new Set([...times.values()].flat());
    // every lease renewed, by statements that do not grow with the number of leases: about
    // one per 300 ms (fewer when the machine is slow; two extra for the leases' staggered start)
    for (const lease of leases) expect(times.get(lease.name)?.length ?? 0, lease.name).toBeGreaterThanOrEqual(2);
    expect(statements.size).toBeLessThanOrEqual(Math.ceil(elapsed / 300) + 3);
    expect(statements.size).toBeLessThan(leases.length);
    await leasehold.close();
  }, 30_000);

  it('batches leases of different ttls: a longer ttl rides along with the beats of the shorter one', async () => {
    const leasehold = await client(url, { liveness: false });
    const ttl: Record<string, number> = { short: 600, long: 3_000 };
    const times = renewalTimes(leasehold, (name) => ttl[name]!);
    const short = held(await leasehold.acquire('short', { ttl: ttl.short!, heartbeat: true }));
    const long = held(await leasehold.acquire('long', { ttl: ttl.long!, heartbeat: true }));
    await waitFor(() => (times.get('long')?.length ?? 0) >= 2, 15_000);
    expect([short.lost, long.lost]).toEqual([false, false]);
    const shortTimes = new Set(times.get('short'));
    // every renewal of the long lease went out in a statement that renewed the short one too
    for (const at of times.get('long')!) expect(shortTimes.has(at)).toBe(true);
    await leasehold.close();
  }, 30_000);

  it('loses only the lease that was taken away, with its reason, and keeps renewing the others', async () => {
    const leasehold = await client(url, { liveness: false });
    const a = held(await leasehold.acquire('keep-a', { ttl: 600, heartbeat: true }));
    const b = held(await leasehold.acquire('keep-b', { ttl: 600, heartbeat: true }));
    const c = held(await leasehold.acquire('keep-c', { ttl: 600, heartbeat: true }));
    await rawPool(url, 1).query(`select leasehold.force_release('keep-b')`);
    await waitFor(() => b.lost, 5_000);
    expect(b.signal.reason).toMatchObject({ reason: 'released' });
    await sleep(1_500); // 2.5 × ttl
    expect([a.lost, c.lost]).toEqual([false, false]);
    await leasehold.close();
  }, 30_000);

  it("keeps a worker's running leases alive with the same shared heartbeat", async () => {
    const ttlMs = 1_500; // a beat every 500 ms
    const jobs = Array.from({ length: 12 }, (_, i) => ({ name: `worker-beat-${i}`, every: '1s', ttl: ttlMs, handler: () => sleep(1_800) }));
    const worker = await startWorker({ connectionString: url, jobs, logger: silentLogger(), handleSignals: false, shutdownGrace: '5s' });
    try {
      const times = renewalTimes(worker.leasehold, () => ttlMs);
      const outcomes: string[] = [];
      worker.on('run:finished', (run) => outcomes.push(run.outcome));
      await waitFor(() => outcomes.length >= 12, 30_000);
      expect(outcomes.filter((outcome) => outcome !== 'succeeded')).toEqual([]);
      const renewed = [...times.values()].flat();
      // runs of 1.8 s renewed every 500 ms, twelve at a time: many renewals per statement
      expect(renewed.length).toBeGreaterThanOrEqual(12);
      expect(new Set(renewed).size).toBeLessThan(renewed.length / 3);
    } finally {
      await worker.stop();
    }
  }, 60_000);

  it('falls back to one renewal per lease when the server refuses the batch, so a lock on one row loses no other lease', async () => {
    const leasehold = await client(url, { liveness: false });
    // a beat every 2.5 s, with a read timeout (ttl/3) above renew_leases' lock_timeout of 2 s
    const ttlMs = 7_500;
    const renewed: string[] = [];
    leasehold.on('lease:renewed', (info) => renewed.push(info.name));
    held(await leasehold.acquire('fallback-locked', { ttl: ttlMs, heartbeat: true }));
    const free = held(await leasehold.acquire('fallback-free', { ttl: ttlMs, heartbeat: true }));
    const blocker = await rawPool(url, 1).connect();
    try {
      await blocker.query('begin');
      await blocker.query(`select 1 from leasehold.leases where name = 'fallback-locked' for no key update`);
      // the beat's statement waits for the lock, is refused (55P03) and is sent again lease by lease
      await waitFor(() => renewed.includes('fallback-free'), 10_000);
      expect(free.lost).toBe(false);
      await blocker.query('commit');
    } finally {
      blocker.release();
    }
    await leasehold.close();
  }, 30_000);
});
