// leasehold.claim() with ahead_ms (sql/baseline/1_leases.sql): a slot due within ahead_ms is claimed
// before it is due, only from a free lease; what it leaves is claimed at the slot with the
// usual decisions, and a slot claimed ahead is taken for every later claim.
import { beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { client, connections, freshDatabase } from '../support/db.js';

let url: string;
let conns: pg.Client[];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close(); // installs the schema
  conns = await connections(url, 3);
});

type AheadRow = { job: string; slot: number; token: string; fence: string; expires_at: number; previous_slot: number | null; database_time: number };

const register = (c: pg.Client, jobs: string[]) =>
  c.query(`select leasehold.register_jobs($1, array_fill('* * * * *'::text, array[$2::int]), array_fill(null::text, array[$2::int]),
             array_fill(60000::bigint, array[$2::int]), array_fill(30000::bigint, array[$2::int]), array_fill('skip'::text, array[$2::int]),
             array_fill('none'::text, array[$2::int]), 'test')`, [jobs, jobs.length]);

/** claim() with ahead_ms of one slot per job, overlap 'skip'. */
const claimAhead = async (c: pg.Client, jobs: string[], slot: Date, aheadMs: number, holder = 'worker-a', starts: Date[] | null = null) =>
  (
    await c.query<AheadRow>(
      `select job, (extract(epoch from slot) * 1000)::float8 as slot, token, fence, (extract(epoch from expires_at) * 1000)::float8 as expires_at, (extract(epoch from previous_slot) * 1000)::float8 as previous_slot, (extract(epoch from database_time) * 1000)::float8 as database_time from leasehold.claim($1::text[], array_fill($2::timestamptz, array[$3::int]), array_fill(30000::bigint, array[$3::int]), array_fill('exclusive'::text, array[$3::int]), array_fill(0, array[$3::int]), $4, null, false, $5, $6::timestamptz[]) order by job`,
      [jobs, slot, jobs.length, holder, aheadMs, starts],
    )
  ).rows;

/** claim() of one slot per job at the slot, overlap 'skip'. */
const claim = async (c: pg.Client, jobs: string[], slot: Date, holder: string) =>
  (
    await c.query<{ job: string; claimed: boolean; reason: string; token: string | null; fence: string | null; skip_recorded: boolean }>(
      `select job, claimed, reason, token, fence, skip_recorded from leasehold.claim($1::text[], array_fill($2::timestamptz, array[cardinality($1::text[])]), array_fill((extract(epoch from interval '30 seconds'::interval) * 1000)::bigint, array[cardinality($1::text[])]), array_fill('exclusive'::text, array[cardinality($1::text[])]), array_fill(0::int, array[cardinality($1::text[])]), $3, null, true)
        order by job`,
      [jobs, slot, holder],
    )
  ).rows;

const finish = (c: pg.Client, job: string, fence: string, token: string) =>
  c.query(`select * from leasehold.finish_runs(array[$1::text], array[$2::bigint], array[$3::uuid], array['succeeded'::text], array[null::text], array[1::int])`, [job, fence, token]);

const databaseNow = async (c: pg.Client) => (await c.query<{ now: Date }>('select clock_timestamp() as now')).rows[0]!.now.getTime();

