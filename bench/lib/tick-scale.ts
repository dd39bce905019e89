// The tick at scale: N jobs due at one slot, W workers claiming at the same instant, two claim
// paths measured in the same run, alternating, on the same database:
//   after     every worker sends its hash share (src/worker/shares.ts) to leasehold.claim()
//             as the worker does, reports it once decided (report_share) and, after about as
//             long as that took, claims the shares no peer reported as it sees them
//             (reported_shares: none, when every worker reported); only rows to act on come
//             back, the run in flight stays on its lease row
//   baseline  a plain batched UPDATE ... FOR UPDATE SKIP LOCKED of last_slot, returning names:
//             the floor of one statement per worker (no tokens, no runs rows, no skips), then
//             one history INSERT and one release UPDATE per job: the minimum of a whole tick
// Each worker is its own connection with its own liveness session; they share this process's
// event loop (as parsing goes, that is closer to W workers on fewer cores than on W cores).
// Per round: tick -> the last claimed row in JavaScript; each claimed row's arrival after the
// slot (the earliest a handler could start; p50/p99); each claim statement's time; rows
// returned; and, from the database, that every job has exactly one run of the slot.
import { performance } from 'node:perf_hooks';
import type { ClaimRow } from '../../src/worker/claims.js';
import { isDecided, ShareDigest } from '../../src/worker/share-reports.js';
import { digestHash, nameHash } from '../../src/worker/shares.js';
import { cpuMs } from './contested.js';
import { walBytes } from './wal.js';
import { Session } from './session.js';
import { median, percentileOfSorted, round, sleep, sortedCopy } from './stats.js';

export const TICK_PATHS = ['after', 'baseline'] as const;
export type TickPath = (typeof TICK_PATHS)[number];

export interface TickRound {
  path: TickPath;
  jobs: number;
  workers: number;
  /** The tick instant -> the last claimed row back in JavaScript, ms. */
  lastClaimMs: number;
  /** Claimed rows' arrival after the tick instant, ms. */
  startP50Ms: number;
  startP99Ms: number;
  /** Median and longest claim statement, ms (send to rows parsed). */
  statementMedianMs: number;
  statementMaxMs: number;
  statements: number;
  rowsReturned: number;
  claimed: number;
  /** Jobs with exactly one claim of the slot (must be `jobs`), and with more than one (must be 0). */
  exactlyOnce: number;
  doubled: number;
  /**
   * The whole tick on the database: the claims and then each run's finish (leasehold: claim() and
   * finish_runs() as the worker sends them; baseline: the plain claim, one history INSERT and one
   * release UPDATE per job, in one statement each per worker). CPU of the workers' backends
   * (from /proc, null when not readable) and WAL written, per job.
   */
  cpuUsPerJob: number | null;
  walBytesPerJob: number;
}

/** The worker's claim (src/worker/claims.ts), every column parsed. */
const TICK = `select * from leasehold.claim($1::text[], array_fill($2::timestamptz, array[cardinality($1::text[])]),
  array_fill(30000::bigint, array[cardinality($1::text[])]), array_fill('exclusive'::text, array[cardinality($1::text[])]),
  array_fill(0, array[cardinality($1::text[])]), $3, $4::bigint)`;

/** The baseline's history and release: one INSERT into a plain table and one UPDATE per job. */
const BASELINE_FINISH = `with done as (
    insert into bench_tick_history (job, slot, holder, started_at, finished_at, outcome)
    select x, $2, $3, now(), now(), 'succeeded' from unnest($1::text[]) x returning job)
  update leasehold.leases l set holder = null where l.name in (select job from done)`;

const FINISH = `select count(*) from leasehold.finish_runs($1::text[], $2::bigint[], $3::uuid[],
  array_fill('succeeded'::text, array[cardinality($1::text[])]), array_fill(null::text, array[cardinality($1::text[])]),
  array_fill(1, array[cardinality($1::text[])]))`;

const BASELINE = `update leasehold.leases l set last_slot = $2, holder = $3
   where l.name in (select x.name from leasehold.leases x
                     where x.name = any($1::text[]) and (x.last_slot is null or x.last_slot < $2)
                     order by random() for update skip locked)
  returning l.name`;

