// A scheduled run's history is written once, when it ends. While it runs it is on
// its lease row and leasehold.runs shows it running; finish_runs() writes its run_log row and
// forgets it on the lease in the same update that releases the lease; a takeover records it
// lost; a run now, pause or a retried finish never leaves a run twice, or not at all.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { client, connections, freshDatabase, rawPool, sleep } from '../support/db.js';

let pool: pg.Pool;

beforeAll(async () => {
  const url = await freshDatabase();
  await (await client(url, { liveness: false })).close(); // installs the schema
  pool = rawPool(url, 6);
});
afterAll(async () => {
  await pool?.end();
});

const register = (jobs: string[], overlap = 'skip', ttlMs = 30_000) =>
  pool.query(
    `select leasehold.register_jobs($1, array_fill('* * * * *'::text, array[$2::int]), array_fill(null::text, array[$2::int]),
       array_fill(60000::bigint, array[$2::int]), array_fill($3::bigint, array[$2::int]), array_fill($4::text, array[$2::int]),
       array_fill('none'::text, array[$2::int]), 'test')`,
    [jobs, jobs.length, ttlMs, overlap],
  );

type Claimed = { job: string; claimed: boolean; reason: string; token: string | null; fence: string; took_over: boolean };
const claim = (db: pg.ClientBase | pg.Pool, jobs: string[], slot: Date, holder: string, { mode = 'exclusive', ttl = '30 seconds' } = {}) =>
  db
    .query<Claimed>(
      `select job, claimed, reason, token, fence, took_over from leasehold.claim($1::text[], array_fill($2::timestamptz, array[cardinality($1::text[])]), array_fill((extract(epoch from $4::interval) * 1000)::bigint, array[cardinality($1::text[])]), array_fill($5::text, array[cardinality($1::text[])]), array_fill(0::int, array[cardinality($1::text[])]), $3, null)
        order by job`,
      [jobs, slot, holder, ttl, mode],
    )
    .then((r) => r.rows);

const finish = (db: pg.ClientBase | pg.Pool, rows: Array<{ job: string; fence: string; token: string | null }>, outcome = 'succeeded') =>
  db
    .query<{ job: string; recorded: boolean; released: boolean }>(
      `select job, recorded, released from leasehold.finish_runs($1::text[], $2::bigint[], $3::uuid[], array_fill($4::text, array[$5::int]),
         array_fill(null::text, array[$5::int]), array_fill(1, array[$5::int])) order by job`,
      [rows.map((r) => r.job), rows.map((r) => r.fence), rows.map((r) => r.token), outcome, rows.length],
    )
    .then((r) => r.rows);

type RunRow = { id: string | null; job: string; fence: string; holder: string; outcome: string; error: string | null; finished_at: Date | null };
const runsOf = async (job: string) =>
  (await pool.query<RunRow>('select id, job, fence, holder, outcome, error, finished_at from leasehold.runs where job = $1 order by fence', [job])).rows;
const logOf = async (job: string) =>
  (await pool.query<{ fence: string; outcome: string }>('select fence, outcome from leasehold.run_log where job = $1 order by fence', [job])).rows;

/** Slots in the past, one second apart. */
const base = Math.floor(Date.now() / 1000) * 1000 - 60_000;
const slot = (n: number) => new Date(base + n * 1000);

