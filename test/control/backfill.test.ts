// Backfill with several worker processes on one database (sql/baseline/4_control.sql,
// src/worker/requests.ts, src/control/manual-runs.ts): each slot once also when two identical
// backfills start together, in slot order and one at a time (also under overlap allow);
// claim_requests raced on separate connections; hostile input to both acts.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fileURLToPath } from 'node:url';
import { InvalidArgumentError, type Leasehold } from '../../src/index.js';
import { client, freshDatabase, rawPool, sleep } from '../support/db.js';
import { handlerLines, startFixture, type JsonLinesProcess, type Line } from '../support/processes.js';

const REQUEST_WORKER = fileURLToPath(new URL('../fixtures/request-worker.ts', import.meta.url));

let url: string;
let lh: Leasehold;
const children: JsonLinesProcess[] = [];

const JOBS = [
  // slots an hour apart: a backfill over hours
  { name: 'bf', every: '1h', ttl: '5s', overlap: 'skip', durationMs: 300, catchUp: 'none' },
  { name: 'bf-allow', every: '1h', ttl: '5s', overlap: 'allow', durationMs: 300, catchUp: 'none' },
  { name: 'idle', every: '1h', ttl: '5s', catchUp: 'none' },
];

beforeAll(async () => {
  url = await freshDatabase();
  lh = await client(url, { liveness: false, poolSize: 3 });
  await rawPool(url, 2).query('create table req_witness (job text, slot timestamptz, fence bigint, trigger text, key text, worker text)');
  children.push(
    ...(await Promise.all([1, 2].map((i) => startFixture(url, { JOBS: JSON.stringify(JOBS), HOLDER: `w${i}` }, REQUEST_WORKER)))),
  );
}, 30_000);

afterAll(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill()));
});

type Run = { job: string; slot: Date; fence: string; holder: string; started_at: Date; finished_at: Date | null; outcome: string; trigger: string; requested_by: string | null; request_id: string | null };
const runs = async (job: string) =>
  (await rawPool(url, 2).query<Run>('select *, request_id::text as request_id from leasehold.runs where job = $1 order by started_at', [job])).rows;

const handlers = (match: (l: Line) => boolean): Line[] => handlerLines(children, match);

const done = (id: string) => lh.control.waitForRequest(id, { timeout: '15s' });

describe('backfill', () => {
  it('two identical backfills started together run each slot once, in slot order, one at a time', async () => {
    const other = await client(url, { liveness: false, poolSize: 2 });
    const to = new Date();
    const from = new Date(to.getTime() - 5 * 3_600_000);
    const [a, b] = await Promise.all([
      lh.control.backfill('bf', { from, to, by: 'alice' }),
      other.control.backfill('bf', { from: from.toISOString(), to: to.toISOString(), by: 'bob' }),
    ]);
    expect(a.slots).toHaveLength(5);
    expect(a.requested.length + b.requested.length).toBe(5);
    expect(a.alreadyRequested + b.alreadyRequested).toBe(5);
    await Promise.all([...a.requested, ...b.requested].map((r) => done(r.id)));
    const backfilled = (await runs('bf')).filter((r) => r.trigger === 'backfill');
    expect(backfilled.map((r) => r.slot.getTime())).toEqual(a.slots.map((s) => s.getTime())); // once each, started in slot order
    for (let i = 1; i < backfilled.length; i++) expect(backfilled[i]!.started_at.getTime()).toBeGreaterThanOrEqual(backfilled[i - 1]!.finished_at!.getTime());
    expect(backfilled.every((r) => r.outcome === 'succeeded')).toBe(true);
    const keys = handlers((l) => l.job === 'bf' && l.trigger === 'backfill').map((l) => l.key);
    expect(keys).toEqual(a.slots.map((s) => `bf@backfill:${s.toISOString()}`));

    // a later backfill of the same range requests nothing again
    const again = await lh.control.backfill('bf', { from, to, by: 'carol' });
    expect(again.requested).toHaveLength(0);
    expect(again.alreadyRequested).toBe(5);
    const { rows } = await rawPool(url, 2).query<{ actor: string; detail: { requested: number } }>(
      `select actor, detail from leasehold.actions where job = 'bf' and action = 'backfill' order by id`,
    );
    expect(rows.map((r) => r.detail.requested).reduce((x, y) => x + y, 0)).toBe(5);
    expect(rows).toHaveLength(3);
  }, 20_000);

  it('under overlap allow, still one backfill run at a time', async () => {
    const to = new Date();
    const result = await lh.control.backfill('bf-allow', { from: new Date(to.getTime() - 4 * 3_600_000), to, by: 'alice' });
    expect(result.requested).toHaveLength(4);
    await Promise.all(result.requested.map((r) => done(r.id)));
    const backfilled = (await runs('bf-allow')).filter((r) => r.trigger === 'backfill');
    expect(backfilled).toHaveLength(4);
    for (let i = 1; i < backfilled.length; i++) expect(backfilled[i]!.started_at.getTime()).toBeGreaterThanOrEqual(backfilled[i - 1]!.finished_at!.getTime());
  }, 20_000);
});

