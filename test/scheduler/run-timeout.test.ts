// Per-run timeouts (job option `timeout`, sql/baseline/2_scheduler.sql): the run's signal fires with
// a RunTimeoutError, the database refuses the run's fenced writes after the deadline even when
// the worker is frozen, the run is recorded timed-out, the lease is released when the handler
// settles (or left to expire when it never does), and the next slot runs normally. Workers are
// child processes connected as a role with only the client grant.
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import { afterEach, describe, expect, it } from 'vitest';
import { defineJob, InvalidArgumentError, leased, RunTimeoutError } from '../../src/index.js';
import { waitFor } from '../support/db.js';
import { leaseholdAs, pool, ROLE, urlAs, usePrivilegeFixture, outcome } from '../support/privileges.js';
import { startFixture, type JsonLinesProcess } from '../support/processes.js';

const FIXTURE = fileURLToPath(new URL('../fixtures/timeout-worker.ts', import.meta.url));

let url: string;
let owner: pg.Pool;
usePrivilegeFixture((fixture) => ({ url, owner } = fixture));

const children: JsonLinesProcess[] = [];
afterEach(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill()));
});

async function worker(jobs: object[], env: Record<string, string> = {}): Promise<JsonLinesProcess> {
  if (!(await owner.query(`select to_regclass('public.timeout_witness') as t`)).rows[0].t) {
    await owner.query('create table public.timeout_witness (job text, fence bigint)');
    await owner.query(`grant insert, select on public.timeout_witness to ${ROLE.app1}`);
  }
  const child = await startFixture(urlAs(url, ROLE.app1), { JOBS: JSON.stringify(jobs), HOLDER: `w-${children.length + 1}`, ...env }, FIXTURE);
  children.push(child);
  return child;
}

type RunRow = { slot: Date; fence: string; outcome: string; error: string | null; started_at: Date; finished_at: Date | null };
const runs = async (job: string) =>
  (await owner.query<RunRow>('select slot, fence, outcome, error, started_at, finished_at from leasehold.runs where job = $1 order by fence', [job])).rows;
const lease = async (job: string) =>
  (await owner.query<{ state: string; fence: string; released_at: Date | null }>('select state, fence, released_at from leasehold.lease_status where name = $1', [job])).rows[0]!;
const witnessed = async (job: string) => (await owner.query<{ n: number }>('select count(*)::int as n from public.timeout_witness where job = $1', [job])).rows[0]!.n;

