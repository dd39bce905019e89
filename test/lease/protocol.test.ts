// The SQL protocol itself, driven over independent connections (each its own session), the
// way any language's client would call it.
import { beforeAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { connections, freshDatabase, client, sleep } from '../support/db.js';

let url: string;
let conns: pg.Client[];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url)).close(); // installs the schema
  conns = await connections(url, 16);
});

type Row = { acquired: boolean; token: string | null; fence: string; holder: string | null; reason: string };

const acquire = async (c: pg.Client, name: string, ttl = '30 seconds', holder = 'h', slot: Date | null = null) =>
  (await c.query<Row>('select * from leasehold.acquire($1, $2::interval, $3, null, $4)', [name, ttl, holder, slot])).rows[0] as Row;
const release = async (c: pg.Client, name: string, token: string | null) =>
  (await c.query<{ release: boolean }>('select leasehold.release($1, $2)', [name, token])).rows[0]?.release;
const renew = async (c: pg.Client, name: string, token: string | null, ttl = '30 seconds') =>
  (await c.query<{ renewed: boolean; reason: string }>('select * from leasehold.renew_leases(($1, $2, $3::interval))', [name, token, ttl])).rows[0];

describe('acquire', () => {
  it('gives exactly one winner per round to 16 racing connections, 200 rounds, fences strictly increasing, and the losers name it without locking the row', async () => {
    const fences: number[] = [];
    let lockedByLosers = 0;
    let losers = 0;
    let unnamed = 0;
    for (let round = 0; round < 200; round++) {
      const results = await Promise.all(conns.map((c, i) => acquire(c, 'race', '30 seconds', `c${i}`)));
      const winners = results.map((r, i) => ({ r, i })).filter(({ r }) => r.acquired);
      expect(winners, `round ${round}`).toHaveLength(1);
      const winner = winners[0]!;
      fences.push(Number(winner.r.fence));
      // every loser names the winner, or says it is being taken right now (naming nobody, never
      // the previous holder): only when the winner took over 50 ms to commit
      for (const r of results.filter((r) => !r.acquired)) {
        losers++;
        expect(['held', 'being-acquired']).toContain(r.reason);
        if (r.reason === 'held') expect(r.holder).toBe(winner.r.holder);
        else (unnamed++, expect(r.holder).toBeNull());
      }
      // the winner's row version carries no locker but the winner itself (its FOR UPDATE, kept
      // on the version it wrote) unless someone locked it after the grant: a loser that waited
      // for the winner on the row, which takes a transaction id and writes WAL
      const { rows } = await conns[0]!.query<{ xmin: string; xmax: string }>(`select xmin::text, xmax::text from leasehold.leases where name = 'race'`);
      if (rows[0]!.xmax !== '0' && rows[0]!.xmax !== rows[0]!.xmin) lockedByLosers++;
      expect(await release(conns[winner.i]!, 'race', winner.r.token)).toBe(true);
    }
    console.log(`losers not told the winner: ${unnamed} of ${losers}; rounds whose grant a loser locked: ${lockedByLosers}`);
    expect(lockedByLosers).toBe(0);
    // the loser waits for the winner's commit (sql/baseline/1_leases.sql): a slow commit on a loaded machine may
    // still leave a few unnamed, never most
    expect(unnamed).toBeLessThanOrEqual(losers / 100);
    for (let i = 1; i < fences.length; i++) expect(fences[i]).toBeGreaterThan(fences[i - 1]!);
    expect(fences[0]).toBe(1);
    expect(fences.at(-1)).toBe(200);
  });

  it('names the winner under contention while every winner releases at once', async () => {
    // Each decline waits for the turn of the generation it read, and reads the row again. A turn
    // lock shared by its waiters across generations (measured, not kept) kept the next acquirer's
    // try failing, and about one decline in eight came back 'being-acquired', naming nobody.
    const racers = conns.slice(8, 16); // (not the sessions later tests read function counts on)
    const reasons: Record<string, number> = {};
    let wins = 0;
    const until = Date.now() + 1_500;
    await Promise.all(
      racers.map(async (c, i) => {
        while (Date.now() < until) {
          const r = await acquire(c, 'contended', '30 seconds', `k${i}`);
          if (r.acquired) {
            wins++;
            expect(await release(c, 'contended', r.token)).toBe(true);
          } else {
            reasons[r.reason] = (reasons[r.reason] ?? 0) + 1;
            if (r.reason === 'held') expect(r.holder).toMatch(/^k\d$/);
          }
        }
      }),
    );
    const declines = Object.values(reasons).reduce((a, b) => a + b, 0);
    console.log(`contended: ${wins} grants, declines ${JSON.stringify(reasons)}`);
    expect(wins).toBeGreaterThan(10);
    expect(Object.keys(reasons).filter((r) => r !== 'held' && r !== 'being-acquired' && r !== 'holder-committing')).toEqual([]);
    expect(reasons['being-acquired'] ?? 0).toBeLessThanOrEqual(declines / 50);
  });

  it('leaves the lease to one of the waiters of a turn that ended without a grant', async () => {
    // a takes the turn and declines (its slot is not due) inside a transaction; b and c wait for
    // that turn together. When a commits, the row's generation has not moved: the row lock decides
    // between b and c (each trying the same turn again would fail on the other's shared hold, and
    // both would give up 'being-acquired' with the lease free).
    const [a, b, c] = conns.slice(12, 15) as [pg.Client, pg.Client, pg.Client];
    const first = await acquire(a, 'turn-no-grant', '30 seconds', 'a');
    await release(a, 'turn-no-grant', first.token);
    let conclusive = 0;
    for (let attempt = 0; attempt < 10 && conclusive < 3; attempt++) {
      await a.query('begin');
      const declined = await acquire(a, 'turn-no-grant', '30 seconds', 'a', new Date(Date.now() + 3_600_000));
      expect(declined.reason).toBe('slot-not-due');
      const sent = Date.now();
      const both = Promise.all([acquire(b, 'turn-no-grant', '30 seconds', 'b'), acquire(c, 'turn-no-grant', '30 seconds', 'c')]);
      // both wait on the turn (an advisory lock not granted), then a's turn ends without a grant
      await waitForWaiters(conns[15]!, [b, c]);
      await a.query('commit');
      const results = await both;
      const waitedMs = Date.now() - sent;
      const winner = results.find((r) => r.acquired);
      if (winner) await release(winner.holder === 'b' ? b : c, 'turn-no-grant', winner.token);
      // the waits are bounded at 50 ms: on a machine too slow to commit a within them, try again
      if (waitedMs > 45) continue;
      conclusive++;
      expect(results.filter((r) => r.acquired), JSON.stringify(results)).toHaveLength(1);
      const loser = results.find((r) => !r.acquired)!;
      expect(['held', 'being-acquired']).toContain(loser.reason);
    }
    expect(conclusive).toBeGreaterThan(0);
  });

  it('lets the waiters of a turn that ended without creating the row answer at once, not wait on each other\'s insert', async () => {
    // a takes the turn of a name never used and declines (its slot is not due); b and c, each
    // inside a transaction, wait for it. Were both to create the row when a's turn ends, one would
    // wait for the other's transaction on the primary key, up to acquire's lock_timeout (2 s),
    // and fail with 55P03. Only a turn's own holder creates the row: they answer in milliseconds.
    const [a, b, c, observer] = conns.slice(12, 16) as [pg.Client, pg.Client, pg.Client, pg.Client];
    for (let attempt = 0; attempt < 3; attempt++) {
      const name = `first-use-${attempt}`;
      await a.query('begin');
      expect((await acquire(a, name, '30 seconds', 'a', new Date(Date.now() + 3_600_000))).reason).toBe('slot-not-due');
      await b.query('begin');
      await c.query('begin');
      const sent = Date.now();
      const both = Promise.allSettled([acquire(b, name, '30 seconds', 'b'), acquire(c, name, '30 seconds', 'c')]);
      await waitForWaiters(observer, [b, c]).catch(() => undefined); // (a slow machine: they may have given up already)
      await a.query('commit');
      const results = await both;
      const tookMs = Date.now() - sent;
      await b.query('commit');
      await c.query('commit');
      for (const result of results) {
        if (result.status === 'rejected') throw result.reason;
        expect(['acquired', 'being-acquired']).toContain(result.value.reason);
      }
      expect(tookMs).toBeLessThan(1_500);
      // the name is free to take afterwards
      const next = await acquire(a, name, '30 seconds', 'a');
      if (next.acquired) await release(a, name, next.token);
      else expect(next.holder).toMatch(/^[bc]$/);
    }
  });

  it('resolves the row-creation race in the database: one winner, no error', async () => {
    for (let attempt = 0; attempt < 10; attempt++) {
      const name = `fresh-${attempt}`;
      const results = await Promise.all(conns.map((c, i) => acquire(c, name, '30 seconds', `c${i}`)));
      const winners = results.filter((r) => r.acquired);
      expect(winners).toHaveLength(1);
      expect(Number(winners[0]!.fence)).toBe(1);
      for (const loser of results.filter((r) => !r.acquired)) {
        expect(loser.reason).toBe('held');
        expect(loser.holder).toBe(winners[0]!.holder);
      }
    }
  });

  it('declines while held, naming the holder and when it acquired and expires', async () => {
    const [a, b] = conns as [pg.Client, pg.Client];
    const won = await acquire(a, 'named', '30 seconds', 'worker-a');
    expect(won.acquired).toBe(true);
    const { rows } = await b.query('select * from leasehold.acquire($1, $2::interval, $3)', ['named', '30 seconds', 'worker-b']);
    expect(rows[0]).toMatchObject({ acquired: false, reason: 'held', holder: 'worker-a', fence: '1', token: null });
    expect(rows[0].acquired_at).toBeInstanceOf(Date);
    expect(rows[0].expires_at.getTime() - rows[0].acquired_at.getTime()).toBe(30_000);
  });

  it('takes no transaction id on the losing path (so it writes no WAL and locks no row)', async () => {
    const [a, b] = conns as [pg.Client, pg.Client];
    await acquire(a, 'quiet', '1 minute', 'a');
    await b.query('begin');
    for (let i = 0; i < 20; i++) expect((await acquire(b, 'quiet', '1 minute', 'b')).acquired).toBe(false);
    const { xid } = (await b.query('select txid_current_if_assigned() as xid')).rows[0];
    const { locks } = (await b.query(
      `select count(*)::int as locks from pg_locks where pid = pg_backend_pid() and locktype in ('tuple', 'transactionid')`,
    )).rows[0];
    await b.query('commit');
    // WAL bytes per declined acquisition are measured by the benchmark on a quiet server.
    expect(xid).toBeNull();
    expect(locks).toBe(0);
  });

  // A declined call's server time is mostly the statements and function calls it sets up again
  // in every transaction (npm run bench measures it). The held path is acquire() itself and, for a
  // holder with a liveness lock, one holder_gone(): the argument checks and is_free() are inlined
  // SQL, and an unexpired lease needs no epoch. A plpgsql step added to that path fails here.
  it('declines a held lease with acquire() and at most holder_gone() as function calls, and one read of the table', async () => {
    const [a, b, live] = conns as [pg.Client, pg.Client, pg.Client];
    const { key } = (await live.query<{ key: string }>('select leasehold.register_liveness() as key')).rows[0]!;
    await a.query('select * from leasehold.acquire($1, $2::interval, $3, $4)', ['cheap-live', '1 minute', 'a', key]);
    await acquire(a, 'cheap-ttl', '1 minute', 'a');
    // the xact views also show a backend's counts not yet flushed from earlier transactions: a difference
    const counts = async () => {
      const { rows } = await b.query<{ name: string; n: string }>(
        `select 'fn:' || funcname as name, calls as n from pg_stat_xact_user_functions where schemaname = 'leasehold'
         union all select 'reads', coalesce(sum(idx_scan + seq_scan), 0) from pg_stat_xact_user_tables where schemaname = 'leasehold' and relname = 'leases'`,
      );
      return new Map(rows.map((r) => [r.name, Number(r.n)]));
    };
    const callsOf = async (name: string) => {
      await acquire(b, name, '1 minute', 'b'); // planned once per session: constant folding calls bad_characters()
      await b.query('begin');
      try {
        await b.query("set local track_functions = 'all'");
        const before = await counts();
        expect((await acquire(b, name, '1 minute', 'b')).reason).toBe('held');
        const after = await counts();
        const calls = Object.fromEntries(
          [...after].filter(([k, n]) => k.startsWith('fn:') && n !== (before.get(k) ?? 0)).map(([k, n]) => [k.slice(3), n - (before.get(k) ?? 0)]),
        );
        return { calls, reads: (after.get('reads') ?? 0) - (before.get('reads') ?? 0) };
      } finally {
        await b.query('rollback');
      }
    };
    expect(await callsOf('cheap-live')).toEqual({ calls: { acquire: 1, holder_gone: 1 }, reads: 1 });
    expect(await callsOf('cheap-ttl')).toEqual({ calls: { acquire: 1 }, reads: 1 });
  });

  it('calls no function that saves and restores settings on the losing path but acquire itself (its cost, measured)', async () => {
    // b: a session of its own, whose function counts hold no earlier test's calls (counts are
    // flushed at most once a second)
    const a = conns[0]!;
    const [b] = (await connections(url, 1)) as [pg.Client];
    await acquire(a, 'cheap', '1 minute', 'a');
    await b.query('begin');
    try {
      await b.query(`set local track_functions = 'all'`);
      const calls = async () => (await b.query<{ name: string; calls: string; config: string[] | null }>(
        `select f.funcname as name, f.calls::text as calls, p.proconfig as config
           from pg_stat_xact_user_functions f join pg_proc p on p.oid = f.funcid where f.schemaname = 'leasehold' order by 1`,
      )).rows;
      // the xact view also holds this backend's counts not yet flushed from earlier transactions
      const before = Number((await calls()).find((r) => r.name === 'acquire')?.calls ?? 0);
      for (let i = 0; i < 5; i++) expect((await acquire(b, 'cheap', '1 minute', 'b')).reason).toBe('held');
      const rows = await calls();
      expect(Number(rows.find((r) => r.name === 'acquire')?.calls) - before).toBe(5);
      // a called step with settings of its own (a pinned search_path, say) costs a save and a
      // restore of the session's settings per call: most of a declined acquire's server time
      expect(rows.filter((r) => r.name !== 'acquire' && r.config !== null).map((r) => r.name)).toEqual([]);
    } finally {
      await b.query('rollback');
      await b.end();
    }
  });
});

