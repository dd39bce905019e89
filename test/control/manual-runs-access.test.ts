// Run now and backfill through real login roles granted only their documented level: operators
// ask (run_now), workers (client) take requests (claim_requests), nobody else
// does either. And the CLI commands (`leasehold run-now`, `leasehold backfill`) with their exit codes.
import { afterAll, describe, expect, it } from 'vitest';
import type pg from 'pg';
import { createLeasehold, startWorker, type Leasehold, type Worker } from '../../src/index.js';
import { PermissionDeniedError } from '../../src/errors.js';
import { silentLogger } from '../../src/observe/logger.js';
import { cli } from '../support/cli.js';
import { outcome, pool, ROLE, urlAs, usePrivilegeFixture } from '../support/privileges.js';

let url = '';
let owner: pg.Pool;
usePrivilegeFixture((fixture) => ({ url, owner } = fixture));

const clients: Leasehold[] = [];
afterAll(async () => {
  await Promise.allSettled(clients.map((c) => c.close()));
});

/** A client as `role`, without a liveness session (operators and readers have no grant for one). */
async function leaseholdAs(role: string): Promise<Leasehold> {
  const lh = await createLeasehold({ connectionString: urlAs(url, role), logger: silentLogger(), liveness: false, poolSize: 2 });
  clients.push(lh);
  return lh;
}

async function defineJobs(): Promise<void> {
  await owner.query(`select leasehold.register_jobs(array['acc-job', 'acc-held'], array['1h', '1h'], array[null, null]::text[],
                       array[3600000, 3600000]::bigint[], array[30000, 30000]::bigint[], array['skip', 'skip'], array['none', 'none'], 'setup')`);
}

describe('levels', () => {
  it('a client may not ask for a run now or a backfill (PermissionDeniedError naming operator); an operator may', async () => {
    await defineJobs();
    for (const role of [ROLE.app1, ROLE.reader]) {
      const lh = await leaseholdAs(role);
      const error = await lh.control.runNow('acc-job', { by: 'mallory' }).then(() => null, (e: unknown) => e);
      expect(error, role).toBeInstanceOf(PermissionDeniedError);
      expect((error as PermissionDeniedError).level).toBe('operator');
      const now = Date.now();
      const refused = await lh.control.backfill('acc-job', { from: new Date(now - 3 * 3_600_000), to: new Date(now), by: 'mallory' }).then(() => null, (e: unknown) => e);
      expect(refused, role).toBeInstanceOf(PermissionDeniedError);
    }
    const op = await leaseholdAs(ROLE.operator);
    const id = await op.control.runNow('acc-job', { by: 'alice' });
    expect(id).toMatch(/^\d+$/);
    const { rows } = await owner.query<{ actor: string; db_role: string; action: string }>(
      `select actor, db_role, action from leasehold.actions where job = 'acc-job' order by id`,
    );
    expect(rows).toEqual([{ actor: 'alice', db_role: ROLE.operator, action: 'run-now' }]);
    // an operator reads requests; it does not take them (that is a worker's, at client level)
    expect((await op.control.request(id))?.state).toBe('pending');
    const opPool = pool(url, ROLE.operator);
    expect(await outcome(opPool, `select * from leasehold.claim_requests(array['acc-job'], 'op')`)).toBe('42501');
    expect(await outcome(pool(url, ROLE.reader), `select leasehold.run_now('acc-job', 'r')`)).toBe('42501');
    expect(await outcome(pool(url, ROLE.bare), `select * from leasehold.run_request_status`)).toBe('42501');
    expect(await outcome(pool(url, ROLE.reader), `select * from leasehold.run_request_status`)).toBe('ok');
    // a client takes it: claimed, with a fence, the lease held by it
    const app = pool(url, ROLE.app1);
    const taken = await app.query<{ request_id: string; claimed: boolean; fence: string; token: string }>(
      `select request_id::text, claimed, fence, token from leasehold.claim_requests(array['acc-job'], 'worker-a')`,
    );
    expect(taken.rows).toEqual([{ request_id: id, claimed: true, fence: expect.any(String) as string, token: expect.any(String) as string }]);
    expect((await op.control.request(id))?.state).toBe('claimed');
    const { fence, token } = taken.rows[0]!;
    await app.query(`select leasehold.finish_runs(array['acc-job'::text], array[$1::bigint], array[$2::uuid], array['succeeded'::text], array[null::text], array[1::int])`, [fence, token]);
    expect((await op.control.request(id))?.state).toBe('done');
  });
});

