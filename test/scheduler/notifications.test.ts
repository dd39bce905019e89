// Changes pushed to workers (LISTEN/NOTIFY, src/worker/change-listener.ts): an idle listening
// worker sends almost no statements, a pause, a definition and a run-now reach it at once, a
// lost listening connection falls back to polling and listens again, and through a
// transaction-pooling PgBouncer (where LISTEN succeeds and nothing arrives) the worker finds out
// and polls. Real worker processes; each counts the statements it sends (notified-worker.ts).
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Leasehold } from '../../src/index.js';
import { client, connections, freshDatabase, rawPool, sleep, waitFor } from '../support/db.js';
import { findPgBouncer, startPgBouncer, type PgBouncer } from '../support/pgbouncer.js';
import { JsonLinesProcess, type Line } from '../support/processes.js';

const WORKER = fileURLToPath(new URL('../fixtures/notified-worker.ts', import.meta.url));
const BINARY = findPgBouncer();
const missing = BINARY ? '' : ' [SKIPPED: no pgbouncer binary on PATH or in /usr/sbin (Debian package pgbouncer)]';

let url: string;
let lh: Leasehold;
const started: JsonLinesProcess[] = [];

beforeAll(async () => {
  url = await freshDatabase();
  lh = await client(url, { liveness: false });
});

afterAll(async () => {
  await Promise.all(started.splice(0).map((p) => p.kill()));
});

async function startWorker(name: string, env: Record<string, string> = {}, databaseUrl = url): Promise<JsonLinesProcess> {
  const proc = await JsonLinesProcess.startScript(WORKER, { DATABASE_URL: databaseUrl, HOLDER: name, JOB: name, ...env });
  started.push(proc);
  return proc;
}

const notifications = (listening: boolean) => (line: Line) => line.event === 'worker:notifications' && line.listening === listening;
const since = (t0: number, match: (line: Line) => boolean) => (line: Line) => match(line) && Number(line.at) >= t0;

async function statements(proc: JsonLinesProcess): Promise<{ total: number; byStatement: Record<string, number> }> {
  return (await proc.send({ cmd: 'count' })) as unknown as { total: number; byStatement: Record<string, number> };
}