describe('expiry, renew and release', () => {
  it('frees an expired lease by the database clock; the old token can neither renew nor release', async () => {
    const [a, b] = conns as [pg.Client, pg.Client];
    const first = await acquire(a, 'expiry', '300 milliseconds', 'old');
    expect(first.acquired).toBe(true);
    expect((await acquire(b, 'expiry', '30 seconds', 'new')).acquired).toBe(false);
    await sleep(400);
    expect(await renew(a, 'expiry', first.token)).toMatchObject({ renewed: false, reason: 'expired' });
    const second = await acquire(b, 'expiry', '30 seconds', 'new');
    expect(second).toMatchObject({ acquired: true, fence: '2' });
    expect(await renew(a, 'expiry', first.token)).toMatchObject({ renewed: false, reason: 'taken-over' });
    // a late release with the old token is a no-op ...
    expect(await release(a, 'expiry', first.token)).toBe(false);
    // ... and the new holder still holds the lease
    const status = (await b.query(`select state, holder, fence from leasehold.lease_status where name = 'expiry'`)).rows[0];
    expect(status).toMatchObject({ state: 'held', holder: 'new', fence: '2' });
    expect(await renew(b, 'expiry', second.token)).toMatchObject({ renewed: true });
    expect((await acquire(a, 'expiry', '30 seconds', 'old')).acquired).toBe(false);
  });

  it('renews only with the current token', async () => {
    const [a] = conns as [pg.Client];
    const lease = await acquire(a, 'renewing', '1 second', 'x');
    await sleep(600);
    expect(await renew(a, 'renewing', lease.token, '1 second')).toMatchObject({ renewed: true });
    await sleep(600); // past the first expiry, within the renewed one
    expect(await renew(a, 'renewing', lease.token, '1 second')).toMatchObject({ renewed: true });
    expect(await renew(a, 'renewing', '00000000-0000-0000-0000-000000000000')).toMatchObject({ renewed: false, reason: 'taken-over' });
  });

  it('release frees the lease at once for the next acquirer, with the next fence', async () => {
    const [a, b] = conns as [pg.Client, pg.Client];
    const first = await acquire(a, 'handover', '1 hour', 'a');
    expect(await release(a, 'handover', first.token)).toBe(true);
    expect(await release(a, 'handover', first.token)).toBe(false);
    expect(await acquire(b, 'handover', '1 hour', 'b')).toMatchObject({ acquired: true, fence: '2' });
  });
});

