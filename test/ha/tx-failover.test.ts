// Fenced transactions across a real failover: a primary and a streaming standby (synchronous, so
// nothing acknowledged is lost), the client behind one address, the primary killed, the standby
// promoted and the address switched. A lease confirmed before the failover is refused by the new
// primary until a renewal confirms it there; lease.transaction() and a worker's ctx.transaction()
// renew once by themselves and run, and raise LeaseLostError when that renewal finds the lease
// lost. start_run applies the same check.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { FaultProxy } from '../../faults/proxy.js';
import { createLeasehold, LeaseLostError, startWorker, type JobContext, type Lease, type Leasehold, type Logger, type Worker } from '../../src/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { waitFor } from '../support/db.js';
import { ClusterTemplate, findBinaries, type ReplicatedPair } from '../../faults/replication.js';

const kind = inject('serverKind');
const binaries = await findBinaries(kind);
const missing = typeof binaries === 'string' ? binaries : undefined;
if (missing) process.stderr.write(`[tx-failover] skipped: ${missing}\n`);

let template: ClusterTemplate | undefined;
let pair: ReplicatedPair | undefined;
let proxy: FaultProxy | undefined;
let leasehold: Leasehold | undefined;
let worker: Worker | undefined;

async function prepare(url: string): Promise<void> {
  const setup = await createLeasehold({ connectionString: url, logger: silentLogger(), liveness: false });
  await setup.close();
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query('create table fenced_writes (value text primary key, fence bigint not null)');
  await client.end();
}

/** A statement on the server itself, not through the clients' address. */
async function direct<T extends pg.QueryResultRow>(url: string, sql: string, values: unknown[] = []): Promise<T[]> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return (await client.query<T>(sql, values)).rows;
  } finally {
    await client.end().catch(() => undefined);
  }
}

const write = (lease: Lease, value: string) =>
  lease.transaction(async (client) => {
    await client.query('insert into fenced_writes (value, fence) values ($1, $2)', [value, lease.fence]);
    return (await client.query<{ epoch: number }>('select leasehold.epoch() as epoch')).rows[0]?.epoch;
  });

let failoverDone: () => void = () => undefined;
const failedOver = new Promise<void>((resolve) => (failoverDone = resolve));
let workerOutcome: { epoch: number | undefined; fence: number } | { error: unknown } | undefined;
const logged: string[] = [];
const capture: Logger = {
  debug: () => undefined,
  info: (fields) => logged.push(String((fields as { event?: unknown }).event)),
  warn: () => undefined,
  error: () => undefined,
};

/** ctx.transaction(), once more if a pooled connection the failover broke fails it first. */
async function fencedWriteWithRetry(ctx: JobContext): Promise<number | undefined> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await ctx.transaction(async (client) => {
        await client.query('insert into fenced_writes (value, fence) values ($1, $2)', ['worker', ctx.fence]);
        return (await client.query<{ epoch: number }>('select leasehold.epoch() as epoch')).rows[0]?.epoch;
      });
    } catch (error) {
      if (attempt >= 3 || (error as { code?: string }).code !== 'TRANSACTION_FAILED') throw error;
    }
  }
}