describe('backfill slots', () => {
  it('are the stored cron schedule\'s, in its time zone, DST gap included', async () => {
    await rawPool(url, 2).query(`select leasehold.register_jobs(array['berlin'], array['30 2 * * *'], array['Europe/Berlin'], array[86400000]::bigint[],
                                   array[30000]::bigint[], array['skip'], array['none'], 'setup')`);
    const dry = await lh.control.backfill('berlin', { from: '2026-03-27T12:00:00Z', to: '2026-03-30T12:00:00Z', by: 'alice', dryRun: true });
    // 02:30 CET, then 02:30 does not exist on the 29th (runs at 03:00 CEST, 01:00Z), then 02:30 CEST
    expect(dry.slots.map((d) => d.toISOString())).toEqual(['2026-03-28T01:30:00.000Z', '2026-03-29T01:00:00.000Z', '2026-03-30T00:30:00.000Z']);
  });
});

describe('claim_requests on separate connections', () => {
  it('claims each request once when eight callers race for twenty of them', async () => {
    const sql = rawPool(url, 10);
    await sql.query(`select leasehold.register_jobs(array['race'], array['1h'], array[null]::text[], array[3600000]::bigint[],
                       array[30000]::bigint[], array['allow'], array['none'], 'setup')`);
    const ids = (await sql.query<{ id: string }>(`select r.request_id::text as id from generate_series(1, 20) g, leasehold.run_now('race', 'op-' || g) r`)).rows.map((r) => r.id);
    const claimed: string[] = [];
    // until every request is claimed or 10 s have passed: a racer that finds the rows locked by
    // another gets nothing back, and a fixed number of tight rounds could all be spent that way
    // on a loaded machine (8 x 40 rounds once left 5 of the 20 unclaimed)
    const deadline = Date.now() + 10_000;
    await Promise.all(
      Array.from({ length: 8 }, async (_, i) => {
        while (claimed.length < ids.length && Date.now() < deadline) {
          const { rows } = await sql.query<{ request_id: string; claimed: boolean }>(
            `select request_id::text, claimed from leasehold.claim_requests(array['race'], $1, null, 5)`,
            [`racer-${i}`],
          );
          const won = rows.filter((r) => r.claimed).map((r) => r.request_id);
          claimed.push(...won);
          if (won.length === 0) await sleep(5);
        }
      }),
    );
    expect(claimed.sort()).toEqual([...ids].sort());
    const { rows } = await sql.query<{ n: number; fences: number }>(
      `select count(*)::int as n, count(distinct fence)::int as fences from leasehold.runs where job = 'race' and trigger = 'manual'`,
    );
    expect(rows[0]).toEqual({ n: 20, fences: 20 });
    const { rows: lease } = await sql.query<{ last_slot: Date | null }>(`select last_slot from leasehold.lease_status where name = 'race'`);
    expect(lease[0]!.last_slot).toBeNull(); // requests never move the scheduled slot guard
    // so the scheduled slot of this very second, before the last run now was asked for, is still claimable
    const { rows: slot } = await sql.query<{ claimed: boolean; reason: string }>(
      `select claimed, reason from leasehold.claim(array['race'::text], array[date_trunc('second', now())::timestamptz], array[(extract(epoch from '30 seconds'::interval) * 1000)::bigint], array['allow'::text], array[0::int], 'scheduler', null, true)`,
    );
    expect(slot).toEqual([{ claimed: true, reason: 'claimed' }]);
  });
});

describe('a request that waits for the lease', () => {
  it('costs its job no lock and no write per call (no transaction id is taken)', async () => {
    const sql = rawPool(url, 4);
    await sql.query(`select leasehold.register_jobs(array['waits', 'waits-buf'], array['1h', '1h'], array[null, null]::text[], array[3600000, 3600000]::bigint[],
                       array[30000, 30000]::bigint[], array['skip', 'buffer-all'], array['none', 'none'], 'setup')`);
    await sql.query(`select leasehold.acquire('waits', '30s', 'someone'), leasehold.acquire('waits-buf', '30s', 'someone')`);
    await sql.query(`select * from leasehold.run_now('waits', 'alice', array[now() - interval '1 hour'])`);
    await sql.query(`select leasehold.run_now('waits-buf', 'alice')`);
    const conn = await sql.connect();
    try {
      await conn.query('begin');
      const { rows } = await conn.query(`select * from leasehold.claim_requests(array['waits', 'waits-buf'], 'w')`);
      expect(rows).toEqual([]);
      const { rows: xid } = await conn.query<{ xid: string | null }>('select pg_current_xact_id_if_assigned()::text as xid');
      expect(xid[0]!.xid).toBeNull();
      await conn.query('rollback');
    } finally {
      // discarded, not pooled: a failed expectation may have left it inside a transaction
      conn.release(true);
    }
    const { rows: pending } = await sql.query<{ n: number }>(`select count(*)::int as n from leasehold.run_requests where job in ('waits', 'waits-buf') and state = 'pending'`);
    expect(pending[0]!.n).toBe(2);
  });
});