describe('slots', () => {
  it('claims each slot once, refuses older and future slots', async () => {
    const [a, b] = conns as [pg.Client, pg.Client];
    const now = (await a.query('select now() as now')).rows[0].now as Date;
    const slot1 = new Date(now.getTime() - 2_000);
    const slot2 = new Date(now.getTime() - 1_000);
    const s1 = await acquire(a, 'slotted', '30 seconds', 'a', slot1);
    expect(s1.acquired).toBe(true);
    await release(a, 'slotted', s1.token);
    expect(await acquire(b, 'slotted', '30 seconds', 'b', slot1)).toMatchObject({ acquired: false, reason: 'slot-taken' });
    expect(await acquire(b, 'slotted', '30 seconds', 'b', new Date(now.getTime() + 60_000))).toMatchObject({
      acquired: false,
      reason: 'slot-not-due',
    });
    expect(await acquire(b, 'slotted', '30 seconds', 'b', slot2)).toMatchObject({ acquired: true, fence: '2' });
  });
});

describe('fenced writes in SQL', () => {
  it('assert_lease locks for the holder and raises LH003 for a stale one', async () => {
    const [a, b] = conns as [pg.Client, pg.Client];
    const old = await acquire(a, 'fenced-sql', '200 milliseconds', 'old');
    await sleep(300);
    const current = await acquire(b, 'fenced-sql', '30 seconds', 'new');
    await expect(a.query('select leasehold.assert_lease($1, $2, $3)', ['fenced-sql', old.token, old.fence])).rejects.toMatchObject({
      code: 'LH003',
      detail: 'fence is now 2, held by new',
    });
    expect((await b.query('select leasehold.holds_lease($1, $2, $3) as ok', ['fenced-sql', current.token, current.fence])).rows[0].ok).toBe(true);
    expect((await a.query('select leasehold.holds_lease($1, $2, $3) as ok', ['fenced-sql', old.token, old.fence])).rows[0].ok).toBe(false);
  });

  it('force_release bumps the fence and waits for an open fenced transaction', async () => {
    const [a, b] = conns as [pg.Client, pg.Client];
    const held = await acquire(a, 'forced', '30 seconds', 'victim');
    await a.query('begin');
    await a.query('select leasehold.assert_lease($1, $2, $3)', ['forced', held.token, held.fence]);
    let done = false;
    const forced = b.query('select * from leasehold.force_release($1)', ['forced']).then((r) => {
      done = true;
      return r.rows[0];
    });
    await sleep(200);
    expect(done).toBe(false); // waits for the fenced transaction
    await a.query('commit');
    expect(await forced).toMatchObject({ released: true, previous_holder: 'victim', previous_fence: '1', fence: '2' });
    await expect(a.query('select leasehold.assert_lease($1, $2, $3)', ['forced', held.token, held.fence])).rejects.toMatchObject({ code: 'LH003' });
    expect(await acquire(b, 'forced', '30 seconds', 'next')).toMatchObject({ acquired: true, fence: '3' });
  });
});

