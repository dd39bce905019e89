// Servers that refuse the WAL functions (managed services; a role without EXECUTE on them),
// simulated for real: on a server of this test's own, the superuser revokes EXECUTE on
// pg_walfile_name (and pg_control_checkpoint) from PUBLIC, and the schema is installed by an
// owner that is no superuser, so leasehold.epoch() (SECURITY DEFINER, the owner's rights) is
// refused them as it would be there. Leases still work; the client says at start which source
// the epoch has and what that weakens: a warn log line, the replication:warning event, its
// report (leasehold.replication.epochSource) and the gauge leasehold_epoch_source_fallback.
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { createLeasehold, type Leasehold } from '../../src/index.js';
import { createMetrics } from '../../src/monitor/index.js';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.js';
import type { Logger } from '../../src/observe/logger.js';

let server: EmbeddedPostgres;
const clients: Leasehold[] = [];

/** Runs `sql` as the superuser, in `database` (function privileges are per database). */
async function superuser(sql: string, database = 'postgres'): Promise<void> {
  const url = new URL(server.connectionString);
  url.pathname = `/${database}`;
  const admin = new pg.Client({ connectionString: url.toString() });
  await admin.connect();
  try {
    await admin.query(sql);
  } finally {
    await admin.end();
  }
}

/** A database of its own, owned by a login role that is no superuser, where `revoke` ran first; its URL. */
async function ownedDatabase(name: string, revoke: string[] = []): Promise<string> {
  await superuser(`create role ${name} login password 'pw'`);
  await superuser(`create database ${name} owner ${name}`);
  for (const fn of revoke) await superuser(`revoke execute on function ${fn} from public`, name);
  const url = new URL(server.connectionString);
  url.username = name;
  url.password = 'pw';
  url.pathname = `/${name}`;
  return url.toString();
}

function capturing(lines: string[]): Logger {
  return { debug() {}, info() {}, warn: (_fields, message) => void lines.push(message ?? ''), error() {} };
}

beforeAll(async () => {
  server = await startEmbeddedPostgres();
});

afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
  await server?.stop();
});

it('where the WAL file name is refused, the epoch comes from the last checkpoint, and the client says so', async () => {
  const url = await ownedDatabase('lh_checkpoint', ['pg_walfile_name(pg_lsn)']);
  const warnings: string[] = [];
  const leasehold = await createLeasehold({ connectionString: url, logger: capturing(warnings) });
  clients.push(leasehold);
  expect(leasehold.replication?.epochSource?.source).toBe('checkpoint');
  expect(leasehold.replication?.epochSource?.detail).toMatch(/pg_walfile_name.*42501/);
  expect(leasehold.replication?.epochWarning).toMatch(/last checkpoint/);
  await new Promise((resolve) => setImmediate(resolve));
  expect(warnings.some((w) => /last checkpoint/.test(w))).toBe(true);
  const first = await leasehold.acquire('job', { ttl: '10s' });
  if (!first.acquired) throw new Error('expected to acquire');
  expect(first.lease.fence).toBe(1);
  await first.lease.release();
});

it('where no timeline can be read at all, leases still work on epoch 1, and the client warns (log, event, gauge)', async () => {
  {
    const url = await ownedDatabase('lh_none', ['pg_walfile_name(pg_lsn)', 'pg_control_checkpoint()']);
    const warnings: string[] = [];
    const metrics = createMetrics();
    const leasehold = await createLeasehold({ connectionString: url, logger: capturing(warnings) });
    clients.push(leasehold);
    metrics.observe(leasehold);
    const events: string[] = [];
    leasehold.on('replication:warning', (report) => events.push(report.epochWarning ?? ''));
    await new Promise((resolve) => setImmediate(resolve));
    expect(leasehold.replication?.epochSource?.source).toBe('none');
    expect(leasehold.replication?.epochSource?.detail).toMatch(/pg_control_checkpoint.*42501/);
    expect(leasehold.replication?.epochWarning).toMatch(/cannot tell forks of history apart/);
    expect(warnings.some((w) => /cannot tell forks of history apart/.test(w))).toBe(true);
    expect(events).toHaveLength(1);
    expect(await metrics.metrics()).toMatch(/^leasehold_epoch_source_fallback 1$/m);
    // the protocol works: grants, renewals, fenced checks, fences growing
    const first = await leasehold.acquire('job', { ttl: '10s' });
    if (!first.acquired) throw new Error('expected to acquire');
    await first.lease.renew();
    await first.lease.transaction(async () => undefined);
    await first.lease.release();
    const second = await leasehold.acquire('job', { ttl: '10s' });
    if (!second.acquired) throw new Error('expected to acquire');
    expect([first.lease.fence, second.lease.fence]).toEqual([1, 2]);
    const owner = new pg.Client({ connectionString: url });
    await owner.connect();
    const { rows } = await owner.query('select leasehold.epoch() as epoch');
    // the read epoch() made before schema 28, refused here: every lease function failed with it
    const before = await owner.query('select pg_walfile_name(pg_current_wal_lsn())').then(() => 'ok', (error: { code?: string }) => error.code);
    await owner.end();
    expect(rows[0].epoch).toBe(1);
    expect(before).toBe('42501');
    await second.lease.release();
  }
});

it('with the WAL functions, the source is the WAL file and nothing is said', async () => {
  const url = await ownedDatabase('lh_wal');
  const warnings: string[] = [];
  const leasehold = await createLeasehold({ connectionString: url, logger: capturing(warnings) });
  clients.push(leasehold);
  expect(leasehold.replication?.epochSource).toEqual({ source: 'wal', detail: null });
  expect(leasehold.replication?.epochWarning).toBeNull();
});
