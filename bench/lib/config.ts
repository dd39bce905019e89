// Benchmark settings, from environment variables so a quick or a long run needs no code edit.
//   BENCH_SECONDS          seconds per contested cell (default 4)
//   BENCH_ROUNDS           rounds over all cells, alternating which pattern goes first (default 2)
//   BENCH_CLIENTS          comma-separated client counts (default 2,8,32)
//   BENCH_WARMUP_SECONDS   untimed warm-up per pattern before the first round (default 1)
//   BENCH_WAL_ATTEMPTS     declined acquisitions per WAL trial (default 2000)
//   BENCH_WAL_TRIALS       WAL trials per pattern; the median is reported (default 3)
//   BENCH_TAKEOVER_RUNS    SIGKILL takeovers per mechanism (default 5)
//   BENCH_PARTS            which parts bench/index.ts runs: acquire,scheduler,tick,heartbeats,reads,dashboard
//                          (default all)
//   BENCH_REDIS            'off' leaves the Redis lock out; by default it is measured on a
//                          private redis-server whenever one is installed
// The scheduler part (bench/lib/scheduler.ts):
//   BENCH_SCHED_JOBS       jobs, all due at every tick (default 10000)
//   BENCH_SCHED_WORKERS    worker processes (default 4)
//   BENCH_SCHED_EVERY      seconds between ticks; must leave time to finish the previous
//                          tick's runs (and a lease whose finish_runs failed lives
//                          out its 30 s TTL), or those jobs are skipped (default 40)
//   BENCH_SCHED_WARMUP     ticks after all workers are ready that are not measured (default 1)
//   BENCH_WORKER_NODE_ARGS extra node flags for the tick workers (e.g. --cpu-prof --cpu-prof-dir=DIR)
//   BENCH_SCHED_TICKS      measured ticks (default 2)
//   BENCH_SCHED_PROBES     claims of all jobs alone with auto_explain, after the ticks (default 2)
//   BENCH_IDLE_SECONDS     how long the idle workers are sampled (default 30)
// The tick part (bench/lib/tick-suite.ts): BENCH_TICK_JOBS (default 1000,10000,100000),
//   BENCH_TICK_WORKERS (default 4), BENCH_TICK_ROUNDS (rounds per path, default 3)
// The heartbeats part (bench/lib/heartbeats.ts):
//   BENCH_HEARTBEAT_LEASES   running leases on one client (default 1000)
//   BENCH_HEARTBEAT_TTL_MS   their ttl; renewed every ttl/3 (default 30000)
//   BENCH_HEARTBEAT_SECONDS  measured seconds per mode (default 60)
// The reads part (bench/lib/reads.ts):
//   BENCH_READS_QUICK        1: 2,000 jobs instead of 100,000 (CI)
//   BENCH_READS_JOBS         jobs (default 100000)
//   BENCH_READS_RUNS         runs per job, 15 min apart (default 100)
//   BENCH_READS_BASELINE_CAP seconds after which a baseline read is cut off (default 120)
//   BENCH_READS_REPEATS      timed repetitions of each read, median reported (default 3)
//   BENCH_READS_IDLE_JOBS    job definitions of the idle worker whose RSS is measured (default 10000)
// The dashboard part (bench/lib/dashboard.ts):
//   BENCH_DASHBOARD_ROUNDS   page loads per fleet, 50 and 10,000 jobs (default 3)
//   DATABASE_URL           use this server instead of an embedded one

import type { DashboardSettings } from './dashboard.js';
import type { ReadsSettings } from './reads.js';
import { FULL_SCALE, QUICK_SCALE } from './reads-seed.js';

export const BENCH_PARTS = ['acquire', 'scheduler', 'tick', 'heartbeats', 'reads', 'dashboard'] as const;
export type BenchPart = (typeof BENCH_PARTS)[number];

export interface SchedulerConfig {
  workers: number;
  jobs: number;
  everySeconds: number;
  warmupTicks: number;
  measuredTicks: number;
  probeRuns: number;
  idleSeconds: number;
}

export interface BenchConfig {
  cellSeconds: number;
  rounds: number;
  clientCounts: number[];
  warmupSeconds: number;
  walAttempts: number;
  walTrials: number;
  takeoverRuns: number;
  /** Measure the Redis lock (when redis-server is installed). */
  redis: boolean;
  parts: BenchPart[];
  scheduler: SchedulerConfig;
  heartbeats: { leases: number; ttlMs: number; windowSeconds: number };
  reads: ReadsSettings;
  dashboard: DashboardSettings;
  databaseUrl: string | undefined;
}

function positiveNumber(name: string, fallback: number, { integer = false } = {}): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0 || (integer && !Number.isInteger(value))) {
    throw new Error(`${name} must be a positive ${integer ? 'integer' : 'number'} (got "${raw}").`);
  }
  return value;
}

