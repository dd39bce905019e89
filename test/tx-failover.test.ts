// Fenced transactions across a real failover: a primary and a streaming standby (synchronous, so
// nothing acknowledged is lost), the client behind one address, the primary killed, the standby
// promoted and the address switched. A lease confirmed before the failover is refused by the new
// primary until a renewal confirms it there; lease.transaction() renews once by itself and runs,
// and raises LeaseLostError when that renewal finds the lease lost.
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { FaultProxy } from '../faults/proxy.js';
import { createLeasehold, LeaseLostError, type Lease, type Leasehold } from '../src/index.js';
import { silentLogger } from '../src/observe/logger.js';
import { ClusterTemplate, findBinaries, type ReplicatedPair } from './support/replication.js';

const kind = inject('serverKind');
const binaries = await findBinaries(kind);
const missing = typeof binaries === 'string' ? binaries : undefined;
if (missing) process.stderr.write(`[tx-failover] skipped: ${missing}\n`);

let template: ClusterTemplate | undefined;
let pair: ReplicatedPair | undefined;
let proxy: FaultProxy | undefined;
let leasehold: Leasehold | undefined;

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

describe.skipIf(missing !== undefined)(`fenced transactions across a failover (${kind} binaries)`, () => {
  let kept: Lease;
  let swapped: Lease;
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
    swapped = await take('swapped');
    const execLease = await take('exec');
    exec = { token: execLease.token, fence: execLease.fence };
    expect(await write(kept, 'before')).toBe(1);

    await pair.primary.kill();
    await pair.standby.promote();
    proxy.retarget(pair.standby.port, 'reset');
  }, 120_000);

  afterAll(async () => {
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
    const writes = await direct<{ value: string; fence: string }>(standby, 'select value, fence from fenced_writes order by value');
    expect(writes).toEqual([
      { value: 'after', fence: String(kept.fence) },
      { value: 'before', fence: String(kept.fence) },
    ]);
    expect((await direct<{ epoch: number }>(standby, `select epoch from leasehold.leases where name = 'kept'`))[0]?.epoch).toBe(2);
    // confirmed now: the next transaction needs no renewal
    await write(kept, 'again');
    expect(renewals.filter((name) => name === 'kept')).toHaveLength(1);
  }, 60_000);

  it('a lost lease: when the renewal finds it lost, the call raises LeaseLostError and writes nothing', async () => {
    // The row now carries another token under the same fence. No function makes this row (it
    // stands for a grant the client cannot know about); it is made by hand so that the fence
    // check reports only the failover and the renewal that follows finds the lease taken.
    await direct(pair!.standby.url(), `update leasehold.leases set token = gen_random_uuid() where name = 'swapped'`);
    let ran = false;
    const error = await swapped
      .transaction(async () => {
        ran = true;
      })
      .then(
        () => undefined,
        (e: unknown) => e,
      );
    expect(error).toBeInstanceOf(LeaseLostError);
    expect((error as LeaseLostError).reason).toBe('taken-over');
    expect(ran).toBe(false);
    expect(swapped.lost).toBe(true);
    expect(swapped.signal.aborted).toBe(true);
  }, 60_000);

  it('start_run refuses a token confirmed in an earlier epoch, and records the run once the lease is renewed', async () => {
    const standby = pair!.standby.url();
    const start = () =>
      direct(standby, `select leasehold.register_external_job('exec', null, 60000, 'h'), leasehold.start_run('exec', $1, $2)`, [exec.token, exec.fence]).then(
        () => undefined,
        (e: { code?: string; detail?: string }) => e,
      );
    const refused = await start();
    expect(refused?.code).toBe('LH003');
    expect(refused?.detail).toMatch(/^a database failover happened since the lease was last confirmed/);
    expect(await direct(standby, `select 1 from leasehold.runs where job = 'exec'`)).toHaveLength(0);
    const [renewed] = await direct<{ renewed: boolean }>(standby, `select renewed from leasehold.renew('exec', $1, '60 seconds')`, [exec.token]);
    expect(renewed?.renewed).toBe(true);
    expect(await start()).toBeUndefined();
    expect(await direct(standby, `select fence from leasehold.runs where job = 'exec'`)).toEqual([{ fence: String(exec.fence) }]);
  }, 60_000);
});
