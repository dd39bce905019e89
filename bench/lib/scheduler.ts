// The scheduler benchmark: many jobs due at the same tick, several worker processes.
//
// `workers` child processes (bench/fixtures/tick-worker.ts) each run startWorker() with the
// same `jobs` job definitions, all `every: <interval>`, so every job is due at every tick.
// Once every worker is ready, the first `warmupTicks` ticks are left alone and the next
// `measuredTicks` are measured:
//   - wall time: the slot instant -> the last claim statement that claimed a slot
//     returned, over all workers. Slots are database time; they are mapped onto the local
//     clock (which all processes on this machine share) with the offset measured here.
//   - statements per worker per tick: every statement a worker sent from 1 s before the slot
//     to 1 s before the next one, by the leasehold function it called.
//   - tick-to-start latency: each handler's start minus its slot, every run of the tick.
//   - in the database: leasehold.runs has exactly one row per (job, slot), for every job.
// The interval must leave time to finish the previous tick's runs (finish_runs, up to 2,000 runs a statement):
// a job whose previous run still holds its lease is skipped, which the check would report.
// Then: one claim of all the jobs alone with auto_explain (claim-probe.ts), and the idle part:
// a worker holding `jobs` definitions whose next slot is months away, and one holding a single
// definition for comparison, sampled for RSS and CPU over `idleSeconds`.
import { performance } from 'node:perf_hooks';
import { probeDatabaseClock } from '../../src/testing/database-clock.js';
import { killAll } from '../../src/testing/json-lines.js';
import type { SchedulerConfig } from './config.js';
import { probeClaim, type ClaimProbeResult } from './claim-probe.js';
import { Session } from './session.js';
import { max, round, sleep } from './stats.js';
import { analyseTick, recordedStarts, TICK_PREFIX, verifySlot, waitForRuns, WINDOW_LEAD_MS, type TickResult } from './tick-analysis.js';
import type { UsageSample } from './tick-protocol.js';
import { dump, spawnWorker, stopWorkers, usage, waitReady } from './tick-workers.js';

/** Far away: the idle workers never claim anything. */
export const IDLE_CRON = '0 0 1 1 *';

/** A worker retries the jobs another worker was still committing this many times at most (src/worker/engine.ts RETRY_DELAYS_MS). */
export const MAX_CLAIM_RETRIES = 3;

/** See bench/lib/config.ts (BENCH_SCHED_*). */
export type SchedulerSettings = SchedulerConfig;

export interface IdleResult {
  jobs: number;
  schedule: string;
  windowSeconds: number;
  /** startWorker() with every definition, ms. */
  startMs: number;
  rssStartMiB: number;
  rssEndMiB: number;
  heapUsedEndMiB: number;
  /** After a forced full garbage collection at the end: what the definitions really retain. */
  rssAfterGcMiB: number;
  heapUsedAfterGcMiB: number;
  /** CPU time (user + system) per minute of wall time, ms. */
  cpuMsPerMinute: number;
  /** The same as a share of one core. */
  cpuPercent: number;
  statementsPerMinute: number;
}

export interface SchedulerResults {
  settings: SchedulerSettings;
  /** Local clock minus database clock (ms), from the shortest of several round trips. */
  clockOffsetMs: number;
  clockRoundTripMs: number;
  /** Per tick worker: startWorker() with every definition (validation, register_jobs, ...), ms. */
  workerStartMs: number[];
  /** What the tick workers ran: 'dist' (the compiled package) or 'src' (the sources through tsx). */
  workerBuild: string;
  /** Per tick worker: RSS after the measured ticks, MiB. */
  workerRssMiB: number[];
  /** The measured ticks (the workers' default claimAhead, 'auto'). */
  ticks: TickResult[];
  /** The same ticks with claimAhead '0ms', measured first in the same run: the baseline of the start latency. */
  baselineTicks: TickResult[];
  /** The ticks between all workers ready and the measured ones: the first tick after a start (every deploy). */
  warmupTicks: TickResult[];
  /** The same for the '0ms' baseline (absent in results written before it was kept). */
  baselineWarmupTicks?: TickResult[];
  /** Why finish_runs statements failed, over the whole tick phase, by message. */
  finishErrors: Record<string, number>;
  probe: ClaimProbeResult;
  idle: IdleResult;
  idleBaseline: IdleResult;
}

