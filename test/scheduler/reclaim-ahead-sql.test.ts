// A slot claimed ahead and never started (sql/baseline/2_scheduler.sql): a peer claims it
// again at its slot when the lease is free (holder gone, or expired) and the holder never marked
// its start (start_tick); a mark keeps it the holder's; a live holder's unmarked slot is answered
// 'held-ahead' with the lease's expiry; a holder whose slot was taken learns it at its next
// mark. And a skip names the slot of the run holding the lease (a backfill's), not the last
// scheduled one.
import { beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { client, connections, freshDatabase } from '../support/db.js';

let url: string;
let conns: pg.Client[];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close(); // installs the schema
  conns = await connections(url, 2);
});

const register = (c: pg.Client, jobs: string[]) =>
  c.query(`select leasehold.register_jobs($1, array_fill('* * * * *'::text, array[$2::int]), array_fill(null::text, array[$2::int]),
             array_fill(60000::bigint, array[$2::int]), array_fill(30000::bigint, array[$2::int]), array_fill('skip'::text, array[$2::int]),
             array_fill('none'::text, array[$2::int]), 'test')`, [jobs, jobs.length]);

/** A worker's own connection: its liveness key, and a claim ahead of `slot` under it (ttl in ms). */
async function holderOf(job: string, slot: Date, ttlMs = 30_000): Promise<{ conn: pg.Client; key: string; fence: string; token: string }> {
  const conn = (await connections(url, 1))[0]!;
  const key = (await conn.query<{ key: string }>('select leasehold.register_liveness(true)::text as key')).rows[0]!.key;
  const { rows } = await conn.query<{ fence: string; token: string }>(
    `select fence, token from leasehold.claim(array[$1], array[$2::timestamptz], array[$3::bigint], array['exclusive'], array[0], 'holder', $4::bigint, false, 5000)`,
    [job, slot, ttlMs, key],
  );
  expect(rows).toHaveLength(1);
  return { conn, key, ...rows[0]! };
}

type ClaimRow = { claimed: boolean; reason: string; took_over: boolean; token: string | null; fence: string | null; expires_at: Date | null; holder: string | null; holder_slot: Date | null };
const claim = async (c: pg.Client, job: string, slot: Date, holder = 'peer') =>
  (
    await c.query<ClaimRow>(
      `select claimed, reason, took_over, token, fence, expires_at, holder, holder_slot from leasehold.claim(array[$1::text], array[$2::timestamptz::timestamptz], array[(extract(epoch from interval '30 seconds'::interval) * 1000)::bigint], array['exclusive'::text], array[0::int], $3, null, true)`,
      [job, slot, holder],
    )
  ).rows[0]!;

const databaseNow = async (c: pg.Client) => (await c.query<{ now: Date }>('select clock_timestamp() as now')).rows[0]!.now.getTime();
const until = async (c: pg.Client, at: number) => {
  while ((await databaseNow(c)) < at) await new Promise((resolve) => setTimeout(resolve, 25));
};
const nextSecond = async (c: pg.Client) => new Date(Math.ceil((await databaseNow(c)) / 1000) * 1000 + 1_000);
const history = async (c: pg.Client, job: string) =>
  (await c.query<{ slot: Date; holder: string; outcome: string; error: string | null }>('select slot, holder, outcome, error from leasehold.runs where job = $1 order by started_at, fence', [job])).rows;

