// What the summary's triggers on runs (sql/baseline/5_reads.sql) cost the claim and finish path:
// N jobs due at one slot, W connections each claiming its share with leasehold.claim_due() and
// then finishing those runs with one finish_runs() call, the way workers do at a tick. Rounds
// alternate between the triggers enabled and disabled (ALTER TABLE ... DISABLE TRIGGER) on the
// same database; the medians of each are printed with the load average.
//   DATABASE_URL=postgres://... npx tsx bench/summary-triggers.ts [jobs=10000] [workers=4] [rounds=4]
//   (without DATABASE_URL an embedded server; SLOW_MS=n makes every run take n ms, so that
//   every finish also marks a slow run: the dearest case)
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { createLeasehold } from '../src/index.js';
import { silentLogger } from '../src/observe/logger.js';
import { createTestDatabase, startEmbeddedPostgres, type EmbeddedPostgres } from '../src/testing.js';

const jobs = Number(process.argv[2] ?? 10_000);
const workers = Number(process.argv[3] ?? 4);
const rounds = Number(process.argv[4] ?? 4);
const slowMs = Number(process.env.SLOW_MS ?? 0);
const TRIGGERS = ['runs_count_inserted', 'runs_count_updated', 'runs_count_deleted'];

let server: EmbeddedPostgres | undefined;
if (!process.env.DATABASE_URL) server = await startEmbeddedPostgres({ settings: { fsync: 'on', synchronous_commit: 'on' } });
const database = await createTestDatabase(process.env.DATABASE_URL ?? (server as EmbeddedPostgres).connectionString, 'leasehold_bench');
const loadStart = os.loadavg();
const sessions: pg.Client[] = [];
try {
  await (await createLeasehold({ connectionString: database.url, logger: silentLogger(), liveness: false })).close();
  const admin = new pg.Client({ connectionString: database.url, application_name: 'bench-summary-admin' });
  await admin.connect();
  sessions.push(admin);
  const names = Array.from({ length: jobs }, (_, i) => `sum-${String(i).padStart(6, '0')}`);
  await admin.query(
    `select count(*) from leasehold.register_jobs($1, array_fill('*/10 * * * * *'::text, array[$2::int]), array_fill(null::text, array[$2::int]),
       array_fill(10000::bigint, array[$2::int]), array_fill(30000::bigint, array[$2::int]), array_fill('skip'::text, array[$2::int]),
       array_fill('none'::text, array[$2::int]), 'bench')`,
    [names, jobs],
  );
  const claimers: Array<{ session: pg.Client; key: string; share: string[] }> = [];
  for (let w = 0; w < workers; w++) {
    const liveness = new pg.Client({ connectionString: database.url, application_name: `bench-summary-${w} liveness` });
    await liveness.connect();
    sessions.push(liveness);
    const key = (await liveness.query<{ key: string }>('select leasehold.register_liveness()::text as key')).rows[0]!.key;
    const session = new pg.Client({ connectionString: database.url, application_name: `bench-summary-${w}` });
    await session.connect();
    sessions.push(session);
    claimers.push({ session, key, share: names.filter((_, i) => i % workers === w) });
  }
  const results: Record<'on' | 'off', { claim: number[]; finish: number[] }> = { on: { claim: [], finish: [] }, off: { claim: [], finish: [] } };
  let slotMs = Math.floor(Date.now() / 1000) * 1000 - 3_600_000;
  for (let r = 0; r < rounds * 2; r++) {
    const mode = r % 4 === 0 || r % 4 === 3 ? 'on' : 'off'; // on, off, off, on, ...
    await admin.query(`alter table leasehold.runs ${mode === 'on' ? 'enable' : 'disable'} trigger ${TRIGGERS.join(`, ${mode === 'on' ? 'enable' : 'disable'} trigger `)}`);
    await admin.query('vacuum analyze leasehold.leases, leasehold.runs');
    slotMs += 10_000;
    const slot = new Date(slotMs);
    const claimed = await Promise.all(
      claimers.map(async (c) => {
        const start = performance.now();
        const { rows } = await c.session.query<{ job: string; fence: string; token: string }>(
          `select job, fence::text, token::text from leasehold.claim($1::text[], array_fill($2::timestamptz, array[cardinality($1::text[])]), array_fill((extract(epoch from interval '30 seconds'::interval) * 1000)::bigint, array[cardinality($1::text[])]), array_fill('exclusive'::text, array[cardinality($1::text[])]), array_fill(0::int, array[cardinality($1::text[])]), $3, $4::bigint)
            where claimed`,
          [c.share, slot, `bench-summary-${c.key}`, c.key],
        );
        return { c, rows, ms: performance.now() - start };
      }),
    );
    results[mode].claim.push(Math.max(...claimed.map((x) => x.ms)));
    if (slowMs > 0) await new Promise((resolve) => setTimeout(resolve, slowMs));
    const finished = await Promise.all(
      claimed.map(async ({ c, rows }) => {
        const start = performance.now();
        await c.session.query(
          `select count(*) from leasehold.finish_runs($1::text[], $2::bigint[], $3::uuid[], array_fill('succeeded'::text, array[$4::int]),
             array_fill(null::text, array[$4::int]), array_fill(1, array[$4::int]))`,
          [rows.map((x) => x.job), rows.map((x) => x.fence), rows.map((x) => x.token), rows.length],
        );
        return performance.now() - start;
      }),
    );
    results[mode].finish.push(Math.max(...finished));
    process.stdout.write(`round ${r + 1} triggers ${mode}: claim ${results[mode].claim.at(-1)!.toFixed(1)} ms, finish ${results[mode].finish.at(-1)!.toFixed(1)} ms (slowest of ${workers} connections, ${claimed.reduce((n, x) => n + x.rows.length, 0)} runs)\n`);
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const line = (m: 'on' | 'off') => `claim ${med(results[m].claim).toFixed(1)} ms, finish ${med(results[m].finish).toFixed(1)} ms`;
  process.stdout.write(`\n${jobs} jobs, ${workers} connections, ${rounds} rounds each${slowMs ? `, every run slow (${slowMs} ms)` : ''}\n`);
  process.stdout.write(`  triggers on:  ${line('on')}\n  triggers off: ${line('off')}\n`);
  process.stdout.write(`  on / off: claim ${(med(results.on.claim) / med(results.off.claim)).toFixed(2)}x, finish ${(med(results.on.finish) / med(results.off.finish)).toFixed(2)}x\n`);
  process.stdout.write(`  load average ${loadStart.map((n) => n.toFixed(2)).join(' ')} -> ${os.loadavg().map((n) => n.toFixed(2)).join(' ')} (${os.cpus().length} CPUs)\n`);
} finally {
  await Promise.allSettled(sessions.map((s) => s.end()));
  await database.drop();
  await server?.stop();
}
