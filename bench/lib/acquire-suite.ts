// The acquire part of the benchmark: leasehold's claim path against the alternatives, on one
// database in one run: the classic transaction it replaces (the baseline of every ratio), a
// PostgreSQL session advisory lock and a Redis lock (SET NX PX, on a private redis-server when
// one is installed). Contested acquire + release throughput and latency (2, 8 and 32
// connections by default), WAL per declined acquisition, and takeover time after a SIGKILLed
// holder (leasehold with and without liveness, advisory lock, Redis TTL).
import { advisoryPattern } from './advisory.js';
import { classicPattern } from './classic.js';
import type { BenchConfig } from './config.js';
import { CONTESTED_TTL, compareContested, runContestedCell, type CellRun } from './contested.js';
import { leaseholdPattern } from './leasehold-sql.js';
import { patternInfo, PATTERN_IDS, type ClaimConnection, type ClaimPattern, type PatternId, type PatternInfo } from './pattern.js';
import { findRedisServer, redisPattern, RedisSession, startRedisServer, type RedisServer } from './redis.js';
import type { AcquireResults, RedisStatus } from './results.js';
import { Session } from './session.js';
import {
  advisoryScenario,
  leaseholdScenario,
  measureTakeover,
  POLL_INTERVAL_MS,
  redisScenario,
  type TakeoverResult,
  type TakeoverScenario,
} from './takeover.js';
import { measureDeclinedWal, walBytes, type WalResult } from './wal.js';

const CONTESTED_NAME = 'bench-contested';
const LIVENESS_TTL_SECONDS = 30;
const TTL_ONLY_TTL_SECONDS = 2;

/** One pattern with its connections bound: what the cell loop needs, whatever the connection type. */
interface Contender {
  info: PatternInfo;
  table: string | null;
  /** Frees the lock or lease again (on the pattern's admin connection). */
  reset(): Promise<void>;
  cell(clients: number, seconds: number, round: number): Promise<CellRun>;
  close(): Promise<void>;
}

async function contender<C extends ClaimConnection>(pattern: ClaimPattern<C>, open: (label: string) => Promise<C>): Promise<Contender> {
  const admin = await open(`bench-admin-${pattern.id}`);
  const walPosition = admin instanceof Session ? () => walBytes(admin) : undefined;
  return {
    info: patternInfo(pattern),
    table: pattern.table,
    reset: () => pattern.prepare(admin, CONTESTED_NAME),
    cell: (clients, seconds, round) => runContestedCell({ pattern, open, name: CONTESTED_NAME, clients, seconds, round, walPosition }),
    close: () => admin.close(),
  };
}

/** Starts the private redis-server, or says why Redis is left out. */
async function startRedis(enabled: boolean, progress: (message: string) => void): Promise<{ server: RedisServer | null; status: RedisStatus }> {
  if (!enabled) {
    const reason = 'BENCH_REDIS=off';
    progress(`redis: skipped (${reason})`);
    return { server: null, status: { status: 'skipped', reason } };
  }
  const binary = findRedisServer();
  if (!binary) {
    const reason = 'redis-server not installed';
    progress(`redis: skipped (${reason})`);
    return { server: null, status: { status: 'skipped', reason } };
  }
  try {
    const server = await startRedisServer(binary);
    progress(`redis: started ${binary} (Redis ${server.version}) on 127.0.0.1:${server.port}, pid ${server.pid ?? '?'}, persistence off`);
    return { server, status: { status: 'measured', binary, version: server.version, port: server.port } };
  } catch (error) {
    const reason = `redis-server could not be started: ${error instanceof Error ? error.message : String(error)}`;
    progress(`redis: skipped (${reason})`);
    return { server: null, status: { status: 'skipped', reason } };
  }
}

