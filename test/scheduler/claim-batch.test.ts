// The batch claim (sql/baseline/2_scheduler.sql) takes its decisions at little database time. What
// is checked here is what its shortcuts could break: claim_due() no longer hands claim() a
// slot already claimed, yet still reports a paused job; the lease name rule, now a trigger on
// insert and on update of the name, refuses what the check constraint refused; and a job with a
// queued slot still claims it first although the queue is looked up only when one exists.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { client, freshDatabase, rawPool } from '../support/db.js';

let url: string;
let pool: pg.Pool;

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close(); // installs the schema
  pool = rawPool(url, 4);
});
afterAll(async () => {
  await pool?.end();
});

const register = (jobs: string[]) =>
  pool.query(
    `select leasehold.register_jobs($1, array_fill('* * * * *'::text, array[$2::int]), array_fill(null::text, array[$2::int]),
       array_fill(60000::bigint, array[$2::int]), array_fill(30000::bigint, array[$2::int]), array_fill('skip'::text, array[$2::int]),
       array_fill('none'::text, array[$2::int]), 'test')`,
    [jobs, jobs.length],
  );

type Row = { job: string; slot: Date; claimed: boolean; reason: string; token: string | null; fence: string | null };
// fn 'claim': one row per request (p_every); 'claim_due': only the rows the caller must act on
const claimSql = (fn: 'claim' | 'claim_due', cap = 0) => `select job, slot, claimed, reason, token, fence from leasehold.claim(
    $1::text[], array_fill($2::timestamptz, array[cardinality($1::text[])]), array_fill(30000::bigint, array[cardinality($1::text[])]),
    array_fill('exclusive'::text, array[cardinality($1::text[])]), array_fill(${cap}, array[cardinality($1::text[])]), $3, null, ${fn === 'claim'})
   order by job`;

const second = (offsetS: number) => new Date(Math.floor(Date.now() / 1000) * 1000 + offsetS * 1000);

