// The batch functions after small calls: a worker's connection finishes and claims a few runs
// at a time most of the day, then a big tick comes. PostgreSQL may switch a PL/pgSQL statement
// to a generic plan after five calls, when the generic plan looks no dearer than the custom
// ones it made; planned for a guessed array size, that plan can be far slower for a batch of
// 10,000 (issue 12 measured finish_runs at 8.7-9.3 s instead of ~0.2 s), and a slow finish
// keeps the finished jobs' lease rows locked. Schema 6 forces custom plans on the batch
// functions. This makes SMALL calls of one job each on one connection, then one call with the
// rest, and prints the times; SCHEMA=5 installs the schema before that fix (claim_slots).
//   DATABASE_URL=postgres://... npx tsx bench/batch-plans.ts [jobs=10000] [small=6]
//   (without DATABASE_URL an embedded server; SCHEMA=5|6, default the latest; EXPLAIN=1)
import pg from 'pg';
import { latestVersion } from '../src/db/migrations.js';
import { schemaScript } from './schema-script.js';
import { createTestDatabase, startEmbeddedPostgres, type EmbeddedPostgres } from '../src/testing.js';

const jobs = Number(process.argv[2] ?? 10_000);
const small = Number(process.argv[3] ?? 6);
const schema = Number(process.env.SCHEMA ?? latestVersion());
let server: EmbeddedPostgres | undefined;
if (!process.env.DATABASE_URL) server = await startEmbeddedPostgres();
const database = await createTestDatabase(process.env.DATABASE_URL ?? (server as EmbeddedPostgres).connectionString, 'leasehold_bench');
const client = new pg.Client({ connectionString: database.url, application_name: 'bench-batch-plans' });
await client.connect();
try {
  await client.query(`begin; ${schemaScript(schema)} commit;`);
  // EXPLAIN=1: auto_explain prints the plans of the slow statements inside (needs the module)
  if (process.env.EXPLAIN) {
    client.on('notice', (n: { message?: string | undefined }) => process.stdout.write(`${n.message ?? ''}\n`));
    await client.query(`load 'auto_explain'; set auto_explain.log_min_duration = 500; set auto_explain.log_nested_statements = on;
                        set auto_explain.log_analyze = on; set auto_explain.log_timing = off; set client_min_messages = log`);
  }
  const names = Array.from({ length: jobs }, (_, i) => `plan-${i}`);
  await client.query('select count(*) from leasehold.register_jobs($1, $2, $3, $4, $5, $6, $7, $8)', [
    names,
    names.map(() => '* * * * *'),
    names.map(() => null),
    names.map(() => 60_000),
    names.map(() => 60_000),
    names.map(() => 'skip'),
    names.map(() => 'none'),
    'bench',
  ]);
  const slot = new Date(Date.now() - 60_000);
  const claim = async (batch: string[]) => {
    const sql =
      schema >= 6
        ? `select job, fence, token from leasehold.claim(
             array(select row(j, $2::timestamptz, interval '5 minutes', 'exclusive', 0)::leasehold.slot_claim from unnest($1::text[]) j), $3)
            where claimed`
        : `select job, fence, token from leasehold.claim_slots($1, array(select $2::timestamptz from unnest($1::text[])),
             array(select interval '5 minutes' from unnest($1::text[])), array(select 'exclusive'::text from unnest($1::text[])),
             array(select 0 from unnest($1::text[])), $3)
            where claimed`;
    const startedAt = performance.now();
    const { rows } = await client.query<{ job: string; fence: string; token: string }>(sql, [batch, slot, 'bench']);
    return { rows, ms: performance.now() - startedAt };
  };
  const finish = async (runs: Array<{ job: string; fence: string; token: string }>) => {
    const startedAt = performance.now();
    await client.query('select count(*) from leasehold.finish_runs($1, $2, $3::uuid[], $4, $5, $6)', [
      runs.map((r) => r.job),
      runs.map((r) => r.fence),
      runs.map((r) => r.token),
      runs.map(() => 'succeeded'),
      runs.map(() => null),
      runs.map(() => 1),
    ]);
    return performance.now() - startedAt;
  };
  const claimed: Array<{ job: string; fence: string; token: string }> = [];
  const smallClaims: number[] = [];
  for (let i = 0; i < small; i++) {
    const { rows, ms } = await claim([names[i] as string]);
    claimed.push(...rows);
    smallClaims.push(ms);
  }
  const big = await claim(names.slice(small));
  claimed.push(...big.rows);
  if (claimed.length !== jobs) throw new Error(`claimed ${claimed.length} of ${jobs}`);
  const smallFinishes: number[] = [];
  for (let i = 0; i < small; i++) smallFinishes.push(await finish([claimed[i] as (typeof claimed)[number]]));
  const bigFinish = await finish(claimed.slice(small));
  const show = (ms: number[]) => ms.map((m) => m.toFixed(1)).join(', ');
  process.stdout.write(
    `schema ${schema}, ${jobs} jobs, one connection: ${small} calls of 1 job, then 1 call of ${jobs - small}\n` +
      `${schema >= 6 ? 'claim' : 'claim_slots'}: small ${show(smallClaims)} ms; big ${big.ms.toFixed(0)} ms\n` +
      `finish_runs: small ${show(smallFinishes)} ms; big ${bigFinish.toFixed(0)} ms\n`,
  );
} finally {
  await client.end();
  await database.drop();
  await server?.stop();
}
