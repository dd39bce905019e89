// Restart availability with real processes: three processes contend for one lease (ttl 10 s, as
// a singleton service would), the server is restarted (fast, as `pg_ctl restart`; immediate),
// and the test measures the seconds without a running holder from the restart to 15 s after it.
// The holder's liveness session is ended by the server, and its lease row survives the restart;
// the holder takes the lease back with its next session and never stops (0 s), where before it
// stopped at once and nobody could take the lease until its expiry (up to a ttl). Never two
// running holders at once.
import { afterAll, beforeAll, expect, it } from 'vitest';
import { fileURLToPath } from 'node:url';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.js';
import { JsonLinesProcess, killAll, type Line } from '../../src/testing/json-lines.js';

const CONTENDER = fileURLToPath(new URL('../fixtures/contender.ts', import.meta.url));
const TTL_MS = 10_000;
const WINDOW_MS = 15_000;

let server: EmbeddedPostgres;
const processes: JsonLinesProcess[] = [];

beforeAll(async () => {
  server = await startEmbeddedPostgres();
});

afterAll(async () => {
  await killAll(processes);
  await server?.stop();
});

/** Held intervals [from, to) of every process, by its held/stopped lines. */
function intervals(children: readonly JsonLinesProcess[], end: number): Array<{ who: number; from: number; to: number }> {
  const out: Array<{ who: number; from: number; to: number }> = [];
  children.forEach((child, who) => {
    let from: number | null = null;
    for (const line of child.lines as Line[]) {
      if (line.event === 'held') from = Number(line.at);
      if (line.event === 'stopped' && from !== null) {
        out.push({ who, from, to: Number(line.at) });
        from = null;
      }
    }
    if (from !== null) out.push({ who, from, to: end });
  });
  return out;
}

/** Milliseconds of [start, end) that no interval covers, and of overlap between two processes. */
function gaps(held: ReturnType<typeof intervals>, start: number, end: number): { idleMs: number; overlapMs: number } {
  let idleMs = 0;
  let overlapMs = 0;
  for (let t = start; t < end; t += 10) {
    const running = held.filter((h) => h.from <= t && t < h.to).length;
    if (running === 0) idleMs += 10;
    if (running > 1) overlapMs += 10;
  }
  return { idleMs, overlapMs };
}

for (const mode of ['fast', 'immediate'] as const) {
  it(`a ${mode} restart stops no running holder: seconds without one, measured`, async () => {
    const name = `singleton-${mode}`;
    const children = await Promise.all(
      [1, 2, 3].map(() => JsonLinesProcess.startScript(CONTENDER, { DATABASE_URL: server.connectionString, NAME: name, TTL: `${TTL_MS}ms` })),
    );
    processes.push(...children);
    await Promise.race(children.map((c) => c.waitFor((l) => l.event === 'held', 20_000)));
    await new Promise((resolve) => setTimeout(resolve, 1_000));
    const start = Date.now();
    await server.restart(mode);
    const upAt = Date.now();
    await new Promise((resolve) => setTimeout(resolve, WINDOW_MS - (Date.now() - start)));
    const end = Date.now();
    const held = intervals(children, end);
    const { idleMs, overlapMs } = gaps(held, start, end);
    const stops = children.flatMap((c) => c.lines.filter((l) => l.event === 'stopped' && Number(l.at) >= start));
    console.log(
      `[restart availability] ${mode} restart (server down ${upAt - start} ms): ${(idleMs / 1000).toFixed(2)} s without a running holder ` +
        `in the ${WINDOW_MS / 1000} s after it; holders stopped: ${stops.map((l) => l.reason).join(', ') || 'none'}; overlap ${overlapMs} ms`,
    );
    expect(overlapMs).toBe(0);
    expect(stops).toEqual([]);
    await Promise.all(children.map((c) => c.send({ cmd: 'exit' }).catch(() => undefined)));
  });
}

for (const sessions of [['leasehold liveness'], ['leasehold liveness', 'leasehold liveness witness']]) {
  const both = sessions.length === 2;
  it(`${both ? 'the liveness session and its witness' : 'the liveness session alone'} ended on a live server: ${both ? 'the holder stops' : 'the holder runs on'}, measured`, async () => {
    const name = `singleton-terminated-${sessions.length}`;
    const children = await Promise.all(
      [1, 2, 3].map(() => JsonLinesProcess.startScript(CONTENDER, { DATABASE_URL: server.connectionString, NAME: name, TTL: `${TTL_MS}ms` })),
    );
    processes.push(...children);
    const first = await Promise.race(children.map((c) => c.waitFor((l) => l.event === 'held', 20_000).then(() => c)));
    await new Promise((resolve) => setTimeout(resolve, 1_500)); // its witness is waiting by now
    const admin = await import('pg').then(({ default: pg }) => new pg.Client({ connectionString: server.connectionString }));
    await admin.connect();
    const start = Date.now();
    await admin.query(
      `select pg_terminate_backend(a.pid) from pg_stat_activity a
        where a.application_name = any ($2) and a.client_port in (select b.client_port from pg_stat_activity b where b.pid = any (
              select a2.pid from pg_stat_activity a2 where a2.application_name = any ($2)))
          and a.pid in (select a3.pid from pg_stat_activity a3 join pg_locks k on k.pid = a3.pid
                         where k.locktype = 'advisory' and ((k.classid::bigint << 32) | k.objid::bigint) = (select l.holder_key from leasehold.leases l where l.name = $1))`,
      [name, sessions],
    );
    await admin.end();
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    const end = Date.now();
    const { idleMs, overlapMs } = gaps(intervals(children, end), start, end);
    const stopped = first.lines.find((l) => l.event === 'stopped' && Number(l.at) >= start);
    const next = children.flatMap((c) => c.lines.filter((l) => l.event === 'held' && Number(l.at) >= start))[0];
    console.log(
      `[restart availability] ${sessions.join(' and ')} terminated: ` +
        (stopped ? `the holder stopped ${Number(stopped.at) - start} ms after (${String(stopped.reason)}), ` : 'the holder ran on, ') +
        (next ? `the next holder ran ${Number(next.at) - start} ms after; ` : 'nobody else ran; ') +
        `${(idleMs / 1000).toFixed(2)} s without a running holder in 5 s; overlap ${overlapMs} ms`,
    );
    if (both) {
      expect(stopped?.reason).toBe('liveness-lost');
    } else {
      expect(stopped).toBeUndefined();
      expect(next).toBeUndefined();
      expect(overlapMs).toBe(0);
    }
    await Promise.all(children.map((c) => c.send({ cmd: 'exit' }).catch(() => undefined)));
  });
}