describe('claim_ahead', () => {
  it('claims a slot due within ahead_ms from a free lease, and every later claim of that slot finds it taken', async () => {
    const [a, b] = conns as [pg.Client, pg.Client];
    await register(a, ['ahead-1', 'ahead-2']);
    const slot = new Date(Math.ceil((await databaseNow(a)) / 1000) * 1000 + 2_000);
    // 500 ms ahead of a slot 2-3 s away: not yet
    expect(await claimAhead(a, ['ahead-1', 'ahead-2'], slot, 500)).toEqual([]);
    const rows = await claimAhead(a, ['ahead-1', 'ahead-2'], slot, 5_000);
    expect(rows.map((r) => [r.job, r.slot, r.fence])).toEqual([
      ['ahead-1', slot.getTime(), '1'],
      ['ahead-2', slot.getTime(), '1'],
    ]);
    expect(rows[0]!.database_time).toBeLessThan(slot.getTime());
    // a peer's claim at the slot (and another claim ahead) find it taken: nothing comes back
    expect(await claimAhead(b, ['ahead-1'], slot, 5_000, 'worker-b')).toEqual([]);
    while ((await databaseNow(b)) < slot.getTime()) await new Promise((resolve) => setTimeout(resolve, 50));
    expect((await claim(b, ['ahead-1'], slot, 'worker-b')).map((r) => [r.claimed, r.reason])).toEqual([[false, 'slot-taken']]);
    // the run in flight starts at its slot, not at the claim
    const { rows: running } = await a.query<{ started_at: Date; outcome: string }>(`select started_at, outcome from leasehold.runs where job = 'ahead-1'`);
    expect(running.map((r) => [r.started_at.getTime(), r.outcome])).toEqual([[slot.getTime(), 'running']]);
    await finish(a, 'ahead-1', rows[0]!.fence, rows[0]!.token);
    await finish(a, 'ahead-2', rows[1]!.fence, rows[1]!.token);
  });

  it('starts the run at the start given (the slot plus its jitter), never before the slot', async () => {
    const [a] = conns as [pg.Client];
    await register(a, ['ahead-start']);
    const slot = new Date(Math.ceil((await databaseNow(a)) / 1000) * 1000 + 1_000);
    const [row] = await claimAhead(a, ['ahead-start'], slot, 5_000, 'worker-a', [new Date(slot.getTime() + 1_234)]);
    const { rows } = await a.query<{ started_at: Date }>(`select started_at from leasehold.runs where job = 'ahead-start'`);
    expect(rows[0]!.started_at.getTime()).toBe(slot.getTime() + 1_234);
    await finish(a, 'ahead-start', row!.fence, row!.token);
    // a start given before its slot counts as the slot
    const next = new Date(slot.getTime() + 1_000);
    const [again] = await claimAhead(a, ['ahead-start'], next, 5_000, 'worker-a', [new Date(slot.getTime() - 5_000)]);
    const { rows: second } = await a.query<{ started_at: Date }>(`select started_at from leasehold.runs where job = 'ahead-start' and slot = $1`, [next]);
    expect(second.map((r) => r.started_at.getTime())).toEqual([next.getTime()]);
    await finish(a, 'ahead-start', again!.fence, again!.token);
  });

  it('leaves a held lease to the claim at the slot: no skip is recorded ahead, and the slot runs if the holder released in time', async () => {
    const [a, b] = conns as [pg.Client, pg.Client];
    await register(a, ['ahead-held']);
    const now = await databaseNow(a);
    const [held] = await claim(a, ['ahead-held'], new Date(now - 1_000), 'worker-a');
    expect(held!.claimed).toBe(true);
    const slot = new Date(Math.ceil(now / 1000) * 1000 + 1_000);
    expect(await claimAhead(b, ['ahead-held'], slot, 5_000, 'worker-b')).toEqual([]);
    expect((await b.query(`select 1 from leasehold.skips where job = 'ahead-held'`)).rowCount).toBe(0);
    await finish(a, 'ahead-held', held!.fence!, held!.token!);
    // at the slot, the usual claim
    while ((await databaseNow(b)) < slot.getTime()) await new Promise((resolve) => setTimeout(resolve, 50));
    const [atSlot] = await claim(b, ['ahead-held'], slot, 'worker-b');
    expect([atSlot!.claimed, atSlot!.reason]).toEqual([true, 'claimed']);
    await finish(b, 'ahead-held', atSlot!.fence!, atSlot!.token!);
  });

  it('a slot claimed ahead by a holder that died before its start is recorded lost when the next slot\'s claim takes the lease over', async () => {
    const [a, b] = conns as [pg.Client, pg.Client];
    await register(a, ['ahead-dies']);
    const dying = (await connections(url, 1))[0]!;
    const key = (await dying.query<{ key: string }>('select leasehold.register_liveness(true)::text as key')).rows[0]!.key;
    const slot = new Date(Math.ceil((await databaseNow(a)) / 1000) * 1000 + 1_000);
    const rows = await dying.query(
      `select job, (extract(epoch from slot) * 1000)::float8 as slot, token, fence, (extract(epoch from expires_at) * 1000)::float8 as expires_at, (extract(epoch from previous_slot) * 1000)::float8 as previous_slot, (extract(epoch from database_time) * 1000)::float8 as database_time from leasehold.claim(array['ahead-dies'], array[$1::timestamptz], array[30000::bigint], array['exclusive'], array[0], 'dying', $2::bigint, false, 5000)`,
      [slot, key],
    );
    expect(rows.rowCount).toBe(1);
    await dying.end(); // killed before the slot: its liveness session goes with it
    const next = new Date(slot.getTime() + 1_000);
    while ((await databaseNow(b)) < next.getTime()) await new Promise((resolve) => setTimeout(resolve, 50));
    const [taken] = await claim(b, ['ahead-dies'], next, 'worker-b');
    expect(taken!.claimed).toBe(true);
    const { rows: history } = await b.query<{ slot: Date; outcome: string; error: string | null }>(`select slot, outcome, error from leasehold.runs where job = 'ahead-dies' order by slot`);
    expect(history.map((r) => [r.slot.getTime(), r.outcome])).toEqual([
      [slot.getTime(), 'lost'],
      [next.getTime(), 'running'],
    ]);
    await finish(b, 'ahead-dies', taken!.fence!, taken!.token!);
  });

  it('leaves a paused job, a job with queued slots and a slot recorded skipped alone', async () => {
    const [a] = conns as [pg.Client];
    await register(a, ['ahead-paused', 'ahead-queued', 'ahead-skipped']);
    await a.query(`select leasehold.pause_job('ahead-paused', 'test')`);
    const slot = new Date(Math.ceil((await databaseNow(a)) / 1000) * 1000 + 1_000);
    await a.query(`select leasehold.enqueue_slots('ahead-queued', array[$1::timestamptz])`, [new Date(slot.getTime() - 60_000)]);
    await a.query(`insert into leasehold.skips (job, slot, holder, recorded_by) values ('ahead-skipped', $1, 'someone', 'test')`, [slot]);
    expect(await claimAhead(a, ['ahead-paused', 'ahead-queued', 'ahead-skipped'], slot, 5_000)).toEqual([]);
  });

  it('refuses an ahead_ms outside 0-10000, arrays of other lengths and bad requests, and claims nothing', async () => {
    const [a] = conns as [pg.Client];
    await register(a, ['ahead-args']);
    const slot = new Date((await databaseNow(a)) + 1_000);
    // (a null ahead_ms is a claim at the slot)
    for (const ahead of [-1, 10_001]) {
      await expect(claimAhead(a, ['ahead-args'], slot, ahead as number)).rejects.toMatchObject({ code: '22023', message: expect.stringContaining('ahead_ms must be between 0 and 10000') });
    }
    await expect(claimAhead(a, ['ahead-args'], slot, 5_000, 'worker-a', [slot, slot])).rejects.toMatchObject({ code: '22023' });
    await expect(
      a.query(`select job, (extract(epoch from slot) * 1000)::float8 as slot, token, fence, (extract(epoch from expires_at) * 1000)::float8 as expires_at, (extract(epoch from previous_slot) * 1000)::float8 as previous_slot, (extract(epoch from database_time) * 1000)::float8 as database_time from leasehold.claim(array['ahead-args'], array[$1::timestamptz], array[30000::bigint], array['sometimes'], array[0], 'w', null, false, 1000)`, [slot]),
    ).rejects.toMatchObject({ code: '22023', message: expect.stringContaining('mode must be exclusive, replace or allow') });
    await expect(
      a.query(`select job, (extract(epoch from slot) * 1000)::float8 as slot, token, fence, (extract(epoch from expires_at) * 1000)::float8 as expires_at, (extract(epoch from previous_slot) * 1000)::float8 as previous_slot, (extract(epoch from database_time) * 1000)::float8 as database_time from leasehold.claim(array['ahead-args'], array[$1::timestamptz], array[1::bigint], array['exclusive'], array[0], 'w', null, false, 1000)`, [slot]),
    ).rejects.toMatchObject({ code: 'LH002' });
    expect((await a.query(`select last_slot from leasehold.leases where name = 'ahead-args'`)).rows[0]!.last_slot).toBeNull();
  });
});