describe('notifications of changes', () => {
  it('the SQL announces writes of jobs and new requests on leasehold_changes, once per transaction (docs/sql-api.md)', async () => {
    const [listener] = await connections(url, 1);
    const payloads: string[] = [];
    listener!.on('notification', (message) => {
      if (message.channel === 'leasehold_changes') payloads.push(message.payload ?? '');
    });
    await listener!.query('listen leasehold_changes');
    const sql = rawPool(url, 2);
    await sql.query("select leasehold.define_schedule('sql-echo', 'echo', 'test', p_every => interval '1 hour')");
    await waitFor(() => payloads.length === 1);
    await sql.query("select * from leasehold.pause_job('sql-echo', 'test')");
    await sql.query("select leasehold.run_now('sql-echo', 'test')");
    await sql.query("select * from leasehold.run_now('sql-echo', 'test', array[now() - interval '3 hours', now() - interval '2 hours'])");
    await waitFor(() => payloads.length === 4);
    // a transaction of several writes: one notification of each kind
    await sql.query("begin; select * from leasehold.resume_job('sql-echo', 'test'); select * from leasehold.run_now('sql-echo', 'test'); select * from leasehold.run_now('sql-echo', 'test'); commit");
    await sleep(300);
    expect(payloads).toEqual(['jobs', 'jobs', 'requests', 'requests', 'jobs', 'requests']);
  });

  it('an idle worker that listens sends a few statements in 10 s, one that polls dozens; stopping closes the listening connection', async () => {
    const [listening, polling] = await Promise.all([startWorker('idle-listen'), startWorker('idle-poll', { NOTIFICATIONS: '0' })]);
    await listening.waitFor(notifications(true), 10_000);
    await sleep(500); // the pokes that listening began with
    await Promise.all([statements(listening), statements(polling)]);
    await sleep(10_000);
    const [quiet, busy] = await Promise.all([statements(listening), statements(polling)]);
    console.info(`statements per 10 s of an idle worker: listening ${quiet.total}, polling ${busy.total}`, { quiet: quiet.byStatement, busy: busy.byStatement });
    // polling: a request probe every 500 ms and a schedule refresh every second (30); listening:
    // the liveness session's check every 5 s (2), and every 30 s only the polls, the probe, the
    // peers' list and the unhandled schedules (at most one of each in 10 s)
    expect(busy.total).toBeGreaterThanOrEqual(25);
    expect(quiet.total).toBeLessThanOrEqual(7);
    expect(polling.lines.some(notifications(true))).toBe(false);

    await Promise.all([listening.send({ cmd: 'stop' }), polling.send({ cmd: 'stop' })]);
    await waitFor(async () => {
      const { rows } = await rawPool(url, 2).query("select count(*)::int as n from pg_stat_activity where datname = current_database() and application_name = 'leasehold notifications'");
      return rows[0].n === 0;
    }, 5_000);
  }, 40_000);

  it('a run-now, a pause and a definition reach a listening worker at once, not at its next poll (60 s); a dropped connection falls back and listens again', async () => {
    const [fast, slow] = await Promise.all([startWorker('push-listen', { REFRESH: '60s' }), startWorker('push-poll', { NOTIFICATIONS: '0' })]);
    await fast.waitFor(notifications(true), 10_000);
    await sleep(500);

    let t0 = Date.now();
    await Promise.all([lh.control.runNow('push-listen', { by: 'test' }), lh.control.runNow('push-poll', { by: 'test' })]);
    const [ran, ranPolled] = await Promise.all([
      fast.waitFor(since(t0, (l) => l.event === 'handler' && l.trigger === 'manual'), 10_000),
      slow.waitFor(since(t0, (l) => l.event === 'handler' && l.trigger === 'manual'), 10_000),
    ]);
    const runNowMs = Number(ran.at) - t0;
    const runNowPolledMs = Number(ranPolled.at) - t0;

    const pausedAt = Date.now();
    await Promise.all([lh.control.pause('push-listen', { by: 'test' }), lh.control.pause('push-poll', { by: 'test' })]);
    const [pausedFast, pausedSlow] = await Promise.all([
      fast.waitFor(since(pausedAt, (l) => l.event === 'job:paused' && l.job === 'push-listen'), 10_000),
      slow.waitFor(since(pausedAt, (l) => l.event === 'job:paused' && l.job === 'push-poll'), 10_000),
    ]);

    t0 = Date.now();
    await lh.control.define({ name: 'pushed-echo', handler: 'echo', by: 'test', every: '1h' });
    const added = await fast.waitFor(since(t0, (l) => l.event === 'schedule:added' && l.job === 'pushed-echo'), 10_000);
    console.info(
      `listening worker: run-now ${runNowMs} ms, pause ${Number(pausedFast.at) - pausedAt} ms, definition ${Number(added.at) - t0} ms; polling worker: run-now ${runNowPolledMs} ms, pause ${Number(pausedSlow.at) - pausedAt} ms`,
    );

    // the server ends the listening connection: polling at once, listening again after a while
    t0 = Date.now();
    await rawPool(url, 2).query("select pg_terminate_backend(pid) from pg_stat_activity where datname = current_database() and application_name = 'leasehold notifications'");
    await fast.waitFor(since(t0, notifications(false)), 5_000);
    await fast.waitFor(since(t0, notifications(true)), 20_000);
    await Promise.all([fast.send({ cmd: 'stop' }), slow.send({ cmd: 'stop' })]);
  }, 60_000);

  it('a run-now waiting for a lease held elsewhere starts soon after its release: with a request pending the worker looks every 500 ms', async () => {
    const worker = await startWorker('wait-listen', { OVERLAP: 'buffer-one' });
    await worker.waitFor(notifications(true), 10_000);
    const held = await lh.acquire('wait-listen', { ttl: '60s' });
    if (!held.acquired) throw new Error('the test could not take the lease');
    await lh.control.runNow('wait-listen', { by: 'test' });
    await sleep(1_500); // the worker saw the request, and the lease held
    expect(worker.lines.some((l) => l.event === 'handler')).toBe(false);
    const t0 = Date.now();
    await held.lease.release();
    // nothing announces a release: the next look, 500 ms on, not the 30 s fallback
    await worker.waitFor(since(t0, (l) => l.event === 'handler' && l.trigger === 'manual'), 10_000);
    await worker.send({ cmd: 'stop' });
  }, 40_000);
});

describe('through PgBouncer (pool_mode = transaction)', () => {
  let bouncer: PgBouncer | undefined;
  beforeAll(async () => {
    if (BINARY) bouncer = await startPgBouncer(BINARY, url);
  });
  afterAll(async () => {
    await bouncer?.stop();
  });

  it.skipIf(!BINARY)(`the worker finds that notifications do not arrive and polls: a run-now and a pause still reach it${missing}`, async () => {
    const worker = await startWorker('pooled-poll', { LIVENESS: 'off' }, bouncer!.url());
    const line = await worker.waitFor(notifications(false), 10_000);
    expect(String(line.reason)).toMatch(/did not arrive/);
    let t0 = Date.now();
    await lh.control.runNow('pooled-poll', { by: 'test' });
    await worker.waitFor(since(t0, (l) => l.event === 'handler' && l.trigger === 'manual'), 5_000);
    t0 = Date.now();
    await lh.control.pause('pooled-poll', { by: 'test' });
    await worker.waitFor(since(t0, (l) => l.event === 'job:paused'), 5_000);
    expect(worker.lines.some(notifications(true))).toBe(false);
    await worker.send({ cmd: 'stop' });
  }, 40_000);

  it.skipIf(!BINARY)(`with liveness on a direct connection the worker listens there, and a pause reaches it at once${missing}`, async () => {
    const worker = await startWorker('pooled-listen', { LIVENESS_URL: url, REFRESH: '60s' }, bouncer!.url());
    await worker.waitFor(notifications(true), 10_000);
    await sleep(500);
    const t0 = Date.now();
    await lh.control.pause('pooled-listen', { by: 'test' });
    // its next poll is 60 s away: only the notification brings the pause this soon
    await worker.waitFor(since(t0, (l) => l.event === 'job:paused'), 10_000);
    await worker.send({ cmd: 'stop' });
  }, 40_000);
});