/** Local minus database clock, from the sample with the shortest round trip (epoch ms with sub-ms resolution). */
async function measureClockOffset(session: Session): Promise<{ offsetMs: number; roundTripMs: number }> {
  const probe = await probeDatabaseClock({ query: async (text) => ({ rows: await session.query(text) }) }, { samples: 9, now: () => performance.timeOrigin + performance.now() });
  return { offsetMs: -probe.offsetMs, roundTripMs: probe.roundTripMs };
}

const mib = (bytes: number) => round(bytes / 2 ** 20, 1);

const jobNames = (count: number, prefix: string) => Array.from({ length: count }, (_, i) => `${prefix}-${String(i).padStart(5, '0')}`);

export async function measureTicks(
  connectionString: string,
  settings: SchedulerSettings,
  admin: Session,
  offsetMs: number,
  progress: (message: string) => void,
  /** The workers' claimAhead option (CLAIM_AHEAD); undefined: the build's default. */
  claimAhead?: string,
): Promise<{ ticks: TickResult[]; warmupTicks: TickResult[]; finishErrors: Record<string, number>; workerStartMs: number[]; workerRssMiB: number[]; workerBuild: string }> {
  const intervalMs = settings.everySeconds * 1000;
  const holders = Array.from({ length: settings.workers }, (_, i) => `bench-tick-${i}`);
  const children = holders.map((holder) =>
    spawnWorker(connectionString, holder, { PREFIX: TICK_PREFIX, JOBS: String(settings.jobs), EVERY: `${settings.everySeconds}s`, ...(claimAhead ? { CLAIM_AHEAD: claimAhead } : {}) }),
  );
  try {
    const ready = await Promise.all(children.map(waitReady));
    const allReadyDb = max(ready.map((r) => r.at)) - offsetMs;
    progress(`${settings.workers} workers ready; startWorker() with ${settings.jobs.toLocaleString('en-US')} jobs took ${ready.map((r) => r.startMs.toFixed(0)).join(', ')} ms`);
    // The first tick strictly after every worker was ready, then the warm-up ticks.
    const readySlot = (Math.floor(allReadyDb / intervalMs) + 1) * intervalMs;
    const warmupSlots = Array.from({ length: settings.warmupTicks }, (_, i) => new Date(readySlot + i * intervalMs));
    const firstSlot = readySlot + settings.warmupTicks * intervalMs;
    const slots = Array.from({ length: settings.measuredTicks }, (_, i) => new Date(firstSlot + i * intervalMs));
    const lastSlotLocal = (slots[slots.length - 1] as Date).getTime() + offsetMs;
    progress(
      `measuring the ticks at ${slots.map((s) => s.toISOString().slice(11, 23)).join(', ')} UTC after ${settings.warmupTicks} warm-up tick(s) ` +
        `(about ${Math.ceil((lastSlotLocal - Date.now()) / 1000)} s from now)`,
    );
    await sleep(Math.max(0, lastSlotLocal - Date.now()) + 200);
    // Every run of the measured ticks recorded, but read the statements before the next tick.
    const finished = await waitForRuns(admin, slots, settings.jobs, performance.now() + Math.max(0, lastSlotLocal + intervalMs - WINDOW_LEAD_MS - 300 - Date.now()));
    if (!finished) progress('  not every run of the measured ticks had finished before the next tick');
    await sleep(300); // trailing statements of the last tick (record_missed, ...)
    const dumps = await Promise.all(children.map(dump));
    const rss = await Promise.all(children.map((child) => usage(child)));
    await stopWorkers(children);
    const analyse = async (slot: Date) =>
      analyseTick(slot.getTime(), offsetMs, intervalMs, dumps, await verifySlot(admin, slot, settings.jobs, holders), await recordedStarts(admin, slot));
    const warmupTicks: TickResult[] = [];
    for (const slot of warmupSlots) warmupTicks.push(await analyse(slot));
    const ticks: TickResult[] = [];
    for (const slot of slots) ticks.push(await analyse(slot));
    const finishErrors: Record<string, number> = {};
    for (const d of dumps) for (const [message, n] of Object.entries(d.finishErrors)) finishErrors[message] = (finishErrors[message] ?? 0) + n;
    return { ticks, warmupTicks, finishErrors, workerStartMs: ready.map((r) => round(r.startMs, 0)), workerRssMiB: rss.map((u) => mib(u.rss)), workerBuild: ready[0]?.build ?? 'src' };
  } finally {
    await killAll(children);
  }
}

