// One benchmark run: opens the database (DATABASE_URL's server, or an embedded one), measures
// the chosen parts on it, prints the tables, checks the targets and writes the results. Every
// child process is killed and the database dropped (or the embedded server stopped) however
// the run ends; the process then exits by itself, with code 1 on failure.
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import { runAcquireSuite } from './acquire-suite.js';
import { readConfig, type BenchPart } from './config.js';
import { openBenchDatabase } from './database.js';
import { describeMachine } from './machine.js';
import { checkTargets, renderReport } from './report.js';
import { writeResults, type BenchResults } from './results.js';
import { measureHeartbeats } from './heartbeats.js';
import { measureScheduler } from './scheduler.js';
import { measureReads } from './reads.js';
import { measureDashboard } from './dashboard.js';
import { round } from './stats.js';
import { measureTickSuite, tickSettings } from './tick-suite.js';

const progress = (message: string) => process.stderr.write(`[bench] ${message}\n`);

/** Runs `parts` (default: BENCH_PARTS, else every part). */
export async function runBench(parts?: BenchPart[]): Promise<void> {
  const config = readConfig();
  const chosen = parts ?? config.parts;
  const date = new Date();
  const started = performance.now();
  const loadAtStart = os.loadavg();

  progress(config.databaseUrl ? 'using the server at DATABASE_URL' : 'starting an embedded PostgreSQL server (fsync on)');
  const database = await openBenchDatabase(config.databaseUrl);
  // Interrupted: drop the bench database (DATABASE_URL) or stop the embedded server, then exit;
  // exiting SIGKILLs every child still running (holders, workers, the private redis-server:
  // child.ts). Closing gets 15 s, then the process exits anyway; a second signal exits at once.
  let interrupted = false;
  const onSignal = (signal: NodeJS.Signals) => {
    if (interrupted) process.exit(130);
    interrupted = true;
    progress(`${signal}: ${database.serverKind === 'embedded' ? 'stopping the embedded server' : 'dropping the bench database'}, then exiting`);
    setTimeout(() => process.exit(130), 15_000).unref();
    void database.close().finally(() => process.exit(130));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  try {
    const url = database.url;
    const machine = await describeMachine(url, database.serverKind, date);
    progress(`${machine.cpus} CPUs, ${machine.postgres.split(' on ')[0]}, fsync=${machine.fsync}; measuring ${chosen.join(', ')}`);

    const acquire = chosen.includes('acquire') ? await runAcquireSuite(url, config, progress) : undefined;
    const scheduler = chosen.includes('scheduler') ? await measureScheduler({ connectionString: url, settings: config.scheduler, progress }) : undefined;
    const tick = chosen.includes('tick') ? await measureTickSuite(url, tickSettings(), progress) : undefined;
    const heartbeats = chosen.includes('heartbeats') ? await measureHeartbeats(url, config.heartbeats, progress) : undefined;
    const reads = chosen.includes('reads') ? await measureReads(url, config.reads, progress) : undefined;
    const dashboard = chosen.includes('dashboard') ? await measureDashboard(url, config.dashboard, progress) : undefined;

    const partial: Omit<BenchResults, 'targets'> = {
      benchmark: 'leasehold',
      parts: chosen,
      machine,
      ...(acquire ? { acquire } : {}),
      ...(scheduler ? { scheduler } : {}),
      ...(tick ? { tick } : {}),
      ...(heartbeats ? { heartbeats } : {}),
      ...(reads ? { reads } : {}),
      ...(dashboard ? { dashboard } : {}),
      loadAverage: { start: loadAtStart.map((n) => round(n, 2)), end: os.loadavg().map((n) => round(n, 2)) },
      durationSeconds: round((performance.now() - started) / 1000, 1),
    };
    const results: BenchResults = { ...partial, targets: checkTargets(partial) };
    process.stdout.write(`\n${renderReport(results)}\n`);
    const written = await writeResults(results);
    progress(`wrote ${written.join(', ')}`);
  } catch (error) {
    // After an interrupt, connections fail as the database goes away: not worth a stack trace.
    if (!interrupted) {
      process.exitCode = 1;
      throw error;
    }
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await database.close();
    // Nothing should be left running; if something is (a stuck socket), do not hang.
    setTimeout(() => {
      progress('still running 10 s after the end: exiting');
      process.exit(process.exitCode ?? 0);
    }, 10_000).unref();
  }
}
