// The TypeScript client over the SQL protocol: results as values, fenced transactions,
// heartbeats and abort signals, liveness. Each client here has its own connections.
import { beforeAll, describe, expect, it } from 'vitest';
import { LeaseLostError, type Lease } from '../../src/index.js';
import { controlOfLease } from '../../src/lease/lease.js';
import { client, freshDatabase, rawPool, sleep, waitFor } from '../support/db.js';

/** The liveness key a lease was taken under (internal to the library). */
const holderKeyOf = (lease: Lease) => controlOfLease(lease).grant.holderKey;

let url: string;

beforeAll(async () => {
  url = await freshDatabase();
  const setup = rawPool(url, 2);
  await (await client(url, { liveness: false })).close();
  await setup.query('create table fenced_writes (name text, fence bigint, holder text, value text)');
});

function held<T extends { acquired: boolean }>(result: T): Extract<T, { acquired: true }> {
  if (!result.acquired) throw new Error(`expected to acquire, got ${JSON.stringify(result)}`);
  return result as Extract<T, { acquired: true }>;
}

describe('acquire', () => {
  it('returns a lease to the first caller and a skip naming the holder to the second', async () => {
    const a = await client(url, { holder: 'worker-a' });
    const b = await client(url, { holder: 'worker-b' });
    const { lease } = held(await a.acquire('report', { ttl: '30s' }));
    expect(lease).toMatchObject({ name: 'report', fence: 1, holder: 'worker-a', idempotencyKey: 'report#1' });
    const skipped = await b.acquire('report', { ttl: '30s' });
    expect(skipped).toMatchObject({ acquired: false, reason: 'held', holder: 'worker-a', fence: 1 });
    if (skipped.acquired) throw new Error('unreachable');
    expect(skipped.until!.getTime() - skipped.since!.getTime()).toBe(30_000);
    expect(await lease.release()).toBe(true);
    expect(held(await b.acquire('report', { ttl: '30s' })).lease.fence).toBe(2);
  });

  it('gives a slot claim an idempotency key stable for that occurrence', async () => {
    const a = await client(url);
    const b = await client(url);
    const slot = new Date(Date.now() - 60_000);
    slot.setMilliseconds(0);
    const { lease } = held(await a.acquire('billing', { ttl: '30s', slot }));
    expect(lease.idempotencyKey).toBe(`billing@${slot.toISOString()}`);
    expect(lease.slot).toEqual(slot);
    await lease.release();
    expect(await b.acquire('billing', { ttl: '30s', slot })).toMatchObject({ acquired: false, reason: 'slot-taken' });
  });
});

describe('a released lease', () => {
  // The LH003 recipe after a failover (renew, run again) is only for a holder that still holds
  // the lease: a release lost with the old primary would let a renewal revive the token.
  it('never renews and never runs a fenced transaction again, without asking the database', async () => {
    const leasehold = await client(url, { holder: 'releaser' });
    const attempt = await leasehold.acquire('released-token', { ttl: '30s' });
    if (!attempt.acquired) throw new Error('not acquired');
    const { lease } = attempt;
    expect(await lease.release()).toBe(true);
    await expect(lease.renew()).rejects.toMatchObject({ reason: 'released' });
    await expect(lease.transaction(async () => 'written')).rejects.toBeInstanceOf(LeaseLostError);
    // the token is dead in the database too
    const { rows } = await rawPool(url, 1).query<{ renewed: boolean }>("select renewed from leasehold.renew_leases(('released-token', $1, '30 seconds'))", [lease.token]);
    expect(rows[0]?.renewed).toBe(false);
  });
});