describe('a slot claimed ahead and never started', () => {
  it('is claimed again at its slot by a peer once its holder is gone; the holder\'s run is recorded aborted, unstarted', async () => {
    const [peer] = conns as [pg.Client];
    await register(peer, ['re-dies']);
    const slot = await nextSecond(peer);
    const dying = await holderOf('re-dies', slot);
    await dying.conn.end(); // killed in the lead: its liveness session goes with it
    await until(peer, slot.getTime());
    const row = await claim(peer, 're-dies', slot);
    expect([row.claimed, row.took_over]).toEqual([true, true]);
    const runs = await history(peer, 're-dies');
    expect(runs.map((r) => [r.slot.getTime(), r.holder, r.outcome])).toEqual([
      [slot.getTime(), 'holder', 'aborted'],
      [slot.getTime(), 'peer', 'running'],
    ]);
    expect(runs[0]!.error).toMatch(/^not started: .* run by peer$/);
    // once: a second peer finds it taken
    expect((await claim(conns[1]!, 're-dies', slot, 'other')).reason).toBe('slot-taken');
  });

  it('is told to a starting worker (register_jobs, schedule_changes: last_slot_unstarted) once its holder is gone, and only then', async () => {
    const [peer] = conns as [pg.Client];
    const told = async (job: string) => {
      const registered = await peer.query<{ unstarted: boolean }>(
        `select last_slot_unstarted as unstarted from leasehold.register_jobs(array[$1], array['* * * * *'], array[null::text], array[60000::bigint],
           array[30000::bigint], array['skip'], array['none'], 'test')`,
        [job],
      );
      const changes = await peer.query<{ unstarted: boolean }>(
        `select last_slot_unstarted as unstarted from leasehold.schedule_changes(0, null, 10000) where name = $1`,
        [job],
      );
      return [registered.rows[0]!.unstarted, changes.rows[0]!.unstarted];
    };
    await register(peer, ['re-told', 're-told-marked']);
    expect(await told('re-told')).toEqual([false, false]); // never claimed
    const slot = await nextSecond(peer);
    const holder = await holderOf('re-told', slot);
    expect(await told('re-told')).toEqual([false, false]); // its holder lives
    await holder.conn.end(); // killed in the lead
    expect(await told('re-told')).toEqual([true, true]);
    // the slot the starting worker claims again is taken back (claim() at or after the slot)
    await until(peer, slot.getTime());
    expect((await claim(peer, 're-told', slot)).claimed).toBe(true);
    expect(await told('re-told')).toEqual([false, false]);
    // a holder that marked its start before it went may have run it: not told
    const later = await nextSecond(peer);
    const marked = await holderOf('re-told-marked', later);
    await marked.conn.query('select leasehold.start_tick($1::bigint, $2)', [marked.key, later]);
    await marked.conn.end();
    expect(await told('re-told-marked')).toEqual([false, false]);
  });

  it('stays its holder\'s once the holder marked its start, even if the holder is gone then', async () => {
    const [peer] = conns as [pg.Client];
    await register(peer, ['re-marked']);
    const slot = await nextSecond(peer);
    const holder = await holderOf('re-marked', slot);
    const marked = await holder.conn.query<{ ok: boolean }>('select leasehold.start_tick($1::bigint, $2) as ok', [holder.key, slot]);
    expect(marked.rows[0]!.ok).toBe(true);
    await holder.conn.end(); // killed after its mark: it may have started the run
    await until(peer, slot.getTime());
    expect((await claim(peer, 're-marked', slot)).reason).toBe('slot-taken');
    expect((await history(peer, 're-marked')).map((r) => [r.holder, r.outcome])).toEqual([['holder', 'running']]);
  });

  it('is answered held-ahead, with the lease\'s expiry, while its holder lives unmarked; taken once the holder marks', async () => {
    const [peer] = conns as [pg.Client];
    await register(peer, ['re-live']);
    const slot = await nextSecond(peer);
    const holder = await holderOf('re-live', slot);
    await until(peer, slot.getTime());
    const row = await claim(peer, 're-live', slot);
    expect([row.claimed, row.reason, row.holder, row.holder_slot?.getTime()]).toEqual([false, 'held-ahead', 'holder', slot.getTime()]);
    const { rows } = await peer.query<{ expires_at: Date }>(`select expires_at from leasehold.leases where name = 're-live'`);
    expect(row.expires_at?.getTime()).toBe(rows[0]!.expires_at.getTime());
    // the worker's call (only the rows to act on) gives that row too
    const tick = await peer.query<{ reason: string }>(
      `select reason from leasehold.claim(array['re-live'], array[$1::timestamptz], array[30000::bigint], array['exclusive'], array[0], 'peer')`,
      [slot],
    );
    expect(tick.rows.map((r) => r.reason)).toEqual(['held-ahead']);
    await holder.conn.query('select leasehold.start_tick($1::bigint, $2)', [holder.key, slot]);
    expect((await claim(peer, 're-live', slot)).reason).toBe('slot-taken');
    await holder.conn.query(`select leasehold.finish_runs(array['re-live'::text], array[$1::bigint], array[$2::uuid], array['succeeded'::text], array[null::text], array[1::int])`, [holder.fence, holder.token]);
    await holder.conn.end();
  });

  it('is taken by a peer when its lease expired unmarked (a paused holder); the holder\'s next mark says so and its renewal fails', async () => {
    const [peer] = conns as [pg.Client];
    await register(peer, ['re-paused']);
    const slot = await nextSecond(peer);
    const holder = await holderOf('re-paused', slot, 1_000);
    await until(peer, Math.max(slot.getTime(), (await peer.query<{ e: Date }>(`select expires_at as e from leasehold.leases where name = 're-paused'`)).rows[0]!.e.getTime()) + 10);
    const row = await claim(peer, 're-paused', slot);
    expect([row.claimed, row.took_over]).toEqual([true, true]);
    // the holder resumes: its mark says a peer took some of its runs, and its lease is gone
    const marked = await holder.conn.query<{ ok: boolean }>('select leasehold.start_tick($1::bigint, $2) as ok', [holder.key, slot]);
    expect(marked.rows[0]!.ok).toBe(false);
    const renewed = await holder.conn.query(`select * from leasehold.renew_leases(('re-paused', $1, interval '30 seconds'))`, [holder.token]);
    expect(renewed.rows.filter((r: { renewed?: boolean }) => r.renewed !== false).length).toBe(0);
    // a later mark with nothing newly taken is untouched again
    const later = await holder.conn.query<{ ok: boolean }>('select leasehold.start_tick($1::bigint, $2) as ok', [holder.key, new Date(slot.getTime() + 60_000)]);
    expect(later.rows[0]!.ok).toBe(true);
    await holder.conn.end();
  });

  it('is never claimed again without a liveness key (liveness off): the lease\'s expiry alone proves no start', async () => {
    const [peer] = conns as [pg.Client];
    await register(peer, ['re-no-key']);
    const slot = await nextSecond(peer);
    await peer.query(
      `select * from leasehold.claim(array['re-no-key'], array[$1::timestamptz], array[1000::bigint], array['exclusive'], array[0], 'holder', null, false, 5000)`,
      [slot],
    );
    await until(peer, slot.getTime() + 1_100);
    expect((await claim(peer, 're-no-key', slot)).reason).toBe('slot-taken');
  });

  it('refuses a null key or time', async () => {
    await expect(conns[0]!.query('select leasehold.start_tick(null, now())')).rejects.toMatchObject({ code: '22023' });
    await expect(conns[0]!.query('select leasehold.start_tick(1, null)')).rejects.toMatchObject({ code: '22023' });
  });
});

