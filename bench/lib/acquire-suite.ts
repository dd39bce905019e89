// The acquire part of the benchmark: leasehold's claim path against the classic transaction it
// replaces, on one database. Contested acquire + release throughput and latency (2, 8 and 32
// connections by default), WAL per declined acquisition, and takeover time after a SIGKILLed
// holder with and without the liveness session.
import { classicPattern } from './classic.js';
import type { BenchConfig } from './config.js';
import { CONTESTED_TTL, compareContested, runContestedCell, type CellRun } from './contested.js';
import { leaseholdPattern } from './leasehold-sql.js';
import type { ClaimPattern } from './pattern.js';
import type { AcquireResults } from './report.js';
import { Session } from './session.js';
import { measureTakeover, POLL_INTERVAL_MS } from './takeover.js';
import { measureDeclinedWal } from './wal.js';

const CONTESTED_NAME = 'bench-contested';
const LIVENESS_TTL_SECONDS = 30;
const TTL_ONLY_TTL_SECONDS = 2;

export async function runAcquireSuite(url: string, config: BenchConfig, progress: (message: string) => void): Promise<AcquireResults> {
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
    contested: { comparisons, cells: runs.map((run) => run.result) },
    wal: { classic: walClassic, leasehold: walLeasehold },
    takeover: { liveness, ttlOnly },
  };
}