describe('a run that overruns its timeout', () => {
  it('sees its signal fire with a RunTimeoutError, cannot write, is recorded timed-out, releases its lease, and the next slot runs', async () => {
    const w = await worker([{ name: 'coop', every: '2s', ttl: '5s', timeout: '600ms', overrun: 'cooperate' }]);
    const first = await w.waitFor((l) => l.event === 'handler' && l.job === 'coop' && l.run === 1, 10_000);
    const signal = await w.waitFor((l) => l.event === 'signal' && l.fence === first.fence, 5_000);
    expect(signal).toMatchObject({ name: 'RunTimeoutError', code: 'RUN_TIMEOUT', reasonJob: 'coop', reasonFence: first.fence, timeoutMs: 600, reasonSlot: first.slot });
    // the write after the deadline is refused (here by the client, which knows first)
    expect(await w.waitFor((l) => l.event === 'write' && l.fence === first.fence, 5_000)).toMatchObject({ ok: false, name: 'RunTimeoutError' });
    const finished = await w.waitFor((l) => l.event === 'finished' && l.fence === first.fence, 5_000);
    expect(finished).toMatchObject({ outcome: 'timed-out' });
    expect(String(finished.error)).toContain('exceeded its timeout of 600 ms');
    // released when the handler settled, before the next slot (2 s later) could be claimed
    expect(await lease('coop')).toMatchObject({ state: 'free', fence: String(first.fence) });
    const [run] = await runs('coop');
    expect(run).toMatchObject({ outcome: 'timed-out', fence: String(first.fence) });
    // the deadline counts from when the claim was sent (so the signal is never late for the
    // database), which is at the slot or after it; started_at is when the handler was called,
    // later than the claim by a round trip and the run's setup (schema 26)
    const sinceSlotMs = run!.finished_at!.getTime() - run!.slot.getTime();
    expect(sinceSlotMs).toBeGreaterThanOrEqual(550);
    expect(sinceSlotMs).toBeLessThan(5_000);
    expect(run!.started_at.getTime()).toBeGreaterThanOrEqual(run!.slot.getTime());
    // the next slot runs normally
    const second = await w.waitFor((l) => l.event === 'handler' && l.job === 'coop' && l.run === 2, 10_000);
    expect(new Date(String(second.slot)).getTime()).toBe(new Date(String(first.slot)).getTime() + 2_000);
    expect(await w.waitFor((l) => l.event === 'finished' && l.fence === second.fence, 5_000)).toMatchObject({ outcome: 'succeeded' });
    expect(await witnessed('coop')).toBe(0);
  }, 20_000);

  it('has its fenced writes refused by the database after the deadline while its worker is frozen (SIGSTOP)', async () => {
    const w = await worker([{ name: 'frozen', every: '3s', ttl: '10s', timeout: '800ms', overrun: 'ignore' }], { IGNORE_MS: '1500' });
    const first = await w.waitFor((l) => l.event === 'handler' && l.job === 'frozen' && l.run === 1, 10_000);
    // a connection of the same client role, held open across the deadline
    const held = pool(url, ROLE.app1);
    const c = await held.connect();
    try {
      const args = ['frozen', first.token, first.fence];
      expect((await c.query('select leasehold.holds_lease($1, $2, $3) as ok', args)).rows[0].ok).toBe(true);
      w.signal('SIGSTOP'); // no timer of the worker fires, no release, no renewal
      await waitFor(async () => !(await c.query('select leasehold.holds_lease($1, $2, $3) as ok', args)).rows[0].ok, 5_000);
      await c.query('begin');
      const refused = await c.query('select leasehold.assert_lease($1, $2, $3)', args).then(
        () => null,
        (error: { code?: string; detail?: string }) => error,
      );
      await c.query('rollback');
      expect(refused?.code).toBe('LH003');
      expect(refused?.detail).toMatch(/^the run timed out: its job's timeout of 800 ms passed at /);
      // a write guarded by holds_lease() writes nothing
      const guarded = await c.query('insert into public.timeout_witness (job, fence) select $1, $3 where leasehold.holds_lease($1, $2, $3)', args);
      expect(guarded.rowCount).toBe(0);
      // the lease itself is still the frozen run's: no other run of the job can start meanwhile
      expect(await lease('frozen')).toMatchObject({ state: 'held', fence: String(first.fence) });
    } finally {
      // discarded, not pooled: a failed expectation may have left it inside a transaction
      c.release(true);
      w.signal('SIGCONT');
    }
    expect(await w.waitFor((l) => l.event === 'signal' && l.fence === first.fence, 5_000)).toMatchObject({ name: 'RunTimeoutError' });
    expect(await w.waitFor((l) => l.event === 'write' && l.fence === first.fence, 5_000)).toMatchObject({ ok: false });
    expect(await w.waitFor((l) => l.event === 'finished' && l.fence === first.fence, 5_000)).toMatchObject({ outcome: 'timed-out' });
    expect(await witnessed('frozen')).toBe(0);
    expect((await runs('frozen'))[0]).toMatchObject({ outcome: 'timed-out' });
    expect((await lease('frozen')).state).not.toBe('held');
  }, 20_000);

  it('is recorded timed-out when the database refuses it before the worker\'s own timer fires', async () => {
    // the database's deadline is made earlier than the worker's (a clock step or a late timer
    // has the same effect): the refusal names the timeout, and the run is timed-out, not lost
    const w = await worker([{ name: 'early', every: '2s', ttl: '5s', timeout: '10s', overrun: 'ignore' }], { IGNORE_MS: '600' });
    await owner.query(`update leasehold.jobs set timeout_ms = 200 where name = 'early'`);
    const first = await w.waitFor((l) => l.event === 'handler' && l.job === 'early' && l.run === 1, 10_000);
    expect(await w.waitFor((l) => l.event === 'write' && l.fence === first.fence, 5_000)).toMatchObject({ ok: false, name: 'LeaseLostError' });
    const finished = await w.waitFor((l) => l.event === 'finished' && l.fence === first.fence, 5_000);
    expect(finished).toMatchObject({ outcome: 'timed-out' });
    expect(String(finished.error)).toContain('exceeded its timeout of 10000 ms');
    expect(await witnessed('early')).toBe(0);
    expect((await runs('early'))[0]).toMatchObject({ outcome: 'timed-out' });
  }, 20_000);

  it('that never settles is recorded timed-out one ttl after its deadline, and its lease ends by its TTL before the next run', async () => {
    const w = await worker([{ name: 'stuck', every: '1s', ttl: '900ms', timeout: '400ms', overrun: 'hang' }]);
    const first = await w.waitFor((l) => l.event === 'handler' && l.job === 'stuck' && l.run === 1, 10_000);
    await w.waitFor((l) => l.event === 'signal' && l.fence === first.fence, 5_000);
    const finished = await w.waitFor((l) => l.event === 'finished' && l.fence === first.fence, 5_000);
    expect(finished).toMatchObject({ outcome: 'timed-out' });
    expect(String(finished.error)).toContain('did not settle');
    // not released: the handler may still be running; the lease runs out instead
    expect((await lease('stuck')).released_at).toBeNull();
    const second = await w.waitFor((l) => l.event === 'handler' && l.job === 'stuck' && l.run === 2, 10_000);
    expect(await w.waitFor((l) => l.event === 'finished' && l.fence === second.fence, 5_000)).toMatchObject({ outcome: 'succeeded' });
    const [one, two] = await runs('stuck');
    expect(one).toMatchObject({ outcome: 'timed-out', fence: String(first.fence) });
    // no overlap: the next run started after the stuck one was given up (its lease expired)
    expect(two!.started_at.getTime()).toBeGreaterThanOrEqual(one!.finished_at!.getTime());
  }, 20_000);
});

describe('register_jobs timeouts and holds_lease (SQL, as a client role)', () => {
  it('sets and clears a timeout that holds_lease, assert_lease and start_run apply; checks its arguments', async () => {
    const app = pool(url, ROLE.app1);
    const register = (names: string, timeouts: string) =>
      `select * from leasehold.register_jobs(array[${names}], array['1h'], array[null]::text[], array[3600000]::bigint[], array[60000]::bigint[],
                                             array['skip'], array['latest'], 'sql-test', ${timeouts})`;
    await app.query(register(`'sqljob'`, 'array[300]::bigint[]'));
    const { rows } = await app.query<{ token: string; fence: string }>(`select token, fence from leasehold.acquire('sqljob', '60 seconds', 'sql-test')`);
    const args = ['sqljob', rows[0]!.token, rows[0]!.fence];
    expect((await app.query('select leasehold.holds_lease($1, $2, $3) as ok', args)).rows[0].ok).toBe(true);
    await waitFor(async () => !(await app.query('select leasehold.holds_lease($1, $2, $3) as ok', args)).rows[0].ok, 5_000);
    expect(await outcome(app, 'select leasehold.assert_lease($1, $2, $3)', args)).toMatch(/LH003/);
    expect(await outcome(app, 'select leasehold.start_run($1, $2, $3, now())', args)).toMatch(/LH003/);
    // cleared: the same lease is held again (it never stopped being the holder's)
    await app.query(register(`'sqljob'`, 'array[null]::bigint[]'));
    expect((await app.query('select leasehold.holds_lease($1, $2, $3) as ok', args)).rows[0].ok).toBe(true);
    // the arguments: as many timeouts as names, each within the bounds of the option
    expect(await outcome(app, register(`'sqljob', 'other'`, 'array[1]::bigint[]'))).toMatch(/22023/);
    expect(await outcome(app, register(`'sqljob'`, 'array[0]::bigint[]'))).toMatch(/22023/);
    expect(await outcome(app, register(`'sqljob'`, 'array[31622400001]::bigint[]'))).toMatch(/22023/);
    expect((await app.query(`select timeout_ms from leasehold.jobs where name = 'sqljob'`)).rows[0].timeout_ms).toBeNull();
    // readers may not set timeouts; nobody but the owner calls the rule directly
    expect(await outcome(pool(url, ROLE.reader), register(`'sqljob'`, 'array[5]::bigint[]'))).toMatch(/42501|permission/);
    expect(await outcome(app, `select leasehold.run_timed_out('sqljob', now())`)).toMatch(/42501|permission/);
  });
});

describe('leased() with a timeout', () => {
  it('aborts the handler with a RunTimeoutError and reports the call timed-out', async () => {
    const client = await leaseholdAs(url, ROLE.app2);
    let reason: unknown;
    const fn = leased(client, { name: 'leased-timeout', every: '1s', tolerance: 0, ttl: '5s', timeout: '300ms' }, async (ctx) => {
      await new Promise((resolve) => ctx.signal.addEventListener('abort', resolve, { once: true }));
      reason = ctx.signal.reason;
    });
    try {
      const result = await fn();
      expect(result).toMatchObject({ ran: true, outcome: 'timed-out' });
      expect(reason).toBeInstanceOf(RunTimeoutError);
      expect((await owner.query(`select outcome from leasehold.runs where job = 'leased-timeout'`)).rows).toEqual([{ outcome: 'timed-out' }]);
      expect((await owner.query(`select timeout_ms::int from leasehold.jobs where name = 'leased-timeout'`)).rows).toEqual([{ timeout_ms: 300 }]);
    } finally {
      await fn.stop();
    }
  });
});

describe('the timeout option', () => {
  const handler = async () => undefined;
  it('is a bounded duration; none by default', () => {
    expect(defineJob({ name: 'a', every: '1m', handler }).timeoutMs).toBeNull();
    expect(defineJob({ name: 'a', every: '1m', timeout: '90s', handler }).timeoutMs).toBe(90_000);
    for (const timeout of ['0s', '367d', 'soon', -5]) {
      expect(() => defineJob({ name: 'a', every: '1m', timeout, handler } as never)).toThrow(InvalidArgumentError);
    }
  });
  it('has a typed, branded error', () => {
    const error = new RunTimeoutError('a', new Date(0), 3, 500);
    expect(error).toBeInstanceOf(RunTimeoutError);
    expect(error).toMatchObject({ code: 'RUN_TIMEOUT', job: 'a', fence: 3, timeoutMs: 500 });
  });
});
