// Server settings that used to stop everything quietly (docs/operating.md "Server settings"):
// real login roles whose defaults do not suit the protocol. SERIALIZABLE or REPEATABLE READ and a
// 20 ms statement_timeout pin the client's statements (src/db/pinned.ts); a read-only server is a
// DatabaseReadOnlyError at start and later, and a worker whose claims keep failing on one says so
// (Worker.failure, the health probes) instead of logging a line a tick.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { readOnlyAtStart } from '../../src/db/read-only.js';
import { parseSessionSettings } from '../../src/db/session-settings.js';
import { createLeasehold, DatabaseUnavailableError, startWorker, type Leasehold, type LeaseholdOptions, type Logger } from '../../src/index.js';
import { DatabaseReadOnlyError } from '../../src/errors.js';
import { workerHealth } from '../../src/monitor/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { freshDatabase, rawPool, sleep, waitFor } from '../support/db.js';
import { findPgBouncer, startPgBouncer, type PgBouncer } from '../support/pgbouncer.js';
import { PASSWORD, urlAs } from '../support/privileges.js';

const suffix = `${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
/** Each role with the settings it has from the start. Role names are cluster-wide: unique per run. */
const ROLES = {
  serializable: { name: `lh_ss_ser_${suffix}`, settings: ["default_transaction_isolation = 'serializable'"] },
  repeatableRead: { name: `lh_ss_rr_${suffix}`, settings: ["default_transaction_isolation = 'repeatable read'"] },
  timeout: { name: `lh_ss_to_${suffix}`, settings: ["statement_timeout = '20ms'"] },
  tiny: { name: `lh_ss_1ms_${suffix}`, settings: ["statement_timeout = '1ms'"] },
  pooled: { name: `lh_ss_pool_${suffix}`, settings: ["default_transaction_isolation = 'serializable'", "statement_timeout = '20ms'"] },
  readOnly: { name: `lh_ss_ro_${suffix}`, settings: ['default_transaction_read_only = on'] },
  turnsSerializable: { name: `lh_ss_lser_${suffix}`, settings: [] },
  turnsReadOnly: { name: `lh_ss_lro_${suffix}`, settings: [] },
  worker: { name: `lh_ss_wrk_${suffix}`, settings: [] },
} as const;
type RoleKey = keyof typeof ROLES;

const BOUNCER = findPgBouncer();
let url: string;
let owner: pg.Pool;
let bouncer: PgBouncer | undefined;
const opened: Array<{ close(): Promise<void> }> = [];

async function admin<T>(fn: (c: pg.Client) => Promise<T>): Promise<T> {
  const c = new pg.Client({ connectionString: inject('serverUrl') });
  await c.connect();
  try {
    return await fn(c);
  } finally {
    await c.end();
  }
}

beforeAll(async () => {
  await admin(async (c) => {
    for (const { name, settings } of Object.values(ROLES)) {
      await c.query(`create role ${name} login password '${PASSWORD}'`);
      for (const setting of settings) await c.query(`alter role ${name} set ${setting}`);
    }
  });
  url = await freshDatabase();
  owner = rawPool(url, 4);
  await (await createLeasehold({ connectionString: url, logger: silentLogger(), liveness: false })).close(); // installs the schema
  for (const { name } of Object.values(ROLES)) await owner.query(`select leasehold.grant_access($1, 'client')`, [name]);
  if (BOUNCER) bouncer = await startPgBouncer(BOUNCER, urlAs(url, ROLES.pooled.name));
}, 60_000);

afterAll(async () => {
  await Promise.allSettled(opened.splice(0).map((item) => item.close()));
  await bouncer?.stop();
  const names = Object.values(ROLES).map((r) => r.name);
  await owner.query(`drop owned by ${names.join(', ')}`).catch(() => undefined); // their grants in this database
  await admin(async (c) => {
    for (const name of names) await c.query(`drop role if exists ${name}`).catch(() => undefined);
  });
}, 60_000);

interface Line {
  level: string;
  event: unknown;
  fields: Record<string, unknown>;
  message: string;
}

function recorder(): { lines: Line[]; logger: Logger } {
  const lines: Line[] = [];
  const at = (level: string) => (fields: object, message?: string) =>
    void lines.push({ level, event: (fields as { event?: unknown }).event, fields: fields as Record<string, unknown>, message: String(message) });
  return { lines, logger: { debug: () => undefined, info: at('info'), warn: at('warn'), error: at('error') } };
}

async function open(role: RoleKey | null, options: LeaseholdOptions = {}): Promise<Leasehold> {
  const leasehold = await createLeasehold({ connectionString: role ? urlAs(url, ROLES[role].name) : url, logger: silentLogger(), ...options });
  opened.push(leasehold);
  return leasehold;
}

/** `clients` acquire and release one lease as fast as they can for `ms`; every error thrown, by class and SQLSTATE. */
async function contend(clients: Leasehold[], ms: number): Promise<{ acquired: number; errors: string[] }> {
  const name = `hot-${randomUUID()}`;
  const end = Date.now() + ms;
  const errors: string[] = [];
  let acquired = 0;
  await Promise.all(
    clients.map(async (lh) => {
      while (Date.now() < end) {
        try {
          const result = await lh.acquire(name, { ttl: '2s' });
          if (!result.acquired) continue;
          acquired++;
          await result.lease.release();
        } catch (error) {
          errors.push(`${(error as Error).name} ${(error as { code?: string }).code}: ${(error as Error).message}`);
        }
      }
    }),
  );
  return { acquired, errors };
}

/** Holds an EXCLUSIVE lock on leasehold.leases (every lease statement waits for it) for `ms`. */
async function lockLeases(ms: number): Promise<void> {
  const c = await owner.connect();
  try {
    await c.query('begin');
    await c.query('lock table leasehold.leases in exclusive mode');
    await sleep(ms);
    await c.query('commit');
  } finally {
    c.release();
  }
}

/** Sets (or resets) a role's setting and ends its sessions, so that every connection opened from now on has it. */
async function changeRole(role: RoleKey, change: string): Promise<void> {
  const name = ROLES[role].name;
  await owner.query(`alter role ${name} ${change}`);
  await owner.query('select pg_terminate_backend(pid) from pg_stat_activity where usename = $1', [name]);
}

describe('isolation above READ COMMITTED on the role', () => {
  it.each(['serializable', 'repeatableRead'] as const)('%s: concurrent acquires on separate connections never throw 40001; the client says once why its calls cost 3 round trips', async (role) => {
    const { lines, logger } = recorder();
    const clients = [await open(role, { liveness: false, logger }), ...(await Promise.all([1, 2, 3].map(() => open(role, { liveness: false }))))];
    const { acquired, errors } = await contend(clients, 1_500);
    expect(errors).toEqual([]);
    expect(acquired).toBeGreaterThan(0);
    const pinned = lines.filter((l) => l.event === 'connection:pinned');
    expect(pinned).toHaveLength(1);
    expect(pinned[0]?.level).toBe('warn');
    expect(pinned[0]?.message).toContain(`default_transaction_isolation is '${role === 'serializable' ? 'serializable' : 'repeatable read'}' (set on role ${ROLES[role].name})`);
    expect(pinned[0]?.message).toContain(`alter role ${ROLES[role].name} set default_transaction_isolation = 'read committed'`);
  });

  it('set after the clients started: the first serialization failure pins their statements and the call runs again, nothing thrown', async () => {
    const { lines, logger } = recorder();
    const clients = await Promise.all([1, 2, 3, 4].map(() => open('turnsSerializable', { liveness: false, logger })));
    expect(lines.filter((l) => l.event === 'connection:pinned')).toEqual([]);
    await changeRole('turnsSerializable', "set default_transaction_isolation = 'serializable'");
    const { acquired, errors } = await contend(clients, 1_500);
    expect(errors).toEqual([]);
    expect(acquired).toBeGreaterThan(0);
    // each client that met a serialization failure pinned its pools, once
    const reasons = lines.filter((l) => l.event === 'connection:pinned').map((l) => l.fields.reason);
    expect(reasons.length).toBeGreaterThanOrEqual(1);
    expect(reasons.length).toBeLessThanOrEqual(clients.length);
    for (const reason of reasons) expect(reason).toContain('40001');
  });
});

describe('a 20 ms statement_timeout on the role', () => {
  it('works: an acquire that waits 300 ms for a lock gets its lease (the server does not cancel it at 20 ms), and the client says why', async () => {
    const { lines, logger } = recorder();
    const leasehold = await open('timeout', { logger });
    const name = `slow-${randomUUID()}`;
    const locked = lockLeases(300);
    await sleep(50); // the lock is taken
    const startedAt = Date.now();
    const result = await leasehold.acquire(name, { ttl: '10s' });
    await locked;
    expect(result.acquired).toBe(true);
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(150);
    const pinned = lines.filter((l) => l.event === 'connection:pinned');
    expect(pinned).toHaveLength(1);
    // On a loaded machine the server may cancel the very first statement (the one that reads the
    // settings) at 20 ms: the client then pins on that cancel, with the general reason.
    if (!/cancelled a statement before its own timeout/.test(String(pinned[0]?.message))) {
      expect(pinned[0]?.message).toContain(`statement_timeout is 20 ms, under queryTimeout (5000 ms) (set on role ${ROLES.timeout.name})`);
      expect(pinned[0]?.message).toContain(`alter role ${ROLES.timeout.name} set statement_timeout = '5s'`);
    }
  });

  it('a worker runs its job every second while each of its claims waits up to 300 ms for a lock', { timeout: 30_000 }, async () => {
    const job = `every-second-${randomUUID()}`;
    let ran = 0;
    const { lines, logger } = recorder();
    const worker = await startWorker({
      connectionString: urlAs(url, ROLES.timeout.name),
      jobs: [{ name: job, every: '1s', ttl: '10s', handler: async () => void ran++ }],
      logger,
      handleSignals: false,
      shutdownGrace: '2s',
    });
    let locking = true;
    const locker = (async () => {
      while (locking) {
        await lockLeases(300);
        await sleep(20);
      }
    })();
    try {
      await waitFor(() => ran >= 3, 15_000, 50);
    } finally {
      locking = false;
      await locker;
      await worker.stop();
    }
    expect(lines.filter((l) => l.event === 'claim:failed')).toEqual([]);
  });
});

// The statements that set the client's own timeout run under the role's, which cancels them on
// a loaded machine at 20 ms and at 1 ms on any: the connect check's first statement, the opening
// of each pinned or plain transaction (migrate, the schema check), the liveness session's SET.
// PostgreSQL reports some of those cancels as "due to user request" (src/db/role-timeout.ts).
// Before they were sent again, none of 32 starts as such a role succeeded.
describe('a 1 ms statement_timeout on the role: the server cancels even the statements that set the client’s own', () => {
  it('clients start (connect check, migrate, liveness) and acquire, and a worker starts and runs, with nothing thrown or logged as failed', { timeout: 60_000 }, async () => {
    const { lines, logger } = recorder();
    const clients = await Promise.all([1, 2, 3, 4].map(() => open('tiny', { logger })));
    const { acquired, errors } = await contend(clients, 1_000);
    expect(errors).toEqual([]);
    expect(acquired).toBeGreaterThan(0);
    const job = `tiny-${randomUUID()}`;
    let ran = 0;
    const worker = await startWorker({
      connectionString: urlAs(url, ROLES.tiny.name),
      jobs: [{ name: job, every: '1s', ttl: '10s', handler: async () => void ran++ }],
      logger,
      handleSignals: false,
      shutdownGrace: '2s',
    });
    opened.push({ close: () => worker.stop() });
    await waitFor(() => ran >= 2, 15_000, 50);
    expect(lines.filter((l) => l.level === 'error')).toEqual([]);
  });
});

describe.skipIf(!BOUNCER)(`through PgBouncer in transaction pooling mode, a role with SERIALIZABLE and a 20 ms statement_timeout${BOUNCER ? '' : ' [SKIPPED: no pgbouncer binary]'}`, () => {
  it('contended acquires throw nothing, and an acquire that waits for a lock gets its lease', async () => {
    const pooled = () => open(null, { connectionString: bouncer!.url(), liveness: false });
    const clients = await Promise.all([1, 2, 3, 4].map(pooled));
    const { acquired, errors } = await contend(clients, 1_500);
    expect(errors).toEqual([]);
    expect(acquired).toBeGreaterThan(0);
    const locked = lockLeases(300);
    await sleep(50);
    expect((await clients[0]!.acquire(`pooled-slow-${randomUUID()}`, { ttl: '10s' })).acquired).toBe(true);
    await locked;
  });
});

describe('a read-only server', () => {
  it('default_transaction_read_only on the role: createLeasehold and startWorker refuse with a DatabaseReadOnlyError that names the setting and the fix', async () => {
    const role = ROLES.readOnly.name;
    const error = await createLeasehold({ connectionString: urlAs(url, role), logger: silentLogger() }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DatabaseReadOnlyError);
    expect(error).toBeInstanceOf(DatabaseUnavailableError);
    expect(error).toMatchObject({ code: 'DATABASE_UNAVAILABLE', standby: false });
    expect((error as Error).message).toContain(`default_transaction_read_only is on (set on role ${role})`);
    expect((error as Error).message).toContain(`alter role ${role} set default_transaction_read_only = off`);
    const workerError = await startWorker({
      connectionString: urlAs(url, role),
      jobs: [{ name: `ro-${randomUUID()}`, every: '1s', handler: async () => undefined }],
      logger: silentLogger(),
      handleSignals: false,
    }).catch((e: unknown) => e);
    expect(workerError).toBeInstanceOf(DatabaseReadOnlyError);
  });

  it('default_transaction_read_only on the database: refused, naming the database', async () => {
    const readOnlyUrl = await freshDatabase();
    const database = new URL(readOnlyUrl).pathname.slice(1);
    await owner.query(`alter database "${database}" set default_transaction_read_only = on`);
    const error = await createLeasehold({ connectionString: readOnlyUrl, logger: silentLogger() }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DatabaseReadOnlyError);
    expect((error as Error).message).toContain('set on database');
    expect((error as Error).message).toMatch(/alter database "?[\w]+"? set default_transaction_read_only = off/);
  });

  it('a hot standby is refused as one', () => {
    const settings = parseSessionSettings({ role: 'app', database: 'db', in_recovery: true, read_only: true, isolation: 'read committed', statement_timeout_ms: 0, sources: null });
    const error = readOnlyAtStart(settings, 'replica:5432/db');
    expect(error).toMatchObject({ standby: true });
    expect(error?.message).toMatch(/^PostgreSQL at replica:5432\/db is a hot standby .*Point DATABASE_URL \(or connectionString\) at the primary/);
  });

  it('read-only after the client started: an acquire throws DatabaseReadOnlyError (not a raw 25006), once, without asking again', async () => {
    const leasehold = await open('turnsReadOnly', { liveness: false });
    expect((await leasehold.acquire(`before-${randomUUID()}`, { ttl: '10s' })).acquired).toBe(true);
    await changeRole('turnsReadOnly', 'set default_transaction_read_only = on');
    const error = await leasehold.acquire(`after-${randomUUID()}`, { ttl: '10s' }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DatabaseReadOnlyError);
    expect(error).toHaveProperty('cause.code', '25006');
    expect((error as Error).message).toMatch(/the server is read-only \(a hot standby, or default_transaction_read_only = on\)/);
  });

  it('a worker whose claims fail on it fails loudly: Worker.failure, one worker:failing line, failing probes, no line a tick; and recovers', { timeout: 60_000 }, async () => {
    const job = `ro-worker-${randomUUID()}`;
    let ran = 0;
    const { lines, logger } = recorder();
    const worker = await startWorker({
      connectionString: urlAs(url, ROLES.worker.name),
      jobs: [{ name: job, every: '1s', ttl: '5s', handler: async () => void ran++ }],
      logger,
      handleSignals: false,
      shutdownGrace: '2s',
    });
    opened.push({ close: () => worker.stop() });
    const health = workerHealth(worker);
    const failing: unknown[] = [];
    worker.on('worker:failing', ({ error }) => failing.push(error));
    await waitFor(() => ran >= 1, 10_000, 50);
    expect(worker.failure).toBeNull();
    expect((await health.live()).ok).toBe(true);

    await changeRole('worker', 'set default_transaction_read_only = on');
    await waitFor(() => worker.failure, 15_000, 50);
    expect(worker.failure).toBeInstanceOf(DatabaseReadOnlyError);
    expect(failing).toHaveLength(1);
    const live = await health.live();
    expect(live.ok).toBe(false);
    expect(live.checks.claims).toMatchObject({ ok: false, detail: expect.stringContaining('read-only') });
    expect(live.checks.database).toMatchObject({ ok: false, detail: expect.stringContaining('read-only') });
    expect((await health.ready()).ok).toBe(false);
    const failingLines = lines.filter((l) => l.event === 'worker:failing');
    expect(failingLines).toHaveLength(1);
    expect(failingLines[0]).toMatchObject({ level: 'error', fields: { code: 'DATABASE_UNAVAILABLE' } });
    expect(failingLines[0]?.message).toContain('read-only');
    // ticks go on failing, but no longer a line each
    const claimLines = () => lines.filter((l) => l.event === 'claim:failed').length;
    const before = claimLines();
    await sleep(3_000);
    expect(claimLines()).toBe(before);
    expect(failing).toHaveLength(1);

    await changeRole('worker', 'reset default_transaction_read_only');
    await waitFor(() => worker.failure === null, 15_000, 50);
    expect(lines.filter((l) => l.event === 'worker:recovered')).toHaveLength(1);
    await waitFor(async () => (await health.live()).ok, 15_000, 100);
    const after = ran;
    await waitFor(() => ran > after, 10_000, 50);
  });
});