function idleResult(jobs: number, startMs: number, first: UsageSample, last: UsageSample, collected: UsageSample): IdleResult {
  const wallMs = last.at - first.at;
  const cpuMs = (last.cpuUserMicros + last.cpuSystemMicros - first.cpuUserMicros - first.cpuSystemMicros) / 1000;
  return {
    jobs,
    schedule: `cron '${IDLE_CRON}'`,
    windowSeconds: round(wallMs / 1000, 1),
    startMs: round(startMs, 0),
    rssStartMiB: mib(first.rss),
    rssEndMiB: mib(last.rss),
    heapUsedEndMiB: mib(last.heapUsed),
    rssAfterGcMiB: mib(collected.rss),
    heapUsedAfterGcMiB: mib(collected.heapUsed),
    cpuMsPerMinute: round((cpuMs / wallMs) * 60_000, 1),
    cpuPercent: round((cpuMs / wallMs) * 100, 3),
    statementsPerMinute: round(((last.statements - first.statements) / wallMs) * 60_000, 1),
  };
}

async function measureIdle(
  connectionString: string,
  settings: SchedulerSettings,
  progress: (message: string) => void,
): Promise<{ idle: IdleResult; idleBaseline: IdleResult }> {
  const big = spawnWorker(connectionString, 'bench-idle', { PREFIX: 'idle', JOBS: String(settings.jobs), CRON: IDLE_CRON });
  const one = spawnWorker(connectionString, 'bench-idle-one', { PREFIX: 'idle-one', JOBS: '1', CRON: IDLE_CRON });
  try {
    const [bigReady, oneReady] = await Promise.all([waitReady(big), waitReady(one)]);
    // Let start-up settle (its garbage is left for V8 to collect when it wants, as in production).
    await sleep(2_000);
    const [bigFirst, oneFirst] = await Promise.all([usage(big), usage(one)]);
    progress(
      `idle workers (${settings.jobs.toLocaleString('en-US')} jobs, started in ${bigReady.startMs.toFixed(0)} ms, and 1 job; cron '${IDLE_CRON}'): ` +
        `sampling for ${settings.idleSeconds} s`,
    );
    await sleep(settings.idleSeconds * 1000);
    const [bigLast, oneLast] = await Promise.all([usage(big), usage(one)]);
    const [bigGc, oneGc] = await Promise.all([usage(big, true), usage(one, true)]);
    return {
      idle: idleResult(settings.jobs, bigReady.startMs, bigFirst, bigLast, bigGc),
      idleBaseline: idleResult(1, oneReady.startMs, oneFirst, oneLast, oneGc),
    };
  } finally {
    await killAll([big, one]);
  }
}