describe.skipIf(missing !== undefined)(`fenced transactions across a failover (${kind} binaries)`, () => {
  let kept: Lease;
  let forced: Lease;
  let exec: { token: string; fence: number };
  const renewals: string[] = [];

  beforeAll(async () => {
    if (typeof binaries === 'string') return;
    template = await ClusterTemplate.create(binaries, prepare);
    proxy = new FaultProxy(1);
    await proxy.listen();
    pair = await template.pair('sync', proxy);
    leasehold = await createLeasehold({ connectionString: pair.url, logger: silentLogger(), liveness: false, migrate: false });
    leasehold.on('lease:renewed', (info) => renewals.push(info.name));

    // Confirmed in epoch 1, replicated synchronously; no heartbeats, so nothing renews them but
    // the fenced transaction itself.
    const take = async (name: string) => {
      const result = await leasehold!.acquire(name, { ttl: '60s' });
      if (!result.acquired) throw new Error(`${name} not acquired`);
      return result.lease;
    };
    kept = await take('kept');
    forced = await take('forced');
    const execLease = await take('exec');
    exec = { token: execLease.token, fence: execLease.fence };
    expect(await write(kept, 'before')).toBe(1);

    // A worker whose first run is under way across the failover (its heartbeat, every ttl/3 =
    // 20 s, does not come before the run's fenced transaction).
    let started: () => void = () => undefined;
    const running = new Promise<void>((resolve) => (started = resolve));
    let first = true;
    worker = await startWorker({
      connectionString: pair.url,
      liveness: false,
      migrate: false,
      handleSignals: false,
      logger: capture,
      jobs: [
        {
          name: 'worker-job',
          every: '1s',
          ttl: '60s',
          handler: async (ctx) => {
            if (!first) return;
            first = false;
            started();
            await failedOver;
            workerOutcome = await fencedWriteWithRetry(ctx).then(
              (epoch) => ({ epoch, fence: ctx.fence }),
              (error: unknown) => ({ error }),
            );
          },
        },
      ],
    });
    await running;

    await pair.primary.kill();
    await pair.standby.promote();
    proxy.retarget(pair.standby.port, 'reset');
    // the pools drop the connections the reset broke (their 'error' events) before the next use
    await new Promise((resolve) => setTimeout(resolve, 500));
    failoverDone();
  }, 120_000);

  afterAll(async () => {
    await worker?.stop().catch(() => undefined);
    await leasehold?.close().catch(() => undefined);
    await pair?.close();
    await proxy?.close();
    template?.close();
  });

  it('a live holder: lease.transaction() renews once on the new primary and commits, within the same call', async () => {
    const standby = pair!.standby.url();
    const [row] = await direct<{ epoch: number; now: number }>(standby, `select epoch, leasehold.epoch() as now from leasehold.leases where name = 'kept'`);
    expect(row).toEqual({ epoch: 1, now: 2 }); // refused by assert_lease until renewed
    const expiresBefore = kept.expiresAt.getTime();

    // The first attempt may meet a pooled connection the reset broke: that is a
    // TransactionFailedError with nothing written, and the pool drops the connection.
    let epoch: number | undefined;
    for (let attempt = 1; epoch === undefined; attempt++) {
      try {
        epoch = await write(kept, 'after');
      } catch (error) {
        if (attempt >= 3 || (error as { code?: string }).code !== 'TRANSACTION_FAILED') throw error;
      }
    }
    expect(epoch).toBe(2);
    expect(kept.lost).toBe(false);
    expect(renewals.filter((name) => name === 'kept')).toHaveLength(1);
    expect(kept.expiresAt.getTime()).toBeGreaterThan(expiresBefore);
    const writes = await direct<{ value: string; fence: string }>(standby, "select value, fence from fenced_writes where value in ('before', 'after') order by value");
    expect(writes).toEqual([
      { value: 'after', fence: String(kept.fence) },
      { value: 'before', fence: String(kept.fence) },
    ]);
    expect((await direct<{ epoch: number }>(standby, `select epoch from leasehold.leases where name = 'kept'`))[0]?.epoch).toBe(2);
    // confirmed now: the next transaction needs no renewal
    await write(kept, 'again');
    expect(renewals.filter((name) => name === 'kept')).toHaveLength(1);
  }, 60_000);

  it("a worker's run: ctx.transaction() renews once on the new primary and commits", async () => {
    const outcome = await waitFor(() => workerOutcome, 30_000, 50);
    if ('error' in outcome) throw outcome.error;
    expect(outcome.epoch).toBe(2);
    expect(logged).toContain('lease:reconfirmed');
    expect(await direct(pair!.standby.url(), `select fence from fenced_writes where value = 'worker'`)).toEqual([{ fence: String(outcome.fence) }]);
  }, 60_000);

  it('a lost lease: when the renewal finds the lease lost, the call raises LeaseLostError and writes nothing', async () => {
    // An operator force-releases the lease while its holder renews on the new primary. To put
    // the force-release exactly there, the operator's session holds the row's FOR NO KEY UPDATE
    // lock from before the call: the fence check (FOR KEY SHARE) passes it and reports the
    // failover; the renewal (an UPDATE) waits for it, then finds the lease released.
    const standby = pair!.standby.url();
    const operator = new pg.Client({ connectionString: standby });
    const observer = new pg.Client({ connectionString: standby });
    for (const c of [operator, observer]) {
      c.on('error', () => undefined);
      await c.connect();
    }
    try {
      await operator.query('begin');
      await operator.query(`select 1 from leasehold.leases where name = 'forced' for no key update`);
      let ran = false;
      const pending = forced
        .transaction(async () => {
          ran = true;
        })
        .then(
          () => undefined,
          (e: unknown) => e,
        );
      // the renewal waits for the row lock (it gives up after its lock_timeout of 2 s)
      await waitFor(async () => {
        const { rows } = await observer.query<{ n: number }>(
          `select count(*)::int as n from pg_stat_activity
            where pid <> pg_backend_pid() and wait_event_type = 'Lock' and query like '%leasehold.renew_leases((%'`,
        );
        return (rows[0]?.n ?? 0) > 0;
      }, 2_000, 10);
      await operator.query(`select * from leasehold.force_release('forced')`);
      await operator.query('commit');
      const error = await pending;
      expect(error).toBeInstanceOf(LeaseLostError);
      expect((error as LeaseLostError).reason).toBe('released');
      expect(ran).toBe(false);
      expect(forced.lost).toBe(true);
      expect(forced.signal.aborted).toBe(true);
    } finally {
      await operator.query('rollback').catch(() => undefined);
      await Promise.allSettled([operator.end(), observer.end()]);
    }
  }, 60_000);

  it('a wrong token is refused at once, without a renewal (the failover detail is only for the right token)', async () => {
    const standby = pair!.standby.url();
    const [row] = await direct<{ epoch: number }>(standby, `select epoch from leasehold.leases where name = 'exec'`);
    expect(row?.epoch).toBe(1);
    const refused = await direct(standby, `select leasehold.assert_lease('exec', gen_random_uuid(), $1)`, [exec.fence]).then(
      () => undefined,
      (e: { code?: string; detail?: string }) => e,
    );
    expect(refused).toMatchObject({ code: 'LH003', detail: 'the token does not match the lease' });
  }, 60_000);

  it('start_run refuses a token confirmed in an earlier epoch, and records the run once the lease is renewed', async () => {
    const standby = pair!.standby.url();
    const start = () =>
      direct(standby, `select leasehold.start_run('exec', $1, $2)`, [exec.token, exec.fence]).then(
        () => undefined,
        (e: { code?: string; detail?: string }) => e,
      );
    const refused = await start();
    expect(refused?.code).toBe('LH003');
    expect(refused?.detail).toMatch(/^a database failover happened since the lease was last confirmed/);
    expect(await direct(standby, `select 1 from leasehold.runs where job = 'exec'`)).toHaveLength(0);
    const [renewed] = await direct<{ renewed: boolean }>(standby, `select renewed from leasehold.renew_leases(('exec', $1, '60 seconds'))`, [exec.token]);
    expect(renewed?.renewed).toBe(true);
    expect(await start()).toBeUndefined();
    expect(await direct(standby, `select fence from leasehold.runs where job = 'exec'`)).toEqual([{ fence: String(exec.fence) }]);
  }, 60_000);
});