describe('a scheduled run', () => {
  it('is in flight on its lease row while it runs, and gets one complete history row when it ends', async () => {
    await register(['once-a']);
    const [run] = await claim(pool, ['once-a'], slot(1), 'worker-1');
    expect(run).toMatchObject({ claimed: true });
    // running: in the view, from the lease row (no id), not in run_log
    expect(await runsOf('once-a')).toEqual([expect.objectContaining({ id: null, fence: run!.fence, holder: 'worker-1', outcome: 'running', finished_at: null })]);
    expect(await logOf('once-a')).toEqual([]);
    const status = await pool.query<{ last_outcome: string; state: string }>(`select last_outcome, state from leasehold.job_status where job = 'once-a'`);
    expect(status.rows[0]).toEqual({ last_outcome: 'running', state: 'running' });

    expect(await finish(pool, [run!])).toEqual([{ job: 'once-a', recorded: true, released: true }]);
    const [ended] = await runsOf('once-a');
    expect(ended).toMatchObject({ fence: run!.fence, holder: 'worker-1', outcome: 'succeeded' });
    expect(ended!.id).not.toBeNull();
    expect(ended!.finished_at).toBeInstanceOf(Date);
    // a retried finish (its first answer lost) records nothing and adds no row
    expect(await finish(pool, [run!], 'failed')).toEqual([{ job: 'once-a', recorded: false, released: false }]);
    expect(await logOf('once-a')).toEqual([{ fence: run!.fence, outcome: 'succeeded' }]);
    const lease = await pool.query(`select run_slot, token from leasehold.leases where name = 'once-a'`);
    expect(lease.rows[0]).toEqual({ run_slot: null, token: null });
  });

  it('ends together with a run recorded at its start (overlap allow) in one finish, each recorded once', async () => {
    await register(['mixed-lease']);
    await register(['mixed-allow'], 'allow');
    const [onLease] = await claim(pool, ['mixed-lease'], slot(40), 'worker-1');
    const [atStart] = await claim(pool, ['mixed-allow'], slot(40), 'worker-1', { mode: 'allow' });
    expect(await logOf('mixed-allow')).toEqual([{ fence: atStart!.fence, outcome: 'running' }]);
    expect(await finish(pool, [onLease!, atStart!])).toEqual([
      { job: 'mixed-allow', recorded: true, released: false },
      { job: 'mixed-lease', recorded: true, released: true },
    ]);
    expect(await logOf('mixed-allow')).toEqual([{ fence: atStart!.fence, outcome: 'succeeded' }]);
    expect(await logOf('mixed-lease')).toEqual([{ fence: onLease!.fence, outcome: 'succeeded' }]);
    // again: nothing is recorded twice
    expect(await finish(pool, [onLease!, atStart!], 'failed')).toEqual([
      { job: 'mixed-allow', recorded: false, released: false },
      { job: 'mixed-lease', recorded: false, released: false },
    ]);
  });

  it('taken over after its lease expired is recorded lost by the claim that takes it; the stale holder\'s finish records nothing', async () => {
    await register(['once-b'], 'skip', 300);
    const [stale] = await claim(pool, ['once-b'], slot(1), 'worker-1', { ttl: '300 milliseconds' });
    await sleep(400);
    const [next] = await claim(pool, ['once-b'], slot(2), 'worker-2');
    expect(next).toMatchObject({ claimed: true, took_over: true });
    expect(await runsOf('once-b')).toEqual([
      expect.objectContaining({ fence: stale!.fence, holder: 'worker-1', outcome: 'lost', error: 'lease taken over by worker-2' }),
      expect.objectContaining({ fence: next!.fence, holder: 'worker-2', outcome: 'running', id: null }),
    ]);
    expect(await finish(pool, [stale!])).toEqual([{ job: 'once-b', recorded: false, released: false }]);
    expect(await finish(pool, [next!])).toEqual([{ job: 'once-b', recorded: true, released: true }]);
    expect((await logOf('once-b')).map((r) => r.outcome)).toEqual(['lost', 'succeeded']);
  });

  it('given up without its token (the lease left to expire) is recorded, and the lease stays held', async () => {
    await register(['once-c']);
    const [run] = await claim(pool, ['once-c'], slot(1), 'worker-1');
    expect(await finish(pool, [{ ...run!, token: null }], 'timed-out')).toEqual([{ job: 'once-c', recorded: true, released: false }]);
    expect(await runsOf('once-c')).toEqual([expect.objectContaining({ outcome: 'timed-out' })]);
    const lease = await pool.query<{ held: boolean; run_slot: Date | null }>(`select token is not null as held, run_slot from leasehold.leases where name = 'once-c'`);
    expect(lease.rows[0]).toEqual({ held: true, run_slot: null });
  });

  it('stopped by a pause is recorded aborted, naming who paused it', async () => {
    await register(['once-d']);
    const [run] = await claim(pool, ['once-d'], slot(1), 'worker-1');
    await pool.query(`select * from leasehold.pause_job('once-d', 'ops', 'maintenance', true)`);
    expect(await runsOf('once-d')).toEqual([expect.objectContaining({ fence: run!.fence, outcome: 'aborted', error: 'stopped: paused by ops (maintenance)' })]);
    expect(await finish(pool, [run!])).toEqual([{ job: 'once-d', recorded: false, released: false }]);
    expect(await logOf('once-d')).toHaveLength(1);
  });

  it('replaced by a run now whose job allows it to take over is recorded lost; the run now keeps its own row', async () => {
    await register(['once-e'], 'replace', 300);
    const [run] = await claim(pool, ['once-e'], slot(1), 'worker-1', { mode: 'replace', ttl: '300 milliseconds' });
    await sleep(400);
    await pool.query(`select leasehold.run_now('once-e', 'ops')`);
    const { rows: taken } = await pool.query<{ claimed: boolean; fence: string; token: string }>(
      `select claimed, fence, token from leasehold.claim_requests(array['once-e'], 'worker-2')`,
    );
    expect(taken).toEqual([expect.objectContaining({ claimed: true })]);
    expect(await runsOf('once-e')).toEqual([
      expect.objectContaining({ fence: run!.fence, outcome: 'lost', error: 'lease taken over by worker-2' }),
      expect.objectContaining({ fence: taken[0]!.fence, outcome: 'running' }),
    ]);
    expect((await runsOf('once-e'))[1]!.id).not.toBeNull(); // a run now's row is in run_log from its start
    await finish(pool, [{ job: 'once-e', fence: taken[0]!.fence, token: taken[0]!.token }]);
    expect((await logOf('once-e')).map((r) => r.outcome)).toEqual(['lost', 'succeeded']);
  });

  it('under overlap allow (no lease to carry it) has its row from the start, as before', async () => {
    await register(['once-f'], 'allow');
    const [run] = await claim(pool, ['once-f'], slot(1), 'worker-1', { mode: 'allow' });
    expect(run).toMatchObject({ claimed: true, token: null });
    expect(await logOf('once-f')).toEqual([{ fence: run!.fence, outcome: 'running' }]);
    expect(await finish(pool, [run!])).toEqual([{ job: 'once-f', recorded: true, released: false }]);
    expect(await logOf('once-f')).toEqual([{ fence: run!.fence, outcome: 'succeeded' }]);
  });
});