interface Claimer {
  session: Session;
  liveness: Session;
  holder: string;
  key: string;
}

export async function prepareTick(url: string, jobs: number, workers: number): Promise<{ names: string[]; claimers: Claimer[]; admin: Session }> {
  const admin = await Session.open(url, 'bench-tick-admin');
  const names = Array.from({ length: jobs }, (_, i) => `tk${jobs}-${String(i).padStart(6, '0')}`);
  const n = names.length;
  for (let i = 0; i < n; i += 20_000) {
    const part = names.slice(i, i + 20_000);
    await admin.query(
      `select count(*) from leasehold.register_jobs($1, array_fill('* * * * *'::text, array[$2::int]), array_fill(null::text, array[$2::int]),
         array_fill(60000::bigint, array[$2::int]), array_fill(30000::bigint, array[$2::int]), array_fill('skip'::text, array[$2::int]),
         array_fill('none'::text, array[$2::int]), 'bench')`,
      [part, part.length],
    );
  }
  await admin.execute(`create table if not exists bench_tick_history (id bigserial primary key, job text not null, slot timestamptz,
    holder text, started_at timestamptz, finished_at timestamptz, outcome text)`);
  const claimers: Claimer[] = [];
  for (let w = 0; w < workers; w++) {
    const liveness = await Session.open(url, `bench-tick-${w} liveness`);
    const [row] = await liveness.query<{ key: string }>('select leasehold.register_liveness()::text as key');
    const session = await Session.open(url, `bench-tick-${w}`);
    claimers.push({ session, liveness, holder: `bench-tick-${w}`, key: (row as { key: string }).key });
  }
  return { names, claimers, admin };
}

/** Frees every lease of `names` and closes their runs, so that the next round claims them all again. */
async function reset(admin: Session, names: string[]): Promise<void> {
  await admin.execute(`update leasehold.run_log set outcome = 'succeeded', finished_at = now() where job = any($1::text[]) and outcome = 'running'`, [names]);
  await admin.execute(
    `update leasehold.leases set token = null, expires_at = null, holder_key = null, released_at = now(), run_slot = null, run_started_at = null
      where name = any($1::text[])`,
    [names],
  );
  await admin.execute('vacuum analyze leasehold.leases');
}