describe('fenced transactions', () => {
  it('refuses a worker that outlived its lease and accepts the new holder', async () => {
    const stale = await client(url, { holder: 'stale', liveness: false });
    const fresh = await client(url, { holder: 'fresh' });
    const { lease: old } = held(await stale.acquire('outlived', { ttl: 300 }));
    await sleep(400); // the worker is still "running" but its lease has expired
    const { lease: current } = held(await fresh.acquire('outlived', { ttl: '30s' }));
    expect(current.fence).toBe(old.fence + 1);

    const pool = rawPool(url, 2);
    let ran = false;
    // the local deadline already marked it lost: refused without touching the database
    await expect(
      old.transaction(async (c) => {
        ran = true;
        await c.query(`insert into fenced_writes values ('outlived', $1, 'stale', 'late')`, [old.fence]);
      }),
    ).rejects.toBeInstanceOf(LeaseLostError);
    expect(ran).toBe(false);
    expect(old.signal.aborted).toBe(true);
    expect(old.signal.reason).toMatchObject({ code: 'LEASE_LOST', reason: 'expired' });

    await current.transaction(async (c) => {
      await c.query(`insert into fenced_writes values ('outlived', $1, 'fresh', 'ok')`, [current.fence]);
    });
    const { rows } = await pool.query(`select holder, fence from fenced_writes where name = 'outlived'`);
    expect(rows).toEqual([{ holder: 'fresh', fence: String(current.fence) }]);
  });

  it('is refused by the database (LH003) even when the client still believes it holds the lease', async () => {
    const a = await client(url, { holder: 'a', liveness: false });
    const b = await client(url, { holder: 'b' });
    const { lease } = held(await a.acquire('db-decides', { ttl: '30s' }));
    await b.forceRelease('db-decides'); // bumps the fence behind the holder's back
    expect(lease.lost).toBe(false);
    let ran = false;
    const error = await lease
      .transaction(async () => {
        ran = true;
      })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LeaseLostError);
    expect(error).toMatchObject({ reason: 'fence-mismatch', leaseName: 'db-decides', fence: 1 });
    expect((error as Error).message).toMatch(/fence is now 2/);
    expect(ran).toBe(false);
    expect(lease.signal.aborted).toBe(true);
  });

  it('rolls back what the handler wrote when it throws', async () => {
    const a = await client(url);
    const { lease } = held(await a.acquire('rollback', { ttl: '30s' }));
    await expect(
      lease.transaction(async (c) => {
        await c.query(`insert into fenced_writes values ('rollback', 1, 'a', 'x')`);
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    const { rows } = await rawPool(url, 1).query(`select count(*)::int as n from fenced_writes where name = 'rollback'`);
    expect(rows[0].n).toBe(0);
    expect(lease.lost).toBe(false);
  });

  it('refuses an unknown transaction option before running anything, naming the closest one', async () => {
    const a = await client(url);
    const { lease } = held(await a.acquire('transaction-options', { ttl: '30s' }));
    let ran = false;
    const attempt = lease.transaction(async () => void (ran = true), { statementTimout: '1s' } as never);
    await expect(attempt).rejects.toThrow(/unknown option 'statementTimout' \(did you mean 'statementTimeout'\?\)/);
    expect(ran).toBe(false);
    expect(lease.lost).toBe(false);
    await lease.release();
  });

  it('makes a takeover wait while the holder commits, then lets it in with the next fence', async () => {
    const a = await client(url, { holder: 'committer', liveness: false });
    const b = await client(url, { holder: 'challenger' });
    const { lease } = held(await a.acquire('committing', { ttl: 500 }));
    let finish!: () => void;
    const gate = new Promise<void>((resolve) => (finish = resolve));
    const tx = lease.transaction(async (c) => {
      await c.query(`insert into fenced_writes values ('committing', $1, 'committer', 'slow')`, [lease.fence]);
      await gate;
    }, { idleTimeout: '10s' });
    await sleep(700); // the lease has expired by the clock, but its fenced transaction is open
    const blocked = await b.acquire('committing', { ttl: '30s' });
    expect(blocked).toMatchObject({ acquired: false, reason: 'holder-committing', holder: 'committer' });
    finish();
    await tx; // nobody took over while it was open, so its commit is safe and succeeds
    const { lease: next } = held(await b.acquire('committing', { ttl: '30s' }));
    expect(next.fence).toBe(lease.fence + 1);
  });

  it('ends a fenced transaction left idle longer than idleTimeout, freeing the lease for a takeover', async () => {
    const a = await client(url, { holder: 'sleeper', liveness: false });
    const b = await client(url, { holder: 'waker' });
    const { lease } = held(await a.acquire('idle-tx', { ttl: 300 }));
    const tx = lease
      .transaction(async (c) => {
        await c.query('select 1');
        await sleep(1_500); // idle in transaction, like a paused process
        await c.query('select 1');
      }, { idleTimeout: 500 })
      .catch((e: unknown) => e);
    await sleep(900);
    const { lease: next } = held(await waitFor(async () => {
      const r = await b.acquire('idle-tx', { ttl: '30s' });
      return r.acquired ? r : undefined;
    }, 5_000));
    expect(next.fence).toBe(lease.fence + 1);
    expect(await tx).toBeInstanceOf(Error); // the holder's transaction was terminated by the server
  });
});

describe('run', () => {
  it('heartbeats past the ttl, hands over signal, fence and key, and releases at the end', async () => {
    const a = await client(url);
    const b = await client(url);
    const during: unknown[] = [];
    const result = await a.run('long-job', { ttl: 600 }, async (ctx) => {
      await sleep(1_500); // 2.5 × ttl: only heartbeats keep it
      during.push(await b.acquire('long-job', { ttl: '30s' }));
      expect(ctx.signal.aborted).toBe(false);
      await ctx.transaction(async (c) => c.query(`insert into fenced_writes values ('long-job', $1, 'a', 'done')`, [ctx.fence]));
      return ctx.idempotencyKey;
    });
    expect(result).toEqual({ ran: true, value: 'long-job#1', fence: 1 });
    expect(during[0]).toMatchObject({ acquired: false, reason: 'held' });
    // released: the next acquire wins. A heartbeat already in flight as the release committed can
    // still hold the row lock for a moment (its lock pass keeps the row it rechecked), which an
    // acquire reports as holder-committing; never as held
    const next = await waitFor(async () => {
      const r = await b.acquire('long-job', { ttl: '30s' });
      if (!r.acquired) expect(r.reason).toBe('holder-committing');
      return r.acquired ? r : undefined;
    }, 2_000);
    expect(held(next).lease.fence).toBe(2);
  });

  it('does not run the handler when the lease is held, and says who holds it', async () => {
    const a = await client(url, { holder: 'first' });
    const b = await client(url, { holder: 'second' });
    const { lease } = held(await a.acquire('busy', { ttl: '30s' }));
    let ran = false;
    const result = await b.run('busy', { ttl: '30s' }, async () => {
      ran = true;
    });
    expect(ran).toBe(false);
    expect(result).toMatchObject({ ran: false, skipped: { reason: 'held', holder: 'first', fence: lease.fence } });
  });

  it('fires the signal when the lease is taken away, and the fenced write is refused', async () => {
    const a = await client(url, { holder: 'victim' });
    const b = await client(url, { holder: 'operator' });
    let seen: unknown;
    const result = await a.run('taken', { ttl: 900 }, async (ctx) => {
      await b.forceRelease('taken');
      seen = await new Promise((resolve) => ctx.signal.addEventListener('abort', () => resolve(ctx.signal.reason), { once: true }));
      return ctx.transaction(async () => 'should not commit').catch((e: unknown) => e);
    });
    expect(seen).toBeInstanceOf(LeaseLostError);
    expect(seen).toMatchObject({ reason: 'released' });
    expect(result).toMatchObject({ ran: true, lost: expect.any(LeaseLostError) });
    if (result.ran) expect(result.value).toBeInstanceOf(LeaseLostError);
  });

  it('forceRelease({ by }) records who did it, and the run it took the lease from ends lost naming them', async () => {
    const a = await client(url, { holder: 'victim-by' });
    const b = await client(url, { holder: 'operator-by' });
    const result = await a.run('taken-by', { ttl: 900 }, async (ctx) => {
      expect(await b.forceRelease('taken-by', { by: 'alice' })).toMatchObject({ released: true, previousHolder: 'victim-by' });
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
    });
    expect(result).toMatchObject({ ran: true, lost: expect.any(LeaseLostError) });
    const db = rawPool(url, 1);
    const { rows: actions } = await db.query("select action, actor from leasehold.actions where job = 'taken-by'");
    expect(actions).toEqual([{ action: 'force-released', actor: 'alice' }]);
    const { rows: runs } = await db.query("select outcome, error from leasehold.run_log where job = 'taken-by'");
    expect(runs).toEqual([{ outcome: 'lost', error: 'the lease was force-released by alice' }]);
    // bad input is refused before anything is released
    const again = held(await a.acquire('taken-by', { ttl: '30s' })).lease;
    await expect(b.forceRelease('taken-by', { who: 'alice' } as never)).rejects.toThrow(/unknown option 'who'/);
    await expect(b.forceRelease('taken-by', { by: 'ali\u202Ece' })).rejects.toThrow(/by must not contain/);
    await expect(b.forceRelease('taken-by', { by: '' })).rejects.toThrow(/by must not be empty: name who does it/);
    await expect(b.forceRelease('taken-by', 'alice' as never)).rejects.toThrow(/options must be an object/);
    expect(await again.release()).toBe(true);
  });

  it('releases the lease when the handler throws', async () => {
    const a = await client(url);
    await expect(
      a.run('throws', { ttl: '30s' }, async () => {
        throw new Error('job failed');
      }),
    ).rejects.toThrow('job failed');
    expect((await a.leases()).find((l) => l.name === 'throws')).toMatchObject({ state: 'free' });
  });
});

describe('liveness', () => {
  it('frees the leases of a holder whose liveness sessions are gone, and the holder sees them lost', async () => {
    const a = await client(url, { holder: 'mortal' });
    const b = await client(url, { holder: 'heir' });
    const { lease } = held(await a.acquire('liveness', { ttl: '30s' }));
    expect((await b.leases()).find((l) => l.name === 'liveness')).toMatchObject({ state: 'held', holderAlive: true });
    expect(await b.acquire('liveness', { ttl: '30s' })).toMatchObject({ acquired: false, reason: 'held' });
    const lost = new Promise<unknown>((resolve) => lease.signal.addEventListener('abort', () => resolve(lease.signal.reason)));
    const admin = rawPool(url, 1);
    await admin.query(
      // the liveness session and its witness (waiting for the same lock): ended alone, the liveness
      // session hands the lock to its witness and nothing is lost (test/lease/restart.test.ts)
      `select pg_terminate_backend(pid) from pg_stat_activity where application_name like 'leasehold liveness%'
         and pid in (select pid from pg_locks where locktype = 'advisory' and objsubid = 1
                       and ((classid::bigint << 32) | objid::bigint) = $1::bigint)`,
      [holderKeyOf(lease)],
    );
    expect(await lost).toMatchObject({ reason: 'liveness-lost' });
    // The holder may notice its socket close a moment before the server's backend has finished
    // exiting (and dropped its advisory lock); the lease is free within that moment, not at the
    // 30 s ttl.
    const taken = await waitFor(async () => {
      const attempt = await b.acquire('liveness', { ttl: '30s' });
      return attempt.acquired ? attempt.lease : undefined;
    }, 3_000);
    expect(taken.fence).toBe(lease.fence + 1);
    // the client reconnects its liveness session and keeps working
    let attempt = 0;
    await waitFor(async () => {
      const r = held(await a.acquire(`liveness-after-${attempt++}`, { ttl: '30s' }));
      await r.lease.release();
      return holderKeyOf(r.lease) !== null;
    });
  });

  it('loses its leases when every connection is terminated on a live server (the same incarnation), and works on', async () => {
    const a = await client(url, { holder: 'survivor' });
    const { lease } = held(await a.acquire('restart', { ttl: '30s', heartbeat: true, heartbeatInterval: 200 }));
    const admin = rawPool(url, 1);
    // the witness must be waiting already: one still connecting would outlive the terminate, take
    // the key over without a gap, and rightly keep the lease (test/lease/restart.test.ts)
    await waitFor(async () => {
      const { rows } = await admin.query(
        `select count(*)::int as n from pg_locks where locktype = 'advisory' and objsubid = 1 and not granted
            and ((classid::bigint << 32) | objid::bigint) = $1::bigint`,
        [holderKeyOf(lease)],
      );
      return rows[0].n === 1;
    }, 5_000, 20);
    await admin.query(`select pg_terminate_backend(pid) from pg_stat_activity where application_name like 'leasehold%' and datname = current_database() and pid <> pg_backend_pid()`);
    await waitFor(() => lease.lost);
    expect(lease.lostReason?.reason).toBe('liveness-lost');
    const again = held(await waitFor(async () => {
      const r = await a.acquire('restart', { ttl: '30s' });
      return r.acquired ? r : undefined;
    }));
    expect(again.lease.fence).toBe(lease.fence + 1);
  });
});

describe('lease lifecycle', () => {
  it('reports renewals and losses as events', async () => {
    const a = await client(url, { liveness: false });
    const events: string[] = [];
    a.on('lease:renewed', () => events.push('renewed'));
    a.on('lease:lost', (_info, error) => events.push(`lost:${error.reason}`));
    // (a ttl of 1 s: under a loaded machine's parallel suite the renewal's own round trip must
    // not outlast the lease)
    const { lease } = held(await a.acquire('events', { ttl: 1_000 }));
    await lease.renew();
    await waitFor(() => lease.lost, 5_000);
    expect(events).toEqual(['renewed', 'lost:expired']);
    await expect(lease.renew()).rejects.toMatchObject({ reason: 'expired' });
    expect(await lease.release()).toBe(true); // nobody took it: our token still frees it
  });

  it('closes cleanly, releasing held leases', async () => {
    const a = await client(url);
    const b = await client(url);
    const leases: Lease[] = [];
    for (const name of ['close-1', 'close-2']) leases.push(held(await a.acquire(name, { ttl: '30s', heartbeat: true })).lease);
    await a.close();
    expect(leases.every((l) => l.released)).toBe(true);
    expect(held(await b.acquire('close-1', { ttl: '30s' })).lease.fence).toBe(2);
    await expect(a.acquire('close-1', { ttl: '30s' })).rejects.toMatchObject({ code: 'CLOSED' });
  });
});