describe('argument checks in SQL', () => {
  it.each([
    ['', '1 minute', 'h', 'LH001', /must not be empty/],
    ['x'.repeat(201), '1 minute', 'h', 'LH001', /1-200 characters/],
    ['bad\nname', '1 minute', 'h', 'LH001', /control, bidirectional or invisible characters/],
    ['ok', '0 seconds', 'h', 'LH002', /must be positive/],
    ['ok', '-5 seconds', 'h', 'LH002', /must be positive/],
    ['ok', '30 days', 'h', 'LH002', /between 100 milliseconds and 7 days/],
    ['ok', '1 minute', '', 'LH004', /holder must be/],
  ])('acquire(%j, %j, %j) raises %s', async (name, ttl, holder, code, message) => {
    const [a] = conns as [pg.Client];
    await expect(a.query('select * from leasehold.acquire($1, $2::interval, $3)', [name, ttl, holder])).rejects.toMatchObject({
      code,
      message: expect.stringMatching(message),
    });
  });
});

/** Waits until each of `waiters` waits for a two-key advisory lock (a turn of acquire). */
async function waitForWaiters(observer: pg.Client, waiters: pg.Client[]): Promise<void> {
  const pids = waiters.map((c) => (c as unknown as { processID: number }).processID);
  for (let i = 0; i < 500; i++) {
    const { rows } = await observer.query<{ n: number }>(
      `select count(distinct pid)::int as n from pg_locks where locktype = 'advisory' and objsubid = 2 and not granted and pid = any ($1)`,
      [pids],
    );
    if ((rows[0]?.n ?? 0) >= pids.length) return;
  }
  throw new Error(`sessions ${pids.join(', ')} never waited for a turn`);
}