describe('a lease row letting go', () => {
  it('releases and records while the holder still has a fenced transaction open (FOR KEY SHARE does not hold up the finish)', async () => {
    await register(['open-tx']);
    const [run] = await claim(pool, ['open-tx'], slot(1), 'worker-1');
    const holder = await pool.connect();
    try {
      await holder.query('begin');
      await holder.query('select leasehold.assert_lease($1, $2, $3)', ['open-tx', run!.token, run!.fence]);
      // lock_timeout is 2 s inside finish_runs: a wait on the open transaction would fail it
      expect(await finish(pool, [run!])).toEqual([{ job: 'open-tx', recorded: true, released: true }]);
      await holder.query('commit');
    } finally {
      // discarded, not pooled: a failed expectation may have left it inside a transaction
      holder.release(true);
    }
    expect(await logOf('open-tx')).toEqual([{ fence: run!.fence, outcome: 'succeeded' }]);
  });

  it('a run now left running when its lease was released by force is recorded lost by the next claim', async () => {
    await register(['orphan']);
    await pool.query(`select leasehold.run_now('orphan', 'ops')`);
    const { rows: taken } = await pool.query<{ fence: string }>(`select fence from leasehold.claim_requests(array['orphan'], 'w-dead')`);
    await pool.query(`select * from leasehold.force_release('orphan')`);
    const [next] = await claim(pool, ['orphan'], slot(1), 'worker-2');
    expect(next).toMatchObject({ claimed: true });
    expect(await runsOf('orphan')).toEqual([
      expect.objectContaining({ fence: taken[0]!.fence, holder: 'w-dead', outcome: 'lost', error: 'lease taken over by worker-2' }),
      expect.objectContaining({ fence: next!.fence, outcome: 'running' }),
    ]);
  });

  it('a scheduled run in flight ends lost when a plain acquire takes its expired lease, and when its lease is released by force', async () => {
    await register(['by-acquire', 'by-force'], 'skip', 300);
    const [dead] = await claim(pool, ['by-acquire'], slot(1), 'worker-1', { ttl: '300 milliseconds' });
    await sleep(400);
    const { rows: got } = await pool.query<{ acquired: boolean; fence: string }>(`select acquired, fence from leasehold.acquire('by-acquire', '30 seconds', 'exec-host')`);
    expect(got[0]).toMatchObject({ acquired: true });
    expect(await runsOf('by-acquire')).toEqual([expect.objectContaining({ fence: dead!.fence, holder: 'worker-1', outcome: 'lost', error: 'lease taken over by exec-host' })]);

    const [forced] = await claim(pool, ['by-force'], slot(1), 'worker-1');
    await pool.query(`select * from leasehold.force_release('by-force')`);
    expect(await runsOf('by-force')).toEqual([
      expect.objectContaining({ fence: forced!.fence, outcome: 'lost', error: 'the lease was released by force (leasehold.force_release)' }),
    ]);
    expect(await finish(pool, [forced!])).toEqual([{ job: 'by-force', recorded: false, released: false }]);
  });
});

