// The scheduler's tick, this build against an earlier one, in one run: N jobs due at every tick
// on W worker processes (bench/fixtures/tick-worker.ts), for each N of a list, each build on a
// fresh database of the same server (the earlier build's workers install their own schema),
// alternating build by build, round after round. Per build: the medians over the measured ticks
// of each phase of a tick (bench/lib/scheduler.ts) and their ratio to the earlier build, with
// the load average.
//
//   npm run build    # this build's dist/, which the workers run
//   git worktree add /tmp/earlier <commit> && (cd /tmp/earlier && npm ci && npm run build)
//   DATABASE_URL=postgres://... npx tsx bench/scheduler-compare.ts /tmp/earlier/dist [rounds=1]
//   (without DATABASE_URL an embedded server)
// Settings: BENCH_COMPARE_JOBS (default 1000,10000,100000) with the interval of each,
// BENCH_COMPARE_EVERY (seconds, default 5,15,45); BENCH_SCHED_WORKERS, _WARMUP, _TICKS as for the
// scheduler part (bench/lib/config.ts); the workers' statements get a 60 s timeout (an earlier
// build registered 100,000 jobs within the 5 s default only on a quiet server).
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { probeDatabaseClock } from '../src/testing/database-clock.js';
import { createTestDatabase, startEmbeddedPostgres, type EmbeddedPostgres } from '../src/testing.js';
import { readConfig } from './lib/config.js';
import { measureTicks, type SchedulerSettings } from './lib/scheduler.js';
import { Session } from './lib/session.js';
import { max, median, round } from './lib/stats.js';
import type { TickResult } from './lib/tick-analysis.js';

