// The scheduler's tick, this build against an earlier one, in one run: N jobs due at every tick
// on W worker processes (bench/fixtures/tick-worker.ts), each build on a fresh database of the
// same server (the earlier build's workers install their own schema), alternating build by
// build, round after round. Per build and round: the measured ticks of bench/lib/scheduler.ts
// (tick -> last claim, handler start p50 / p99 / max, runs recorded by, exactly once), then
// the medians and their ratio to the earlier build, with the load average.
//
//   npm run build    # this build's dist/, which the workers run
//   git worktree add /tmp/earlier <commit> && (cd /tmp/earlier && npm ci && npm run build)
//   DATABASE_URL=postgres://... npx tsx bench/scheduler-compare.ts /tmp/earlier/dist [rounds=2]
//   (without DATABASE_URL an embedded server; BENCH_SCHED_JOBS, _WORKERS, _EVERY, _WARMUP,
//   _TICKS as for the scheduler part, bench/lib/config.ts)
import { existsSync, mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { probeDatabaseClock } from '../src/testing/database-clock.js';
import { createTestDatabase, startEmbeddedPostgres, type EmbeddedPostgres } from '../src/testing.js';
import { readConfig } from './lib/config.js';
import { measureTicks } from './lib/scheduler.js';
import { Session } from './lib/session.js';
import { median, round } from './lib/stats.js';
import type { TickResult } from './lib/tick-analysis.js';

const earlier = process.argv[2];
const rounds = Number(process.argv[3] ?? 2);
if (!earlier || !existsSync(`${earlier}/index.js`)) throw new Error(`usage: scheduler-compare.ts <an earlier build's dist/ directory> [rounds] (no ${earlier}/index.js)`);
if (!existsSync(new URL('../dist/index.js', import.meta.url))) throw new Error('this build has no dist/: npm run build first');
if (!Number.isInteger(rounds) || rounds < 1) throw new Error(`rounds must be a positive integer (got ${process.argv[3]})`);

const settings = readConfig().scheduler;
const builds = [
  { label: 'earlier', dist: earlier },
  { label: 'this', dist: undefined },
] as const;
const progress = (message: string) => process.stderr.write(`[compare] ${message}\n`);

let server: EmbeddedPostgres | undefined;
if (!process.env.DATABASE_URL) server = await startEmbeddedPostgres({ settings: { fsync: 'on', synchronous_commit: 'on' } });
const serverUrl = process.env.DATABASE_URL ?? (server as EmbeddedPostgres).connectionString;
const loadStart = os.loadavg();
const ticks = new Map<string, TickResult[]>(builds.map((b) => [b.label, []]));
const loads: string[] = [];
try {
  for (let r = 0; r < rounds; r++) {
    for (const build of r % 2 === 0 ? builds : [...builds].reverse()) {
      const database = await createTestDatabase(serverUrl, 'leasehold_compare');
      const admin = await Session.open(database.url, 'bench-compare');
      try {
        const probe = await probeDatabaseClock({ query: async (text) => ({ rows: await admin.query(text) }) }, { samples: 9, now: () => performance.timeOrigin + performance.now() });
        if (build.dist) process.env.BENCH_WORKER_DIST = build.dist;
        else delete process.env.BENCH_WORKER_DIST;
        const before = os.loadavg()[0] as number;
        progress(`round ${r + 1}, ${build.label} build: ${settings.jobs} jobs every ${settings.everySeconds}s on ${settings.workers} workers (load ${before.toFixed(2)})`);
        const result = await measureTicks(database.url, settings, admin, -probe.offsetMs, progress);
        loads.push(`${build.label} ${before.toFixed(2)}->${(os.loadavg()[0] as number).toFixed(2)}`);
        for (const tick of result.ticks) {
          progress(
            `  ${tick.slot.slice(11, 23)}: last claim ${tick.wallMs.toFixed(0)} ms, start p50 ${tick.startLatencyMs.p50} p99 ${tick.startLatencyMs.p99} ms, ` +
              `exactly once ${tick.verification.exactlyOnce}/${settings.jobs}, doubled ${tick.verification.doubled}`,
          );
        }
        (ticks.get(build.label) as TickResult[]).push(...result.ticks);
      } finally {
        delete process.env.BENCH_WORKER_DIST;
        await admin.close();
        await database.drop();
      }
    }
  }
} finally {
  await server?.stop();
}

const row = (label: string) => {
  const t = ticks.get(label) as TickResult[];
  return {
    ticks: t.length,
    lastClaimMs: median(t.map((x) => x.wallMs)),
    p50: median(t.map((x) => x.startLatencyMs.p50)),
    p99: median(t.map((x) => x.startLatencyMs.p99)),
    max: median(t.map((x) => x.startLatencyMs.max)),
    recordedBy: median(t.map((x) => x.lastFinishMs)),
    exactlyOnce: t.every((x) => x.verification.exactlyOnce === settings.jobs && x.verification.doubled === 0),
  };
};
const before = row('earlier');
const after = row('this');
const ratio = (a: number, b: number) => `${(a / b).toFixed(2)}x`;
const lines = [
  `${settings.jobs.toLocaleString('en-US')} jobs due at every tick (every ${settings.everySeconds}s) on ${settings.workers} worker processes, ` +
    `${rounds} round(s) per build alternating, ${settings.measuredTicks} measured tick(s) each (medians); ${server ? 'embedded PostgreSQL' : 'DATABASE_URL'}; ` +
    `load average ${loadStart.map((n) => n.toFixed(2)).join(' ')} -> ${os.loadavg().map((n) => n.toFixed(2)).join(' ')} (${os.cpus().length} CPUs); per build: ${loads.join(', ')}`,
  '',
  '| build | tick -> last claim ms | handler start p50 ms | p99 ms | max ms | runs recorded by ms | every slot exactly once |',
  '| --- | ---: | ---: | ---: | ---: | ---: | --- |',
  `| earlier (${earlier}) | ${round(before.lastClaimMs, 0)} | ${round(before.p50, 0)} | ${round(before.p99, 0)} | ${round(before.max, 0)} | ${round(before.recordedBy, 0)} | ${before.exactlyOnce ? 'yes' : 'NO'} |`,
  `| this | ${round(after.lastClaimMs, 0)} | ${round(after.p50, 0)} | ${round(after.p99, 0)} | ${round(after.max, 0)} | ${round(after.recordedBy, 0)} | ${after.exactlyOnce ? 'yes' : 'NO'} |`,
  `| this / earlier | ${ratio(after.lastClaimMs, before.lastClaimMs)} | ${ratio(after.p50, before.p50)} | ${ratio(after.p99, before.p99)} | ${ratio(after.max, before.max)} | ${ratio(after.recordedBy, before.recordedBy)} | |`,
];
process.stdout.write(`${lines.join('\n')}\n`);
const dir = new URL('./results/', import.meta.url);
mkdirSync(dir, { recursive: true });
const stamp = new Date().toISOString().replace(/[:.]/g, '-');
writeFileSync(new URL(`scheduler-compare-${stamp}.json`, dir), JSON.stringify({ settings, rounds, earlier, loadStart, loadEnd: os.loadavg(), loads, ticks: Object.fromEntries(ticks) }, null, 2));
if (!before.exactlyOnce || !after.exactlyOnce) process.exitCode = 1;