export async function runAcquireSuite(url: string, config: BenchConfig, progress: (message: string) => void): Promise<AcquireResults> {
  const { server: redis, status: redisStatus } = await startRedis(config.redis, progress);
  const contenders: Contender[] = [];
  try {
    const openSession = (label: string) => Session.open(url, label);
    contenders.push(await contender(classicPattern, openSession));
    contenders.push(await contender(leaseholdPattern, openSession));
    contenders.push(await contender(advisoryPattern, openSession));
    if (redis) contenders.push(await contender(redisPattern, (label) => RedisSession.open(redis.port, label)));
    const measured: PatternId[] = PATTERN_IDS.filter((id) => contenders.some((c) => c.info.id === id));
    const byId = (id: PatternId): Contender => {
      const found = contenders.find((c) => c.info.id === id);
      if (!found) throw new Error(`no contender ${id}`);
      return found;
    };
    const tables = contenders.flatMap((c) => (c.table ? [c.table] : []));
    const vacuumSession = await Session.open(url, 'bench-vacuum');
    // Between cells: every lock and lease free again and the tables vacuumed, so no cell
    // inherits the previous one's dead row versions.
    const resetBetweenCells = async () => {
      for (const c of contenders) await c.reset();
      await vacuumSession.query(`vacuum ${tables.join(', ')}`);
    };

    const runs: CellRun[] = [];
    const order: string[] = [];
    try {
      if (config.warmupSeconds > 0) {
        progress(`warm-up: ${config.warmupSeconds} s per pattern (${measured.join(', ')})`);
        for (const c of contenders) {
          await resetBetweenCells();
          await c.cell(8, config.warmupSeconds, 0);
        }
      }
      for (let roundNo = 1; roundNo <= config.rounds; roundNo++) {
        // Interleave the patterns cell by cell and reverse their order every other round, so
        // drift on a noisy machine falls on all of them alike.
        const sequence = roundNo % 2 === 1 ? measured : [...measured].reverse();
        for (const clients of config.clientCounts) {
          for (const id of sequence) {
            await resetBetweenCells();
            const run = await byId(id).cell(clients, config.cellSeconds, roundNo);
            runs.push(run);
            order.push(`r${roundNo} ${id}×${clients}`);
            const r = run.result;
            progress(
              `round ${roundNo}/${config.rounds} ${id.padEnd(9)} ${String(clients).padStart(2)} clients: ` +
                `${r.decisionsPerSecond.toFixed(0)} decisions/s, p50 ${r.latencyMs.p50.toFixed(2)} ms, p99 ${r.latencyMs.p99.toFixed(2)} ms, ${r.wins} wins`,
            );
          }
        }
      }
      await resetBetweenCells();
    } finally {
      await vacuumSession.close();
    }
    const comparisons = compareContested(runs, config.clientCounts, measured);

    const wal: WalResult[] = [];
    const walPatterns = [classicPattern, leaseholdPattern, advisoryPattern];
    progress(`WAL per declined acquisition: ${config.walTrials} × ${config.walAttempts} losing claims per pattern (${walPatterns.map((p) => p.id).join(', ')})`);
    for (const pattern of walPatterns) {
      wal.push(await measureDeclinedWal({ pattern, connectionString: url, attempts: config.walAttempts, trials: config.walTrials }));
    }

    const takeover: TakeoverResult[] = [];
    const measure = async (scenario: TakeoverScenario, describe: (run: TakeoverResult['runs'][number]) => string) => {
      progress(`takeover after SIGKILL, ${scenario.label}${scenario.ttlSeconds === null ? ', no TTL' : `, TTL ${scenario.ttlSeconds}s`}: ${config.takeoverRuns} runs`);
      takeover.push(
        await measureTakeover({ scenario, runs: config.takeoverRuns, onRun: (run, index) => progress(`  run ${index + 1}: ${describe(run)}`) }),
      );
    };
    await measure(await leaseholdScenario(url, true, LIVENESS_TTL_SECONDS), (run) => `${run.takeoverMs.toFixed(1)} ms (${run.polls} polls)`);
    await measure(
      await leaseholdScenario(url, false, TTL_ONLY_TTL_SECONDS),
      (run) => `${run.takeoverMs.toFixed(1)} ms, ${run.afterExpiryMs} ms after expires_at`,
    );
    await measure(await advisoryScenario(url), (run) => `${run.takeoverMs.toFixed(1)} ms (${run.polls} polls)`);
    if (redis) {
      await measure(
        await redisScenario(redis.port, TTL_ONLY_TTL_SECONDS),
        (run) => `${run.takeoverMs.toFixed(1)} ms, ${run.afterExpiryMs} ms after the PTTL expiry`,
      );
    }

    return {
      settings: {
        cellSeconds: config.cellSeconds,
        rounds: config.rounds,
        clientCounts: config.clientCounts,
        warmupSeconds: config.warmupSeconds,
        contestedTtl: CONTESTED_TTL,
        walAttempts: config.walAttempts,
        walTrials: config.walTrials,
        takeoverRuns: config.takeoverRuns,
        pollIntervalMs: POLL_INTERVAL_MS,
        order,
      },
      patterns: contenders.map((c) => c.info),
      redis: redisStatus,
      contested: { comparisons, cells: runs.map((run) => run.result) },
      wal,
      takeover,
    };
  } finally {
    await Promise.allSettled(contenders.map((c) => c.close()));
    if (redis) {
      await redis.stop();
      progress('redis: stopped the private redis-server');
    }
  }
}