describe('a skip caused by a backfill run', () => {
  it('names the backfill run\'s slot as the holder\'s slot, not the last scheduled one', async () => {
    const [a, b] = conns as [pg.Client, pg.Client];
    await register(a, ['bf-skip']);
    const now = await databaseNow(a);
    const scheduled = new Date(Math.floor(now / 60_000) * 60_000 - 120_000);
    const first = await claim(a, 'bf-skip', scheduled, 'worker-a');
    await a.query(`select leasehold.finish_runs(array['bf-skip'::text], array[$1::bigint], array[$2::uuid], array['succeeded'::text], array[null::text], array[1::int])`, [first.fence, first.token]);
    const backfilled = new Date(scheduled.getTime() - 600_000);
    await a.query(`select * from leasehold.run_now('bf-skip', 'alice', array[$1::timestamptz])`, [backfilled]);
    const { rows: requests } = await a.query<{ claimed: boolean; slot: Date }>(`select claimed, slot from leasehold.claim_requests(array['bf-skip'], 'worker-a')`);
    expect(requests.map((r) => [r.claimed, r.slot.getTime()])).toEqual([[true, backfilled.getTime()]]);
    const next = new Date(scheduled.getTime() + 60_000);
    const skipped = await claim(b, 'bf-skip', next, 'worker-b');
    expect([skipped.reason, skipped.holder_slot?.getTime()]).toEqual(['held', backfilled.getTime()]);
    const { rows: skips } = await b.query<{ holder_slot: Date }>(`select holder_slot from leasehold.skips where job = 'bf-skip'`);
    expect(skips.map((s) => s.holder_slot.getTime())).toEqual([backfilled.getTime()]);
  });
});
