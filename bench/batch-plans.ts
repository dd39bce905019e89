// The batch functions on one connection, call after call: claim (OLD=1: claim_slots) and finish_runs for
// JOBS jobs, CALLS times in a row. PostgreSQL switches a PL/pgSQL statement to a generic plan
// after five calls when it estimates it no dearer; for the batch statements (unnest of arrays
// joined to indexes) its estimate of the arrays' size is a guess, and issue 12 measured a
// 10,000-run finish_runs at 8.7-9.3 s instead of ~0.2 s that way. The batch functions now force
// custom plans (sql/0006_contract.sql); this prints each call's time, so a switch would show as
// a step after call 5.
//   DATABASE_URL=postgres://... npx tsx bench/batch-plans.ts [jobs=10000] [calls=8]
import { openBenchDatabase } from './lib/database.js';
import { Session } from './lib/session.js';

const jobs = Number(process.argv[2] ?? 10_000);
const calls = Number(process.argv[3] ?? 8);
const database = await openBenchDatabase(process.env.DATABASE_URL);
const session = await Session.open(database.url, 'bench-batch-plans');
try {
  // PLAN_MODE=force_generic_plan shows at once what call 6 on would cost without the fix
  if (process.env.PLAN_MODE) await session.query(`select set_config('plan_cache_mode', $1, false)`, [process.env.PLAN_MODE]);
  const names = Array.from({ length: jobs }, (_, i) => `plan-${i}`);
  const n = names.length;
  await session.query(
    'select count(*) from leasehold.register_jobs($1, $2, $3, $4, $5, $6, $7, $8)',
    [names, names.map(() => '* * * * *'), names.map(() => null), names.map(() => 60_000), names.map(() => 60_000), names.map(() => 'skip'), names.map(() => 'none'), 'bench'],
  );
  const base = Date.now() - calls * 60_000 - 60_000;
  const claimMs: number[] = [];
  const finishMs: number[] = [];
  for (let call = 0; call < calls; call++) {
    const slot = new Date(base + call * 60_000);
    let startedAt = performance.now();
    const claimed = await session.query<{ job: string; fence: string; token: string }>(
      process.env.OLD
        ? `select job, fence, token from leasehold.claim_slots($1, array_fill($2::timestamptz, array[$4::int]),
             array_fill(interval '1 minute', array[$4::int]), array_fill('exclusive'::text, array[$4::int]), array_fill(0, array[$4::int]), $3)
            where claimed`
        : `select job, fence, token from leasehold.claim(
             array(select row(j, $2::timestamptz, interval '1 minute', 'exclusive', 0)::leasehold.slot_claim from unnest($1::text[]) j), $3)
            where claimed and $4::int > 0`,
      [names, slot, 'bench', n],
    );
    claimMs.push(performance.now() - startedAt);
    if (claimed.length !== n) throw new Error(`call ${call + 1}: claimed ${claimed.length} of ${n}`);
    startedAt = performance.now();
    await session.query('select count(*) from leasehold.finish_runs($1, $2, $3::uuid[], $4, $5, $6)', [
      claimed.map((r) => r.job),
      claimed.map((r) => r.fence),
      claimed.map((r) => r.token),
      claimed.map(() => 'succeeded'),
      claimed.map(() => null),
      claimed.map(() => 1),
    ]);
    finishMs.push(performance.now() - startedAt);
  }
  const show = (ms: number[]) => ms.map((m) => m.toFixed(0)).join(', ');
  process.stdout.write(`${n} jobs, ${calls} calls on one connection (ms per call)\n`);
  process.stdout.write(`${process.env.OLD ? 'claim_slots' : 'claim'}:  ${show(claimMs)}\nfinish_runs:  ${show(finishMs)}\n`);
} finally {
  await session.close();
  await database.close();
}
