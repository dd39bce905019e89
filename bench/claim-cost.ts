// What one tick costs the database, schema against schema: N free jobs due at one slot, claimed
// by one connection with leasehold.claim_due(), their leases renewed once with one
// renew_leases() call (a heartbeat of N running leases) and then finished with one finish_runs() call,
// on two databases of the same server, one installed at schema `from` (default 14) and one at
// the library's latest, from the install scripts of both versions. Rounds alternate between the
// two; a plain batched UPDATE ... FOR UPDATE SKIP LOCKED of the same rows (on the latest
// database) is the floor. Prints the medians, their ratios and the load average.
//   DATABASE_URL=postgres://... npx tsx bench/claim-cost.ts [jobs=10000] [rounds=5] [from=27]
//   (without DATABASE_URL an embedded server)
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { latestVersion } from '../src/db/migrations.js';
import { schemaScript } from './schema-script.js';
import { createTestDatabase, startEmbeddedPostgres, type EmbeddedPostgres } from '../src/testing.js';

const jobs = Number(process.argv[2] ?? 10_000);
const rounds = Number(process.argv[3] ?? 5);
const from = Number(process.argv[4] ?? 27);
const to = latestVersion();
if (!(from >= 1 && from < to)) throw new Error(`from must be a schema version below ${to} (got ${process.argv[4]})`);

const CLAIM = `select job, fence::text, token::text from leasehold.claim_due(
  array(select row(j, $2::timestamptz, interval '30 seconds', 'exclusive', 0)::leasehold.slot_claim from unnest($1::text[]) j), 'bench', null)
 where claimed`;
const RENEW = `select count(*) filter (where renewed)::int as renewed from leasehold.renew_leases(array(
  select row(n, t, interval '30 seconds')::leasehold.lease_renewal from unnest($1::text[], $2::uuid[]) as u(n, t)))`;
const FINISH = `select count(*) from leasehold.finish_runs($1::text[], $2::bigint[], $3::uuid[], array_fill('succeeded'::text, array[$4::int]),
  array_fill(null::text, array[$4::int]), array_fill(1, array[$4::int]))`;
const BASELINE = `update leasehold.leases l set last_slot = $2, holder = 'bench'
  where l.name in (select x.name from leasehold.leases x where x.name = any($1::text[]) and (x.last_slot is null or x.last_slot < $2)
                    order by random() for update skip locked)
 returning l.name`;

let server: EmbeddedPostgres | undefined;
if (!process.env.DATABASE_URL) server = await startEmbeddedPostgres({ settings: { fsync: 'on', synchronous_commit: 'on' } });
const base = process.env.DATABASE_URL ?? (server as EmbeddedPostgres).connectionString;
const databases = { [`schema ${from}`]: await createTestDatabase(base, 'leasehold_bench'), [`schema ${to}`]: await createTestDatabase(base, 'leasehold_bench') };
const loadStart = os.loadavg();
const sessions = new Map<string, pg.Client>();
const names = Array.from({ length: jobs }, (_, i) => `cost-${String(i).padStart(6, '0')}`);
try {
  for (const [label, database] of Object.entries(databases)) {
    const session = new pg.Client({ connectionString: database.url, application_name: `bench-claim-cost ${label}` });
    await session.connect();
    sessions.set(label, session);
    await session.query(schemaScript(label === `schema ${to}` ? to : from));
    await session.query(
      `select count(*) from leasehold.register_jobs($1, array_fill('* * * * *'::text, array[$2::int]), array_fill(null::text, array[$2::int]),
         array_fill(60000::bigint, array[$2::int]), array_fill(30000::bigint, array[$2::int]), array_fill('skip'::text, array[$2::int]),
         array_fill('none'::text, array[$2::int]), 'bench')`,
      [names, jobs],
    );
  }
  const labels = [...sessions.keys(), 'baseline'];
  const results = new Map<string, { claim: number[]; renew: number[]; finish: number[] }>(labels.map((l) => [l, { claim: [], renew: [], finish: [] }]));
  for (let r = 0; r < rounds; r++) {
    for (const label of r % 2 === 0 ? labels : [...labels].reverse()) {
      const session = sessions.get(label) ?? (sessions.get(`schema ${to}`) as pg.Client);
      await session.query('vacuum analyze leasehold.leases, leasehold.runs');
      const [{ slot }] = (await session.query<{ slot: Date }>(`select clock_timestamp() - interval '1 millisecond' as slot`)).rows as [{ slot: Date }];
      const start = performance.now();
      const { rows } = await session.query<{ job: string; fence: string; token: string }>(label === 'baseline' ? BASELINE : CLAIM, [names, slot]);
      const claimMs = performance.now() - start;
      if (rows.length !== jobs) throw new Error(`${label}: ${rows.length} of ${jobs} jobs claimed`);
      const result = results.get(label) as { claim: number[]; renew: number[]; finish: number[] };
      result.claim.push(claimMs);
      if (label !== 'baseline') {
        // the session's first renew_leases() compiles it: that is not a heartbeat's cost
        if (r === 0) await session.query(RENEW, [rows.slice(0, 1).map((x) => x.job), rows.slice(0, 1).map((x) => x.token)]);
        const renewStart = performance.now();
        const renewed = await session.query<{ renewed: number }>(RENEW, [rows.map((x) => x.job), rows.map((x) => x.token)]);
        result.renew.push(performance.now() - renewStart);
        if (renewed.rows[0]?.renewed !== jobs) throw new Error(`${label}: ${renewed.rows[0]?.renewed} of ${jobs} leases renewed`);
        const finishStart = performance.now();
        await session.query(FINISH, [rows.map((x) => x.job), rows.map((x) => x.fence), rows.map((x) => x.token), rows.length]);
        result.finish.push(performance.now() - finishStart);
      }
      process.stdout.write(
        `round ${r + 1} ${label}: claim ${claimMs.toFixed(1)} ms` +
          (label === 'baseline' ? '\n' : `, renew ${(result.renew.at(-1) as number).toFixed(1)} ms, finish ${(result.finish.at(-1) as number).toFixed(1)} ms\n`),
      );
    }
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
  const old = results.get(`schema ${from}`) as { claim: number[]; renew: number[]; finish: number[] };
  const floor = med((results.get('baseline') as { claim: number[] }).claim);
  process.stdout.write(`\n${jobs} jobs due at one slot, one connection, ${rounds} rounds each, alternating (medians)\n`);
  for (const label of labels) {
    const { claim, renew, finish } = results.get(label) as { claim: number[]; renew: number[]; finish: number[] };
    const c = med(claim);
    const f = finish.length
      ? `, renew_leases ${med(renew).toFixed(1)} ms (${(med(renew) / med(old.renew)).toFixed(2)}x), finish_runs ${med(finish).toFixed(1)} ms (${(med(finish) / med(old.finish)).toFixed(2)}x)`
      : '';
    process.stdout.write(`  ${label.padEnd(10)} claim ${c.toFixed(1)} ms (${(c / med(old.claim)).toFixed(2)}x schema ${from}, ${(c / floor).toFixed(2)}x baseline)${f}\n`);
  }
  process.stdout.write(`  load average ${loadStart.map((n) => n.toFixed(2)).join(' ')} -> ${os.loadavg().map((n) => n.toFixed(2)).join(' ')} (${os.cpus().length} CPUs)\n`);
} finally {
  await Promise.allSettled([...sessions.values()].map((s) => s.end()));
  for (const database of Object.values(databases)) await database.drop();
  await server?.stop();
}
