// The summary's objects through roles that hold only their documented level: a client's worker
// keeps the counts (the triggers write tables the client cannot), a reader reads them, only an
// operator rebuilds them.
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { fleetSummary } from '../../src/monitor/queries.js';
import { startWorker } from '../../src/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { waitFor } from '../support/db.js';
import { outcome, pool, ROLE, urlAs, usePrivilegeFixture } from '../support/privileges.js';

let url: string;
let owner: pg.Pool;
usePrivilegeFixture((fixture) => ({ url, owner } = fixture));

describe('fleet_summary and its tables under the privilege model', () => {
  it('counts a client role\'s runs, is read by a reader, and is rebuilt by the schema owner only', async () => {
    const name = `sum-${randomUUID()}`;
    const worker = await startWorker({
      connectionString: urlAs(url, ROLE.app1),
      jobs: [{ name, every: '1s', ttl: '5s', handler: async () => undefined }],
      logger: silentLogger(),
      handleSignals: false,
      shutdownGrace: '2s',
    });
    try {
      await waitFor(async () => (await owner.query(`select count(*)::int as n from leasehold.runs where job = $1 and outcome = 'succeeded'`, [name])).rows[0].n >= 2, 15_000, 100);
    } finally {
      await worker.stop();
    }
    const direct = (await owner.query<{ n: number }>('select count(*)::int as n from leasehold.runs where finished_at is not null')).rows[0]!.n;
    expect(direct).toBeGreaterThanOrEqual(2);

    const reader = pool(url, ROLE.reader);
    const summary = await fleetSummary(reader);
    expect(summary.runs24h).toBe(direct);
    expect(summary.jobs).toBeGreaterThanOrEqual(1);
    expect(await outcome(reader, 'select count(*) from leasehold.run_counts')).toBe('ok');
    expect(await outcome(reader, 'select count(*) from leasehold.slow_runs')).toBe('ok');
    // nobody but the triggers (running as the schema owner) writes the counts
    for (const role of [ROLE.reader, ROLE.app1, ROLE.operator]) {
      const p = pool(url, role);
      expect(await outcome(p, 'insert into leasehold.run_counts (bucket, shard, minute, runs) values (1, 1, 1, 1)'), role).toBe('42501');
      expect(await outcome(p, `select leasehold.add_run_counts(array[1::bigint], array[1::bigint])`), role).toBe('42501');
      expect(await outcome(p, 'delete from leasehold.slow_runs'), role).toBe('42501');
    }
    for (const role of [ROLE.reader, ROLE.app1, ROLE.operator]) expect(await outcome(pool(url, role), 'select leasehold.refresh_run_counts()'), role).toBe('42501');
    expect(await outcome(owner, 'select leasehold.refresh_run_counts()')).toBe('ok');
    expect((await fleetSummary(reader)).runs24h).toBe(direct);
  }, 30_000);
});