function nonNegativeNumber(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a number >= 0 (got "${raw}").`);
  return value;
}

function nonNegativeInteger(name: string, fallback: number): number {
  const value = nonNegativeNumber(name, fallback);
  if (!Number.isInteger(value)) throw new Error(`${name} must be an integer >= 0 (got "${process.env[name]}").`);
  return value;
}

function parts(): BenchPart[] {
  const raw = process.env.BENCH_PARTS;
  if (raw === undefined || raw.trim() === '') return [...BENCH_PARTS];
  const chosen = raw.split(',').map((part) => part.trim());
  const unknown = chosen.filter((part) => !(BENCH_PARTS as readonly string[]).includes(part));
  if (unknown.length > 0 || chosen.length === 0) {
    throw new Error(`BENCH_PARTS must be a comma-separated list of ${BENCH_PARTS.join(', ')} (got "${raw}").`);
  }
  return BENCH_PARTS.filter((part) => chosen.includes(part));
}

function clientCounts(): number[] {
  const raw = process.env.BENCH_CLIENTS;
  if (raw === undefined || raw.trim() === '') return [2, 8, 32];
  const counts = raw.split(',').map((part) => Number(part.trim()));
  if (counts.length === 0 || counts.some((n) => !Number.isInteger(n) || n < 1 || n > 200)) {
    throw new Error(`BENCH_CLIENTS must be a comma-separated list of integers from 1 to 200 (got "${raw}").`);
  }
  return counts;
}

function redisEnabled(): boolean {
  const raw = (process.env.BENCH_REDIS ?? '').trim().toLowerCase();
  if (raw === '' || raw === 'on') return true;
  if (raw === 'off') return false;
  throw new Error(`BENCH_REDIS must be on or off (got "${process.env.BENCH_REDIS}").`);
}

export function readConfig(): BenchConfig {
  return {
    cellSeconds: positiveNumber('BENCH_SECONDS', 4),
    rounds: positiveNumber('BENCH_ROUNDS', 2, { integer: true }),
    clientCounts: clientCounts(),
    warmupSeconds: nonNegativeNumber('BENCH_WARMUP_SECONDS', 1),
    walAttempts: positiveNumber('BENCH_WAL_ATTEMPTS', 2000, { integer: true }),
    walTrials: positiveNumber('BENCH_WAL_TRIALS', 3, { integer: true }),
    takeoverRuns: positiveNumber('BENCH_TAKEOVER_RUNS', 5, { integer: true }),
    redis: redisEnabled(),
    parts: parts(),
    scheduler: {
      jobs: positiveNumber('BENCH_SCHED_JOBS', 10_000, { integer: true }),
      workers: positiveNumber('BENCH_SCHED_WORKERS', 4, { integer: true }),
      everySeconds: positiveNumber('BENCH_SCHED_EVERY', 40, { integer: true }),
      warmupTicks: nonNegativeInteger('BENCH_SCHED_WARMUP', 1),
      measuredTicks: positiveNumber('BENCH_SCHED_TICKS', 2, { integer: true }),
      probeRuns: nonNegativeInteger('BENCH_SCHED_PROBES', 2),
      idleSeconds: positiveNumber('BENCH_IDLE_SECONDS', 30),
    },
    heartbeats: {
      leases: positiveNumber('BENCH_HEARTBEAT_LEASES', 1_000, { integer: true }),
      ttlMs: positiveNumber('BENCH_HEARTBEAT_TTL_MS', 30_000, { integer: true }),
      windowSeconds: positiveNumber('BENCH_HEARTBEAT_SECONDS', 60),
    },
    reads: {
      ...(process.env.BENCH_READS_QUICK === '1' ? QUICK_SCALE : FULL_SCALE),
      ...(process.env.BENCH_READS_JOBS ? { jobs: positiveNumber('BENCH_READS_JOBS', FULL_SCALE.jobs, { integer: true }) } : {}),
      ...(process.env.BENCH_READS_RUNS ? { runsPerJob: positiveNumber('BENCH_READS_RUNS', FULL_SCALE.runsPerJob, { integer: true }) } : {}),
      baselineCapSeconds: positiveNumber('BENCH_READS_BASELINE_CAP', 120),
      repeats: positiveNumber('BENCH_READS_REPEATS', 3, { integer: true }),
      idleJobs: positiveNumber('BENCH_READS_IDLE_JOBS', 10_000, { integer: true }),
    },
    dashboard: { rounds: positiveNumber('BENCH_DASHBOARD_ROUNDS', 3, { integer: true }) },
    databaseUrl: process.env.DATABASE_URL || undefined,
  };
}