describe('claim_due', () => {
  it('passes over a slot already claimed before asking anything of its lease, and still reports a paused job', async () => {
    const jobs = ['taken-0', 'taken-1', 'taken-2'];
    await register(jobs);
    const slot = second(-20);
    const first = (await pool.query<Row>(claimSql('claim_due'), [jobs, slot, 'a'])).rows;
    expect(first.map((r) => r.reason)).toEqual(['claimed', 'claimed', 'claimed']);

    // A peer's second pass over slots 'a' claimed and still holds: nothing comes back, and
    // is_free() (a read of pg_locks per lease) is never asked: the slot guard passes them over
    // first (schema 9), and claim_due() reports nothing for them (schema 17: claim_batch()).
    const c = await pool.connect();
    try {
      await c.query('begin');
      await c.query(`set local track_functions = 'all'`);
      const again = (await c.query<Row>(claimSql('claim_due'), [jobs, slot, 'c'])).rows;
      const asked = await c.query<{ calls: string }>(
        `select coalesce(sum(calls), 0)::text as calls from pg_stat_xact_user_functions where schemaname = 'leasehold' and funcname = 'is_free'`,
      );
      expect(again).toEqual([]);
      expect(asked.rows[0]!.calls).toBe('0');
      await c.query('commit');
      for (const r of first) await pool.query(`select * from leasehold.finish_runs(array[$1::text], array[$2::bigint], array[$3::uuid], array['succeeded'::text], array[null::text], array[1::int])`, [r.job, r.fence, r.token]);
      await pool.query(`select * from leasehold.pause_job('taken-2', 'test', 'maintenance')`);
      const paused = (await c.query<Row>(claimSql('claim_due'), [jobs, slot, 'c'])).rows;
      expect(paused.map((r) => [r.job, r.reason])).toEqual([['taken-2', 'paused']]);
    } finally {
      // discarded, not pooled: a failed expectation may have left it inside a transaction
      c.release(true);
    }
    // what claim() itself says of the same requests is unchanged
    expect((await pool.query<Row>(claimSql('claim'), [jobs, slot, 'c'])).rows.map((r) => r.reason)).toEqual(['slot-taken', 'slot-taken', 'paused']);
  });

  it('answers a second pass over slots its peers claimed with one read of each lease, and one it must answer as before', async () => {
    const jobs = Array.from({ length: 300 }, (_, i) => `peer-${String(i).padStart(3, '0')}`);
    await register(jobs);
    const slot = second(-10);
    expect((await pool.query<Row>(claimSql('claim_due'), [jobs, slot, 'a'])).rows.filter((r) => r.claimed)).toHaveLength(300);
    const c = await pool.connect();
    try {
      // lease rows read by one statement: the transaction's counts, before and after it
      const leaseReads = async () =>
        Number((await c.query<{ n: string }>(
          `select (coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::text as n from pg_stat_xact_user_tables where schemaname = 'leasehold' and relname = 'leases'`,
        )).rows[0]?.n ?? 0);
      await c.query('begin');
      const before = await leaseReads();
      expect((await c.query<Row>(claimSql('claim_due'), [jobs, slot, 'c'])).rows).toEqual([]);
      const reads = (await leaseReads()) - before;
      await c.query('commit');
      // one read per job asked (or one scan of the few other leases here too); claiming and then
      // reporting, as for a slot left to claim, reads each lease twice
      expect(reads).toBeGreaterThanOrEqual(300);
      expect(reads).toBeLessThan(450);

      // one slot left (a peer that never claimed it), one job paused: the whole claim, as before
      await pool.query(`update leasehold.leases set last_slot = $2 where name = $1`, ['peer-007', new Date(slot.getTime() - 60_000)]);
      await pool.query(`select * from leasehold.pause_job('peer-008', 'test', 'maintenance')`);
      const rows = (await c.query<Row>(claimSql('claim_due'), [jobs, slot, 'c'])).rows;
      expect(rows.map((r) => [r.job, r.reason])).toEqual([['peer-007', 'held'], ['peer-008', 'paused']]);
    } finally {
      c.release(true);
    }
  });

  it('claims a job\'s queued slot before the slot asked for, with queued and unqueued jobs in one call', async () => {
    const jobs = ['queue-0', 'queue-1'];
    await register(jobs);
    const older = second(-30);
    const newer = second(-10);
    // queue-0 has a queued (buffered) slot; queue-1 has none
    await pool.query('select leasehold.enqueue_slots($1, $2)', ['queue-0', [older]]);
    const rows = (await pool.query<Row>(claimSql('claim_due', 1), [jobs, newer, 'a'])).rows;
    expect(rows.map((r) => [r.job, r.claimed, r.slot.getTime()])).toEqual([
      ['queue-0', true, older.getTime()],
      ['queue-1', true, newer.getTime()],
    ]);
    // the slot asked for waits its turn in the queue of queue-0
    const queued = await pool.query<{ slot: Date }>('select slot from leasehold.buffered where job = $1', ['queue-0']);
    expect(queued.rows.map((r) => r.slot.getTime())).toEqual([newer.getTime()]);
  });
});

describe('the lease name rule', () => {
  it('refuses a hostile name on insert and on update of the name, as the check constraint did', async () => {
    for (const bad of ['', 'x'.repeat(201), 'bell\u0007', 'rtl\u202eevil', 'zero\u200bwidth']) {
      await expect(pool.query('insert into leasehold.leases (name) values ($1)', [bad])).rejects.toMatchObject({
        code: '23514',
        constraint: 'leases_name_valid',
      });
    }
    await pool.query(`insert into leasehold.leases (name) values ('renamed')`);
    await expect(pool.query(`update leasehold.leases set name = $1 where name = 'renamed'`, ['bad\u0001'])).rejects.toMatchObject({
      code: '23514',
      constraint: 'leases_name_valid',
    });
    // the row is unchanged, and other columns still update
    await pool.query(`update leasehold.leases set last_slot = now() where name = 'renamed'`);
    const { rows } = await pool.query<{ n: number }>(`select count(*)::int as n from leasehold.leases where name = 'renamed' and last_slot is not null`);
    expect(rows[0]!.n).toBe(1);
  });
});