export async function measureTickRound(path: TickPath, names: string[], claimers: Claimer[], admin: Session): Promise<TickRound> {
  await reset(admin, names);
  // A slot just in the past on the database clock; every worker fires at the same instant.
  const [now] = await admin.query<{ ms: string }>(`select (extract(epoch from now()) * 1000)::bigint::text as ms`);
  const slot = new Date(Number((now as { ms: string }).ms) - 1);
  const keys = claimers.map((c) => c.key).sort();
  const pids = await Promise.all(claimers.map(async (c) => Number((await c.session.query<{ pid: number }>('select pg_backend_pid() as pid'))[0]?.pid)));
  const walBefore = await walBytes(admin);
  const cpuBefore = cpuMs(pids);
  const finishes: Array<Promise<unknown>> = [];
  const arrivals: number[] = [];
  const statementMs: number[] = [];
  let rowsReturned = 0;
  const t0 = performance.now();
  // decided: told whether every row of the claim is final (nothing to retry), before its runs finish
  const call = async (claimer: Claimer, fn: string, list: string[], decided?: (all: boolean) => Promise<void>): Promise<number> => {
    if (list.length === 0) return 0;
    const sent = performance.now();
    const rows =
      fn === 'baseline'
        ? await claimer.session.query<{ name: string }>(BASELINE, [list, slot, claimer.holder])
        : await claimer.session.query<{ claimed: boolean }>(TICK, [list, slot, claimer.holder, claimer.key]);
    const back = performance.now();
    statementMs.push(back - sent);
    if (process.env.BENCH_TICK_TRACE) console.error(`[trace] ${path} ${claimer.holder} ${fn} ${list.length} jobs: sent ${(sent - t0).toFixed(1)} back ${(back - t0).toFixed(1)} ms, ${rows.length} rows`);
    rowsReturned += rows.length;
    if (decided) await decided((rows as unknown as ClaimRow[]).every(isDecided));
    for (const row of rows) if (fn === 'baseline' || (row as { claimed: boolean }).claimed) arrivals.push(back - t0);
    // the runs end at once (the handlers do nothing): one finishing statement per claim, as the worker batches them
    if (fn === 'baseline') {
      finishes.push(claimer.session.execute(BASELINE_FINISH, [(rows as Array<{ name: string }>).map((r) => r.name), slot, claimer.holder]));
    } else {
      const won = (rows as Array<{ claimed: boolean; job: string; fence: string; token: string }>).filter((r) => r.claimed);
      if (won.length > 0) finishes.push(claimer.session.query(FINISH, [won.map((r) => r.job), won.map((r) => r.fence), won.map((r) => r.token)]));
    }
    return back - sent;
  };
  await Promise.all(
    claimers.map(async (claimer) => {
      if (path === 'baseline') return call(claimer, 'baseline', names);
      const fn = 'claim';
      const own = keys.indexOf(claimer.key);
      const byOwner: string[][] = keys.map(() => []);
      const digests = keys.map(() => new ShareDigest());
      for (const name of names) {
        const hash = nameHash(name);
        const owner = hash % keys.length;
        byOwner[owner]!.push(name);
        digests[owner]!.addPair(hash, digestHash(name), slot);
      }
      const took = await call(claimer, fn, byOwner[own]!, async (decided) => {
        if (decided) await claimer.session.query('select leasehold.report_share($1::bigint, $2, $3::bigint, $4::bigint)', [claimer.key, digests[own]!.jobs, digests[own]!.sumA, digests[own]!.sumB]);
      });
      await sleep(Math.min(Math.max(50, took), 2_000));
      const peers = keys.map((key, i) => ({ key, i })).filter((p) => p.i !== own && digests[p.i]!.jobs > 0);
      const reported = await claimer.session.query<{ key: string }>(
        'select holder_key::text as key from leasehold.reported_shares($1::bigint[], $2::integer[], $3::bigint[], $4::bigint[])',
        [peers.map((p) => p.key), peers.map((p) => digests[p.i]!.jobs), peers.map((p) => digests[p.i]!.sumA), peers.map((p) => digests[p.i]!.sumB)],
      );
      const skip = new Set(reported.map((r) => r.key));
      return call(claimer, fn, peers.filter((p) => !skip.has(p.key)).flatMap((p) => byOwner[p.i]!));
    }),
  );
  await Promise.all(finishes);
  const cpuAfter = cpuMs(pids);
  const walWritten = (await walBytes(admin)) - walBefore;
  const [check] = await admin.query<{ once: number; doubled: number }>(
    path === 'baseline'
      ? `select count(*) filter (where last_slot = $2)::int as once, 0 as doubled from leasehold.leases where name = any($1::text[])`
      : `select count(*) filter (where n = 1)::int as once, count(*) filter (where n > 1)::int as doubled
           from (select count(*) as n from leasehold.runs where job = any($1::text[]) and slot = $2 group by job) r`,
    [names, slot],
  );
  const sorted = sortedCopy(arrivals);
  return {
    path,
    jobs: names.length,
    workers: claimers.length,
    lastClaimMs: round(sorted.length ? (sorted[sorted.length - 1] as number) : Number.NaN, 1),
    startP50Ms: round(percentileOfSorted(sorted, 50), 1),
    startP99Ms: round(percentileOfSorted(sorted, 99), 1),
    statementMedianMs: round(median(statementMs), 1),
    statementMaxMs: round(Math.max(...statementMs), 1),
    statements: statementMs.length,
    rowsReturned,
    claimed: arrivals.length,
    exactlyOnce: check?.once ?? 0,
    doubled: check?.doubled ?? 0,
    cpuUsPerJob: cpuBefore === null || cpuAfter === null ? null : round(((cpuAfter - cpuBefore) * 1000) / names.length, 1),
    walBytesPerJob: round(walWritten / names.length, 1),
  };
}