describe('the CLI', () => {
  it('run-now --wait exits 0 when the run succeeded, 75 when it was skipped, 77 without the grant; backfill lists and requests', async () => {
    await defineJobs().catch(() => undefined);
    // a worker with only the client grant runs the requests
    const worker: Worker = await startWorker({
      connectionString: urlAs(url, ROLE.app1),
      holder: 'cli-worker',
      logger: silentLogger(),
      jobs: [
        { name: 'acc-job', every: '1h', catchUp: 'none', handler: async () => undefined },
        { name: 'acc-held', every: '1h', catchUp: 'none', handler: async () => undefined },
      ],
    });
    try {
      const env = { DATABASE_URL: urlAs(url, ROLE.operator) };
      const ran = await cli(['run-now', 'acc-job', '--by', 'alice', '--wait', '--json'], env);
      expect(ran.code, ran.stderr).toBe(0);
      const request = JSON.parse(ran.stdout) as { state: string; outcome: string; decidedBy: string; kind: string };
      expect(request).toMatchObject({ state: 'done', outcome: 'succeeded', decidedBy: 'cli-worker', kind: 'manual' });
      const history = await cli(['runs', 'acc-job'], env);
      expect(history.stdout).toMatch(/run\/manual\s+succeeded\s+\d+\s+cli-worker.*asked by alice/);

      // held by someone else under overlap skip: skipped, exit 75, naming the holder
      await owner.query(`select leasehold.acquire('acc-held', '30s', 'somebody-else')`);
      const skipped = await cli(['run-now', 'acc-held', '--by', 'alice', '--wait'], env);
      expect(skipped.code, skipped.stderr).toBe(75);
      expect(skipped.stdout).toMatch(/skipped: the lease was held by somebody-else/);

      const denied = await cli(['trigger', 'acc-job', '--by', 'mallory'], { DATABASE_URL: urlAs(url, ROLE.app2) });
      expect(denied.code).toBe(77);
      expect(denied.stderr).toMatch(/--as operator/);

      const to = new Date();
      const from = new Date(to.getTime() - 3 * 3_600_000);
      const dry = await cli(['backfill', 'acc-job', '--from', from.toISOString(), '--to', to.toISOString(), '--by', 'alice', '--dry-run'], env);
      expect(dry.code, dry.stderr).toBe(0);
      expect(dry.stdout).toMatch(/3 slot\(s\) of "acc-job" in the range; nothing requested/);
      const real = await cli(['backfill', 'acc-job', '--from', from.toISOString(), '--to', to.toISOString(), '--by', 'alice', '--json'], env);
      expect(real.code, real.stderr).toBe(0);
      expect((JSON.parse(real.stdout) as { requested: unknown[] }).requested).toHaveLength(3);
      const bad = await cli(['backfill', 'acc-job', '--from', to.toISOString(), '--to', from.toISOString(), '--by', 'alice'], env);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toMatch(/must be before/);
      const unknown = await cli(['backfill', 'no-job', '--from', from.toISOString(), '--to', to.toISOString(), '--by', 'alice'], env);
      expect(unknown.code).toBe(2);
      expect((await cli(['run-now', 'acc-job'], env)).code).toBe(2); // --by is required
      // nobody runs it within the timeout: exit 1, saying it is still pending
      await owner.query(`select leasehold.register_jobs(array['acc-orphan'], array['1h'], array[null]::text[], array[3600000]::bigint[],
                           array[30000]::bigint[], array['skip'], array['none'], 'setup')`);
      const waited = await cli(['run-now', 'acc-orphan', '--by', 'alice', '--wait', '--timeout', '500ms'], env);
      expect(waited.code).toBe(1);
      expect(waited.stdout).toMatch(/still pending/);
    } finally {
      await worker.stop();
    }
  }, 60_000);
});