export async function measureScheduler(options: {
  connectionString: string;
  settings: SchedulerSettings;
  progress: (message: string) => void;
}): Promise<SchedulerResults> {
  const { connectionString, settings, progress } = options;
  const admin = await Session.open(connectionString, 'bench-scheduler');
  try {
    const clock = await measureClockOffset(admin);
    progress(
      `scheduler: ${settings.jobs.toLocaleString('en-US')} jobs every ${settings.everySeconds}s on ${settings.workers} worker processes; ` +
        `local - database clock = ${clock.offsetMs.toFixed(2)} ms (round trip ${clock.roundTripMs.toFixed(2)} ms)`,
    );
    // the baseline first: the same workers never claiming ahead, then with the default
    progress(`  baseline: claimAhead '0ms' (every tick claimed at its slot)`);
    const baseline = await measureTicks(connectionString, settings, admin, clock.offsetMs, progress, '0ms');
    for (const tick of baseline.ticks) {
      progress(`  baseline tick ${tick.slot.slice(11, 23)}: start latency p50 ${tick.startLatencyMs.p50} ms, p99 ${tick.startLatencyMs.p99} ms; exactly once ${tick.verification.exactlyOnce}/${settings.jobs}`);
    }
    progress(`  the default: claimAhead 'auto'`);
    const { ticks, warmupTicks, finishErrors, workerStartMs, workerRssMiB, workerBuild } = await measureTicks(connectionString, settings, admin, clock.offsetMs, progress);
    for (const tick of [...warmupTicks, ...ticks]) {
      const v = tick.verification;
      progress(
        `  ${warmupTicks.includes(tick) ? 'warm-up' : 'measured'} tick ${tick.slot.slice(11, 23)}: last claim ${tick.wallMs.toFixed(1)} ms after the slot; ` +
          `claim statements per worker ${tick.claimStatementsPerWorker.join(', ')}; start latency p50 ${tick.startLatencyMs.p50} ms, p99 ${tick.startLatencyMs.p99} ms; ` +
          `exactly once ${v.exactlyOnce}/${settings.jobs}, missing ${v.missing} (skipped ${v.missingSkipped}), doubled ${v.doubled}; ` +
          `runs recorded by ${tick.lastFinishMs.toFixed(0)} ms, ${tick.finishFailed} runs not recorded` +
          (tick.recordedStartErrorMs ? `; |recorded start - handler start| p50 ${tick.recordedStartErrorMs.p50} ms, p99 ${tick.recordedStartErrorMs.p99} ms, max ${tick.recordedStartErrorMs.max} ms` : ''),
      );
    }
    for (const [message, n] of Object.entries(finishErrors)) progress(`  finish_runs failed for ${n} run(s): ${message}`);
    if (settings.probeRuns > 0) progress(`one claim of all ${settings.jobs.toLocaleString('en-US')} jobs, alone, with auto_explain: ${settings.probeRuns} run(s)`);
    const probe = await probeClaim({ connectionString, jobNames: jobNames(settings.jobs, TICK_PREFIX), everySeconds: settings.everySeconds, runs: settings.probeRuns });
    for (const run of probe.runs) {
      progress(
        `  round trip ${run.roundTripMs} ms; server ${run.serverMs ?? '?'} ms = claim part ${run.claimPartMs ?? '?'} ms + report part ${run.reportPartMs ?? '?'} ms (${run.reportPartJoin ?? '?'})`,
      );
    }
    if (probe.note) progress(`  ${probe.note}`);
    const { idle, idleBaseline } = await measureIdle(connectionString, settings, progress);
    progress(
      `  idle, ${idle.jobs} jobs: RSS ${idle.rssEndMiB} MiB (${idle.rssAfterGcMiB} after GC), CPU ${idle.cpuMsPerMinute} ms/min; ` +
        `1 job: RSS ${idleBaseline.rssEndMiB} MiB, CPU ${idleBaseline.cpuMsPerMinute} ms/min`,
    );
    return {
      settings,
      clockOffsetMs: round(clock.offsetMs, 2),
      clockRoundTripMs: round(clock.roundTripMs, 2),
      workerStartMs,
      workerBuild,
      workerRssMiB,
      ticks,
      baselineTicks: baseline.ticks,
      warmupTicks,
      baselineWarmupTicks: baseline.warmupTicks,
      finishErrors,
      probe,
      idle,
      idleBaseline,
    };
  } finally {
    await admin.close();
  }
}