describe('hostile input', () => {
  it('is refused with typed errors before anything is requested', async () => {
    const now = Date.now();
    const cases: Array<[string, () => Promise<unknown>]> = [
      ['job', () => lh.control.runNow('no-such-job', { by: 'alice' })],
      ['job', () => lh.control.backfill('no-such-job', { from: new Date(now - 3_600_000), to: new Date(now), by: 'alice' })],
      ['to', () => lh.control.backfill('bf', { from: new Date(now - 3_600_000), to: new Date(now + 7_200_000), by: 'alice' })],
      ['from', () => lh.control.backfill('bf', { from: new Date(now), to: new Date(now - 3_600_000), by: 'alice' })],
      ['max', () => lh.control.backfill('bf', { from: new Date(now - 200 * 3_600_000), to: new Date(now), by: 'alice' })],
      ['max', () => lh.control.backfill('bf', { from: new Date(now - 3_600_000), to: new Date(now), by: 'alice', max: 5_000 })],
      ['from', () => lh.control.backfill('bf', { from: 'yesterday', to: new Date(now), by: 'alice' })],
      ['by', () => lh.control.runNow('idle', { by: '' })],
      ['by', () => lh.control.runNow('idle', { by: 'x'.repeat(201) })],
      ['by', () => lh.control.runNow('idle', { by: 'evil\u202Ename' })],
      ['by', () => lh.control.runNow('idle', { by: 42 as unknown as string })],
      ['byy', () => lh.control.runNow('idle', { by: 'a', byy: 'b' } as unknown as { by: string })],
      ['options', () => lh.control.runNow('idle', undefined as unknown as { by: string })],
      ['id', () => lh.control.request('1; drop table x')],
    ];
    for (const [argument, call] of cases) {
      const error = await call().then(() => null, (e: unknown) => e);
      expect(error, argument).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument, String(error)).toBe(argument);
    }
    // the SQL functions check again, for callers that are not this client
    const sql = rawPool(url, 2);
    const code = (text: string, values: unknown[]) => sql.query(text, values).then(() => 'ok', (e: { code?: string }) => e.code);
    expect(await code('select leasehold.run_now($1, $2)', ['nope', 'alice'])).toBe('P0002');
    expect(await code('select leasehold.run_now($1, $2)', ['idle', ''])).toBe('LH004');
    expect(await code('select * from leasehold.run_now($1, $2, array[now() + interval \'1 hour\'])', ['bf', 'alice'])).toBe('22023');
    expect(await code('select * from leasehold.run_now($1, $2, array(select now() - g * interval \'1 s\' from generate_series(1, 1001) g))', ['bf', 'alice'])).toBe('22023');
    expect(await code('select * from leasehold.run_now($1, $2, $3::timestamptz[])', ['bf', 'alice', []])).toBe('22023');
    expect(await code('select * from leasehold.claim_requests(array[\'bf\'], $1, null, 0)', ['w'])).toBe('22023');
    // nothing of the above left a request behind
    const { rows } = await sql.query<{ n: number }>(`select count(*)::int as n from leasehold.run_requests where job in ('nope', 'no-such-job') or requested_by = 'evil'`);
    expect(rows[0]!.n).toBe(0);
    // a dry run computes the slots and requests nothing
    const dry = await lh.control.backfill('bf', { from: new Date(now - 50 * 3_600_000), to: new Date(now - 40 * 3_600_000), by: 'alice', dryRun: true });
    expect(dry.slots).toHaveLength(10);
    expect(dry.requested).toHaveLength(0);
    expect(await lh.control.request('999999')).toBeNull();
    await expect(lh.control.waitForRequest('999999', { timeout: '1s' })).rejects.toBeInstanceOf(InvalidArgumentError);
    await expect(lh.control.waitForRequest('1', { timeout: 'soon' })).rejects.toBeInstanceOf(InvalidArgumentError);
    // a job no worker has a handler for: its request stays pending, and waiting ends at the timeout
    await sql.query(`select leasehold.register_jobs(array['orphan'], array['1h'], array[null]::text[], array[3600000]::bigint[],
                       array[30000]::bigint[], array['skip'], array['none'], 'setup')`);
    const orphan = await lh.control.runNow('orphan', { by: 'alice' });
    const started = Date.now();
    const waited = await lh.control.waitForRequest(orphan, { timeout: '300ms' });
    expect(waited.state).toBe('pending');
    expect(Date.now() - started).toBeGreaterThanOrEqual(290);
    expect(Date.now() - started).toBeLessThan(2_000);
  });
});