describe('the runs view', () => {
  it('shows every run exactly once while claims and finishes commit on other connections', async () => {
    const jobs = Array.from({ length: 50 }, (_, i) => `flow-${String(i).padStart(2, '0')}`);
    await register(jobs);
    const [writer, reader] = await connections((pool.options as { connectionString: string }).connectionString, 2);
    let done = false;
    const seen: string[] = [];
    const watch = (async () => {
      while (!done) {
        const { rows } = await reader!.query<{ job: string; fence: string; n: number }>(
          `select job, fence::text, count(*)::int as n from leasehold.runs where job like 'flow-%' group by 1, 2 having count(*) <> 1`,
        );
        for (const r of rows) seen.push(`${r.job}#${r.fence} x${r.n}`);
      }
    })();
    for (let n = 1; n <= 10; n++) {
      const rows = await claim(writer!, jobs, slot(n), 'worker-1');
      expect(rows.filter((r) => r.claimed)).toHaveLength(jobs.length);
      await finish(writer!, rows);
    }
    done = true;
    await watch;
    await Promise.all([writer!.end(), reader!.end()]);
    expect(seen).toEqual([]);
    const { rows } = await pool.query<{ n: number; running: number }>(
      `select count(*)::int as n, count(*) filter (where outcome = 'running')::int as running from leasehold.runs where job like 'flow-%'`,
    );
    expect(rows[0]).toEqual({ n: 500, running: 0 });
  });
});

describe('claim_batch', () => {
  it('refuses an unknown mode, a negative buffer cap and a null job with 22023, and claims nothing', async () => {
    await register(['bad-input']);
    const call = (mode: string | null, cap: number | null, job: string | null) =>
      pool.query(`select * from leasehold.claim(array[$1::text], array[$2::timestamptz], array[30000::bigint], array[$3::text], array[$4::int], 'w')`, [
        job,
        slot(1),
        mode,
        cap,
      ]);
    await expect(call('exclusive; drop table x', 0, 'bad-input')).rejects.toMatchObject({ code: '22023', message: 'claim: mode must be exclusive, replace or allow (got exclusive; drop table x)' });
    await expect(call(null, 0, 'bad-input')).rejects.toMatchObject({ code: '22023' });
    await expect(call('exclusive', -1, 'bad-input')).rejects.toMatchObject({ code: '22023', message: 'claim: buffer_cap must be 0 or more (got -1)' });
    await expect(call('exclusive', 0, null)).rejects.toMatchObject({ code: '22023' });
    await expect(
      pool.query(`select * from leasehold.claim(array['bad-input'], array[]::timestamptz[], array[30000::bigint], array['exclusive'], array[0], 'w')`),
    ).rejects.toMatchObject({ code: '22023' });
    expect(await runsOf('bad-input')).toEqual([]);
    const lease = await pool.query(`select last_slot from leasehold.leases where name = 'bad-input'`);
    expect(lease.rows[0]).toEqual({ last_slot: null });
  });
});
