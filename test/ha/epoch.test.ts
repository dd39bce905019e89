// The lease protocol across a promotion, on one server of this test's own: the server stops
// abruptly, recovers its own WAL only up to an earlier point (as a standby that had not
// received the newest commits would) and is promoted to a new timeline. Whatever was
// committed after that point is lost, exactly as with asynchronous replication.
import { execFileSync } from 'node:child_process';
import { appendFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.js';
import { migrate } from '../../src/db/migrations.js';
import { FAILOVER_MUTANTS, installMutant } from '../../faults/mutants.js';
import { waitFor } from '../support/db.js';
import { requestedPrograms } from '../support/postgres-major.js';

let server: EmbeddedPostgres;
let pool: pg.Pool;
const serverLog: string[] = [];

type Grant = { acquired: boolean; token: string; fence: string; reason: string; holder: string | null; expires_at: Date; acquired_at: Date };
const acquire = async (name: string, holder: string, ttl = '60 seconds', key: string | null = null) =>
  (await pool.query<Grant>('select * from leasehold.acquire($1, $2::interval, $3, $4::bigint)', [name, ttl, holder, key])).rows[0] as Grant;
const holds = async (name: string, token: string, fence: string) =>
  (await pool.query<{ ok: boolean }>('select leasehold.holds_lease($1, $2, $3) as ok', [name, token, fence])).rows[0]?.ok;
const assertError = async (name: string, token: string, fence: string) =>
  pool.query('select leasehold.assert_lease($1, $2, $3)', [name, token, fence]).then(
    () => undefined,
    (error: { code?: string; detail?: string }) => error,
  );
const scalar = async <T>(sql: string, values: unknown[] = []): Promise<T> =>
  Object.values((await pool.query(sql, values)).rows[0] as Record<string, unknown>)[0] as T;

// This test's own server, of LEASEHOLD_PG_MAJOR when set (npm run test:versions).
const startServer = async () =>
  startEmbeddedPostgres({ settings: { wal_level: 'replica' }, onLog: (line) => serverLog.push(line), programs: await requestedPrograms() });

beforeAll(async () => {
  server = await startServer();
  pool = new pg.Pool({ connectionString: server.connectionString, max: 4 });
  pool.on('error', () => undefined);
  await migrate(pool);
});

afterAll(async () => {
  await pool?.end();
  await server?.stop();
});

async function signalAndWait(signal: NodeJS.Signals): Promise<void> {
  const pid = server.pid;
  if (!pid) throw new Error('no postmaster');
  process.kill(pid, signal);
  await waitFor(() => {
    try {
      process.kill(pid, 0);
      return false;
    } catch {
      return true;
    }
  }, 20_000);
}

async function start(): Promise<void> {
  await server.restart().catch((error: unknown) => {
    throw new Error(`the server did not come back: ${String(error)}\n${serverLog.slice(-15).join('\n')}`);
  });
  pool = new pg.Pool({ connectionString: server.connectionString, max: 4 });
  pool.on('error', () => undefined);
  await waitFor(async () => (await scalar<boolean>('select pg_is_in_recovery()').catch(() => true)) === false, 20_000, 100);
}

/** The standby: a copy of the data directory as it is now (the server is stopped cleanly for it). */
async function snapshotStandby(): Promise<string> {
  await pool.end();
  await signalAndWait('SIGINT');
  const copy = `${server.dataDir}-standby`;
  execFileSync('cp', ['-a', server.dataDir, copy]); // -a: the server's OS user keeps owning it
  await start();
  return copy;
}

let retired = 0;

/** The primary dies; the standby copy takes its place and is promoted to the next timeline. */
async function promote(standby: string): Promise<void> {
  await pool.end().catch(() => undefined);
  await signalAndWait('SIGQUIT'); // immediate shutdown, like a crash
  await rename(server.dataDir, `${server.dataDir}-old-primary-${++retired}`);
  await rename(standby, server.dataDir);
  // archive recovery from its own WAL only, then a new timeline: what a promotion does
  await writeFile(join(server.dataDir, 'recovery.signal'), '');
  await appendFile(join(server.dataDir, 'postgresql.conf'), "\nrestore_command = 'false'\n");
  await start();
}

interface Observed {
  epochBefore: number;
  epochAfter: number;
  lostFence: string;
  fenceAfter: string;
  releasedTokenHolds: boolean | undefined;
  releasedTokenError: { code?: string; detail?: string } | undefined;
  keptBy: Grant;
  keptHoldsBeforeRenew: boolean | undefined;
  keptRenewed: boolean | undefined;
  keptHoldsAfterRenew: boolean | undefined;
  keptStatus: { holder_alive: boolean | null; epoch: number } | undefined;
}

/** Grants on the old primary, some of them lost in the failover; what the new primary says. */
async function failoverScenario(): Promise<Observed> {
  const epochBefore = await scalar<number>('select leasehold.epoch()');
  // Liveness: a session holds its advisory lock (until the server stops under it).
  const live = new pg.Client({ connectionString: server.connectionString });
  live.on('error', () => undefined);
  await live.connect();
  const key = ((await live.query<{ k: string }>('select leasehold.register_liveness() as k')).rows[0] as { k: string }).k;

  // Replicated state: three leases held.
  const kept = await acquire('kept', 'holder-a', '60 seconds', key); // its holder lives on
  const released = await acquire('released', 'holder-b'); // released; the release is lost
  const superseded = await acquire('superseded', 'holder-c', '1 second'); // taken over; lost
  expect([kept.fence, released.fence, superseded.fence]).toEqual(['1', '1', '1']);
  const standby = await snapshotStandby();

  // Acknowledged on the old primary, then lost with it.
  expect((await pool.query('select leasehold.release($1, $2) as r', ['released', released.token])).rows[0].r).toBe(true);
  await new Promise((resolve) => setTimeout(resolve, 1_100));
  const taker = await acquire('superseded', 'holder-d');
  expect(taker.acquired).toBe(true);

  await promote(standby);
  await live.end().catch(() => undefined);

  const epochAfter = await scalar<number>('select leasehold.epoch()');
  // 'superseded' (ttl 1 s) was last confirmed before the failover: it stays held for one more
  // ttl of grace after its expiry. Wait for that on the database clock, however fast the
  // server came back.
  // The row's own expires_at and ttl: the client's Date copy is cut to milliseconds, which
  // would let this wait end up to 1 ms before the grace does.
  await waitFor(() => scalar<boolean>("select expires_at + ttl < now() from leasehold.leases where name = 'superseded'"), 10_000, 50);
  const again = await acquire('superseded', 'holder-e');
  expect(again.acquired).toBe(true);
  const releasedTokenHolds = await holds('released', released.token, released.fence);
  const releasedTokenError = await assertError('released', released.token, released.fence);
  const keptBy = await acquire('kept', 'holder-f');
  const keptHoldsBeforeRenew = await holds('kept', kept.token, kept.fence);
  const renewed = (await pool.query<{ renewed: boolean }>('select * from leasehold.renew_leases(($1, $2, $3::interval))', ['kept', kept.token, '60 seconds'])).rows[0];
  const keptHoldsAfterRenew = await holds('kept', kept.token, kept.fence);
  const keptStatus = (await pool.query<{ holder_alive: boolean | null; epoch: number }>("select holder_alive, epoch from leasehold.lease_status where name = 'kept'")).rows[0];
  return {
    epochBefore,
    epochAfter,
    lostFence: taker.fence,
    fenceAfter: again.fence,
    releasedTokenHolds,
    releasedTokenError,
    keptBy,
    keptHoldsBeforeRenew,
    keptRenewed: renewed?.renewed,
    keptHoldsAfterRenew,
    keptStatus,
  };
}

interface Forks {
  timelines: number[];
  fences: string[];
  written: boolean[];
}

/**
 * A primary with two standbys that have both received everything; the primary dies and the
 * first standby is promoted and grants (a fenced write acknowledged); it dies before the second
 * standby followed it, and the second is promoted - on the same timeline number - and grants.
 */
async function twoForksScenario(): Promise<Forks> {
  await pool.query('create table if not exists fork_writes (name text, fence bigint, by text)');
  const first = await snapshotStandby();
  const second = `${first}-2`;
  execFileSync('cp', ['-a', first, second]);
  const forks: Forks = { timelines: [], fences: [], written: [] };
  for (const [standby, by] of [
    [first, 'x'],
    [second, 'y'],
  ] as const) {
    await promote(standby);
    forks.timelines.push(await scalar<number>('select leasehold.epoch()'));
    const grant = await acquire('forked', by, '1 second');
    expect(grant.acquired).toBe(true);
    forks.fences.push(grant.fence);
    const db = await pool.connect();
    try {
      await db.query('begin');
      await db.query('select leasehold.assert_lease($1, $2, $3)', ['forked', grant.token, grant.fence]);
      await db.query('insert into fork_writes values ($1, $2, $3)', ['forked', grant.fence, by]);
      await db.query('commit');
      forks.written.push(true);
    } catch {
      await db.query('rollback').catch(() => undefined);
      forks.written.push(false);
    } finally {
      db.release();
    }
  }
  return forks;
}

describe('a failover that loses the newest commits', () => {
  it('never grants a fence twice, refuses resurrected tokens, keeps live holders, ignores old liveness locks', async () => {
    const seen = await failoverScenario();
    expect([seen.epochBefore, seen.epochAfter]).toEqual([1, 2]);
    // The lost grant's fence (2) is never granted again: the next one is above anything the
    // old primary can have issued.
    expect(seen.lostFence).toBe('2');
    // Timeline 2's fences start at its fork's base: the database clock at its first grant, in
    // milliseconds since 2020, times 1024.
    const fork = await pool.query<{ base: string; first_grant: Date }>('select base, first_grant from leasehold.forks where timeline = 2');
    expect(fork.rows).toHaveLength(1);
    const base = BigInt(fork.rows[0]!.base);
    expect(BigInt(seen.fenceAfter)).toBe(base);
    expect(Number(base / 1024n) + Date.UTC(2020, 0, 1)).toBeGreaterThan(Date.now() - 120_000);
    expect(Number(base)).toBeLessThan(Number.MAX_SAFE_INTEGER);
    // The released token is back in the row, but it was confirmed in epoch 1: no fenced write.
    expect(seen.releasedTokenHolds).toBe(false);
    expect(seen.releasedTokenError?.code).toBe('LH003');
    expect(seen.releasedTokenError?.detail).toMatch(/failover/);
    // 'kept': its liveness lock died with the old server, which proves nothing: still held.
    expect(seen.keptBy).toMatchObject({ acquired: false, reason: 'held', holder: 'holder-a' });
    // Its live holder renews on the new primary and may write again under its fence.
    expect(seen.keptHoldsBeforeRenew).toBe(false);
    expect(seen.keptRenewed).toBe(true);
    expect(seen.keptHoldsAfterRenew).toBe(true);
    expect(seen.keptStatus).toEqual({ holder_alive: null, epoch: 2 });
  }, 90_000);

  it('never acknowledges a fence twice when two standbys of one primary are promoted in turn (two forks of one timeline number)', async () => {
    const seen = await twoForksScenario();
    // the case the timeline alone cannot tell apart: both promoted servers are on the same timeline
    expect(seen.timelines[0]).toBe(seen.timelines[1]);
    expect(seen.fences[1]).not.toBe(seen.fences[0]);
    expect(BigInt(seen.fences[1]!)).toBeGreaterThan(BigInt(seen.fences[0]!));
    // each fenced write was acknowledged on its own fork, under its own fence
    expect(seen.written).toEqual([true, true]);
  }, 90_000);

  it('keeps a lease confirmed before the failover for one more ttl after its expiry', async () => {
    // Made on the new timeline, then stamped as if confirmed before it (the failover above
    // happened already; this is the row a holder whose last renewals were lost leaves behind).
    const grant = await acquire('grace', 'holder-g', '2 seconds');
    expect(grant.acquired).toBe(true);
    await pool.query("update leasehold.leases set epoch = 1 where name = 'grace'");
    await waitFor(async () => scalar<boolean>("select expires_at <= now() from leasehold.leases where name = 'grace'"), 10_000, 50);
    const during = await acquire('grace', 'holder-h');
    expect(during.acquired).toBe(false);
    expect(during.reason).toBe('held');
    const after = await waitFor(async () => {
      const r = await acquire('grace', 'holder-h');
      return r.acquired ? r : undefined;
    }, 10_000, 100);
    // not before expires_at + ttl (database clock)
    expect(after.acquired_at.getTime()).toBeGreaterThanOrEqual(grant.expires_at.getTime() + 2_000);
    expect(Number(after.fence)).toBeGreaterThan(Number(grant.fence));
  }, 30_000);

  it('fails with the failover rules cut out (the mutants of faults/mutants.ts)', async () => {
    await pool.end();
    await server.stop();
    server = await startServer();
    pool = new pg.Pool({ connectionString: server.connectionString, max: 4 });
    pool.on('error', () => undefined);
    await migrate(pool);
    for (const mutant of FAILOVER_MUTANTS) await installMutant(pool, mutant);
    const seen = await failoverScenario();
    expect(seen.fenceAfter).toBe(seen.lostFence); // fence-without-epoch: a fence granted twice
    expect(seen.releasedTokenHolds).toBe(true); // epoch-not-checked: a released token writes again
    expect(seen.keptBy.acquired).toBe(true); // liveness-any-incarnation: a live holder replaced at once
  }, 90_000);

  it('fails with the fork rule cut out: two forks of one timeline number grant the same fence (fence-by-timeline)', async () => {
    await pool.end();
    await server.stop();
    server = await startServer();
    pool = new pg.Pool({ connectionString: server.connectionString, max: 4 });
    pool.on('error', () => undefined);
    await migrate(pool);
    await installMutant(pool, 'fence-by-timeline');
    const seen = await twoForksScenario();
    expect(seen.timelines).toEqual([2, 2]);
    expect(seen.fences[1]).toBe(seen.fences[0]);
    expect(seen.written).toEqual([true, true]);
  }, 90_000);
});