const earlier = process.argv[2];
const rounds = Number(process.argv[3] ?? 1);
if (!earlier || !existsSync(`${earlier}/index.js`)) throw new Error(`usage: scheduler-compare.ts <an earlier build's dist/ directory> [rounds] (no ${earlier}/index.js)`);
if (!existsSync(new URL('../dist/index.js', import.meta.url))) throw new Error('this build has no dist/: npm run build first');
if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`rounds must be a positive integer (got ${process.argv[3]})`);
const list = (name: string, fallback: string) =>
  (process.env[name] ?? fallback).split(',').map((part) => {
    const n = Number(part.trim());
    if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must list positive integers (got "${process.env[name]}")`);
    return n;
  });
const jobCounts = list('BENCH_COMPARE_JOBS', '1000,10000,100000');
const intervals = list('BENCH_COMPARE_EVERY', '5,15,45');
if (intervals.length !== jobCounts.length) throw new Error('BENCH_COMPARE_EVERY needs an interval for each count of BENCH_COMPARE_JOBS');

const base = readConfig().scheduler;
const builds = [
  { label: 'earlier', dist: earlier },
  { label: 'this', dist: undefined },
] as const;
const progress = (message: string) => process.stderr.write(`[compare] ${message}\n`);
process.env.QUERY_TIMEOUT = '60s';

let server: EmbeddedPostgres | undefined;
if (!process.env.DATABASE_URL) server = await startEmbeddedPostgres({ settings: { fsync: 'on', synchronous_commit: 'on' } });
const serverUrl = process.env.DATABASE_URL ?? (server as EmbeddedPostgres).connectionString;
const loadStart = os.loadavg();
const ticks = new Map<string, TickResult[]>();
const loads: string[] = [];
try {
  for (let r = 0; r < rounds; r++) {
    for (const [c, jobs] of jobCounts.entries()) {
      const settings: SchedulerSettings = { ...base, jobs, everySeconds: intervals[c] as number };
      for (const build of (r + c) % 2 === 0 ? builds : [...builds].reverse()) {
        const database = await createTestDatabase(serverUrl, 'leasehold_compare');
        const admin = await Session.open(database.url, 'bench-compare');
        try {
          const probe = await probeDatabaseClock({ query: async (text) => ({ rows: await admin.query(text) }) }, { samples: 9, now: () => performance.timeOrigin + performance.now() });
          if (build.dist) process.env.BENCH_WORKER_DIST = build.dist;
          else delete process.env.BENCH_WORKER_DIST;
          const before = os.loadavg()[0] as number;
          progress(`round ${r + 1}, ${build.label} build: ${jobs} jobs every ${settings.everySeconds}s on ${settings.workers} workers (load ${before.toFixed(2)})`);
          const result = await measureTicks(database.url, settings, admin, -probe.offsetMs, progress);
          loads.push(`${jobs} ${build.label} ${before.toFixed(2)}->${(os.loadavg()[0] as number).toFixed(2)}`);
          for (const tick of result.ticks) {
            progress(
              `  ${tick.slot.slice(11, 23)}: last claim ${tick.wallMs.toFixed(0)} ms, start p50 ${tick.startLatencyMs.p50} p99 ${tick.startLatencyMs.p99} ms, ` +
                `exactly once ${tick.verification.exactlyOnce}/${jobs}, doubled ${tick.verification.doubled}`,
            );
          }
          const key = `${jobs}:${build.label}`;
          ticks.set(key, [...(ticks.get(key) ?? []), ...result.ticks]);
        } finally {
          delete process.env.BENCH_WORKER_DIST;
          await admin.close();
          await database.drop();
        }
      }
    }
  }
} finally {
  await server?.stop();
}

/** Medians over the measured ticks of each phase; per-worker phases by their slowest worker. */
function phases(jobs: number, label: string) {
  const t = ticks.get(`${jobs}:${label}`) ?? [];
  const m = (f: (x: TickResult) => number) => median(t.map(f));
  return {
    ticks: t.length,
    firstSent: m((x) => x.firstClaimSentMs),
    batch: m((x) => max(x.batchMs)),
    startSpan: m((x) => max(x.startSpanMs)),
    gc: m((x) => max(x.gcMs)),
    lastClaim: m((x) => x.wallMs),
    p50: m((x) => x.startLatencyMs.p50),
    p99: m((x) => x.startLatencyMs.p99),
    exactlyOnce: t.length > 0 && t.every((x) => x.verification.exactlyOnce === jobs && x.verification.doubled === 0),
  };
}
const ratio = (a: number, b: number) => (Number.isFinite(a) && Number.isFinite(b) && b > 0 ? `${(a / b).toFixed(2)}x` : '-');
const PHASES = [
  ['firstSent', 'tick -> first claim sent (working out which jobs are due)'],
  ['batch', 'share claim statement, sent to rows parsed (slowest worker)'],
  ['startSpan', 'rows back -> last handler started (slowest worker)'],
  ['gc', 'garbage collection until the last start (slowest worker)'],
  ['lastClaim', 'tick -> last claim'],
  ['p50', 'handler start p50'],
  ['p99', 'handler start p99'],
] as const;
const lines = [
  `${settings()} ${rounds} round(s) per build and size, alternating; ${server ? 'embedded PostgreSQL' : 'DATABASE_URL'}; ` +
    `load average ${loadStart.map((n) => n.toFixed(2)).join(' ')} -> ${os.loadavg().map((n) => n.toFixed(2)).join(' ')} (${os.cpus().length} CPUs); per run: ${loads.join(', ')}`,
  '',
  `| phase (median per tick, ms) | ${jobCounts.map((n) => `${n.toLocaleString('en-US')} earlier | ${n.toLocaleString('en-US')} this | ratio`).join(' | ')} |`,
  `| --- | ${jobCounts.map(() => '---: | ---: | ---:').join(' | ')} |`,
  ...PHASES.map(([key, label]) => {
    const cells = jobCounts.map((n) => {
      const b = phases(n, 'earlier')[key];
      const a = phases(n, 'this')[key];
      return `${round(b, 0)} | ${round(a, 0)} | ${ratio(a, b)}`;
    });
    return `| ${label} | ${cells.join(' | ')} |`;
  }),
  `| every slot exactly once | ${jobCounts.map((n) => `${phases(n, 'earlier').exactlyOnce ? 'yes' : 'NO'} | ${phases(n, 'this').exactlyOnce ? 'yes' : 'NO'} |`).join(' | ')} |`,
];
function settings(): string {
  return `${jobCounts.map((n, i) => `${n.toLocaleString('en-US')} jobs every ${intervals[i]}s`).join(', ')}, all due at every tick, on ${base.workers} worker processes, ` +
    `${base.warmupTicks} warm-up and ${base.measuredTicks} measured tick(s) per run;`;
}
process.stdout.write(`${lines.join('\n')}\n`);
const dir = new URL('./results/', import.meta.url);
mkdirSync(dir, { recursive: true });
const stamp = new Date().toISOString().replace(/[:.]/g, '-');
writeFileSync(new URL(`scheduler-compare-${stamp}.json`, dir), JSON.stringify({ jobCounts, intervals, rounds, earlier, base, loadStart, loadEnd: os.loadavg(), loads, ticks: Object.fromEntries(ticks) }, null, 2));
if (jobCounts.some((n) => !phases(n, 'earlier').exactlyOnce || !phases(n, 'this').exactlyOnce)) process.exitCode = 1;
