// The fault suite's driver: a fresh database, one fault proxy per worker, W worker processes,
// the nemesis, then a database snapshot and the checker. Used by faults/run.ts (the CLI) and
// test/ha/faults.test.ts (the CI tier).
import { mkdir, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { createLeasehold, silentLogger } from '../src/index.js';
import { createTestDatabase } from '../src/testing.js';
import { probeDatabaseClock } from '../src/testing/database-clock.js';
import { fakeClockEnv, findLibfaketime } from '../src/testing/faketime.js';
import { check, formatCounts } from './checker.js';
import { HaCluster } from './cluster.js';
import { mono, Rng, sleep, type FaultRecord, type HistoryLine } from './common.js';
import { clusterControl, withRetry } from './control.js';
import { installMutant } from './mutants.js';
import { Nemesis } from './nemesis.js';
import { FaultProxy } from './proxy.js';
import { describeMutant, type SuiteOptions, type SuiteReport } from './suite-options.js';
import { installTestSchema, snapshot } from './test-database.js';
import type { FailoverTopology } from './topology.js';
import { FaultWorker } from './worker-process.js';

export { preset, type HaSetup, type SuiteOptions, type SuiteReport, type Tier } from './suite-options.js';

export const RESULTS_DIR = fileURLToPath(new URL('./results/', import.meta.url));

/** Database clock minus the machine's monotonic clock (the history's clock), best of 7. */
async function dbOffset(admin: pg.Pool): Promise<{ offsetMs: number; rttMs: number }> {
  const probe = await probeDatabaseClock(admin, { samples: 7, now: mono });
  return { offsetMs: probe.offsetMs, rttMs: probe.roundTripMs };
}

/** Runs one seeded fault run and checks it. Never leaves a child process behind. */
export async function runFaultSuite(options: SuiteOptions): Promise<SuiteReport> {
  const startedAt = new Date();
  const t0 = mono();
  const phases: Record<string, number> = {};
  let phaseStart = t0;
  const phase = (name: string) => {
    const now = mono();
    phases[name] = Math.round(now - phaseStart);
    phaseStart = now;
  };
  const { log } = options;
  const notes: string[] = [];
  const rng = new Rng(options.seed);
  const history: HistoryLine[] = [];
  const processes: FaultWorker[] = [];
  const current = new Map<number, FaultWorker>();
  const proxies: FaultProxy[] = [];
  const generation = new Map<number, number>();
  const skewFaults: FaultRecord[] = [];
  let stopping = false;

  const libfaketime = options.skew ? findLibfaketime() : undefined;
  if (options.skew && !libfaketime) notes.push('clock skew skipped: libfaketime not found (apt-get install faketime)');
  if (!options.server.embedded && !options.ha) notes.push('database restarts skipped: the server is external (DATABASE_URL), not the suite\'s own');
  const haLibfaketime = options.ha ? findLibfaketime() : undefined;
  if (options.ha && !haLibfaketime) notes.push('clock steps skipped: libfaketime not found (apt-get install faketime)');
  const skewIndex = options.workers - 1;

  // the schema, then the test tables and (for a SQL mutant) the broken function
  const prepare = async (url: string) => {
    const setup = await createLeasehold({ connectionString: url, liveness: false, logger: silentLogger() });
    await setup.close();
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    // a template server is stopped right after this: a FATAL that reaches the connection while
    // the pool is ending is expected, and must not surface as an unhandled 'error' event
    pool.on('error', () => undefined);
    pool.on('connect', (client) => client.on('error', () => undefined));
    try {
      await installTestSchema(pool, options.jobs);
      if (options.mutant) {
        const changed = await installMutant(pool, options.mutant);
        notes.push(`mutant ${options.mutant}: ${describeMutant(options.mutant)}${changed.length ? ` (replaced ${changed.join(', ')} in the test database)` : ''}`);
      }
    } finally {
      await pool.end();
    }
  };
  let cluster: FailoverTopology | undefined;
  let db: { url: string; drop: () => Promise<void> };
  if (options.ha || options.topology) {
    // the suite's own cluster: the template is prepared once, both servers are copies of it;
    // a topology of packages prepares its first primary
    cluster = options.ha
      ? await HaCluster.create({ replication: options.ha.replication, libfaketime: haLibfaketime, prepare })
      : await (options.topology as NonNullable<SuiteOptions['topology']>)(prepare);
    const owned = cluster;
    db = { url: owned.url, drop: () => owned.close() };
  } else {
    db = await createTestDatabase(options.server.url, 'leasehold_faults');
  }
  const admin = new pg.Pool({ connectionString: db.url, max: 4, connectionTimeoutMillis: 5_000 });
  admin.on('error', () => undefined);
  try {
    if (!cluster) await prepare(db.url);
    const dbUrl = new URL(db.url);
    const upstreamPort = cluster ? cluster.upstreamPort : Number(dbUrl.port || 5432);
    for (let i = 0; i < options.workers; i++) {
      const proxy = new FaultProxy(upstreamPort, dbUrl.hostname === 'localhost' ? '127.0.0.1' : dbUrl.hostname);
      await proxy.listen();
      proxies.push(proxy);
      cluster?.follow(proxy);
    }

    const spawnWorker = (index: number): FaultWorker => {
      const gen = generation.get(index) ?? 0;
      generation.set(index, gen + 1);
      const name = `w${index + 1}g${gen}`;
      const url = new URL(db.url);
      url.hostname = '127.0.0.1';
      url.port = String((proxies[index] as FaultProxy).port);
      const skewed = index === skewIndex && !!libfaketime;
      const env: Record<string, string> = {
        DATABASE_URL: url.toString(),
        WORKER: name,
        JOBS: JSON.stringify(options.jobs),
        SEED: String(options.seed + index * 1_000 + gen),
        MUTANT: options.mutant ?? '',
        QUERY_TIMEOUT: '1500',
        CONNECT_TIMEOUT: '2000',
        LEASEHOLD_LOG_LEVEL: 'warn',
      };
      // stale-token probes, timed to land after a failover that lost the run's release
      if (cluster) env.PROBE_MS = '300,1500';
      if (skewed && libfaketime) Object.assign(env, fakeClockEnv(libfaketime, '+5m'));
      const proc = new FaultWorker(index, name, env, skewed, history);
      processes.push(proc);
      current.set(index, proc);
      if (skewed) skewFaults.push({ id: 0, kind: 'skew', target: name, t0: proc.record.spawnedAt, t1: Number.NaN, params: { faketime: '+5m' }, targetHeld: false });
      return proc;
    };

    const respawn = (index: number) => {
      setTimeout(() => {
        if (!stopping) spawnWorker(index);
      }, 300);
    };

    const control = clusterControl({
      current,
      proxies,
      admin,
      cluster,
      embedded: options.server.embedded,
      holdBackMs: options.ha?.holdBackMs ?? 0,
      rng,
      history,
      respawn,
    });

    phase('setup');
    log(`[faults] ${options.tier}${options.mutant ? ` (mutant ${options.mutant})` : ''}: seed ${options.seed}, ${options.workers} workers, ${options.jobs.length} jobs, ${options.seconds} s of faults`);
    for (let i = 0; i < options.workers; i++) spawnWorker(i);
    const readyBy = mono() + 90_000;
    await Promise.race([Promise.all(processes.map((p) => p.ready)), sleep(90_000)]);
    const notReady = processes.filter((p) => p.record.readyAt === null);
    if (notReady.length > 0 || mono() > readyBy) {
      throw new Error(`workers not ready: ${notReady.map((p) => `${p.name}: ${p.stderr.slice(-500)}`).join('; ')}`);
    }
    phase('workersStarting');
    const before = await dbOffset(admin);
    const windowFrom = mono() + options.warmupMs;
    await sleep(options.warmupMs);
    phase('warmup');
    const nemesis = new Nemesis(control, options.nemesis, rng);
    await nemesis.run(mono() + options.seconds * 1_000);
    phase('faults');
    for (const note of nemesis.notes) {
      if (note === 'restart') notes.push('restart faults skipped: no embedded server');
      else notes.push(`${note} faults skipped: not available on this server`);
    }
    // heal everything, let the system settle, then stop the workers gracefully
    for (const proxy of proxies) proxy.setMode('pass');
    for (const proc of current.values()) proc.signal('SIGCONT');
    await sleep(options.drainMs);
    phase('drain');
    const windowTo = mono();
    const stopAt = mono();
    stopping = true;
    await sleep(350); // a respawn scheduled just before may still start: let it
    for (const proc of processes) proc.signal('SIGTERM');
    await Promise.race([Promise.all(processes.map((p) => p.exited)), sleep(8_000)]);
    const forced = processes.filter((p) => p.alive);
    if (forced.length > 0) notes.push(`${forced.length} worker(s) did not stop within 8 s of SIGTERM and were killed: ${forced.map((p) => p.name).join(', ')}`);
    await Promise.all(processes.map((p) => p.kill()));

    phase('stop');
    const after = await withRetry(() => dbOffset(admin));
    const stepped = nemesis.log.some((f) => f.kind === 'clock-step');
    // after clock steps the offset at the end includes them: the checker wants the one before
    const dbOffsetMs = stepped ? before.offsetMs : (before.offsetMs + after.offsetMs) / 2;
    if (!stepped && Math.abs(before.offsetMs - after.offsetMs) > 50) notes.push(`database clock offset drifted by ${Math.round(after.offsetMs - before.offsetMs)} ms during the run`);
    const data = await withRetry(() => snapshot(admin));
    const faults = [...skewFaults.map((f) => ({ ...f, t1: stopAt })), ...nemesis.log];
    const processRecords = processes.map((p) => p.record);
    const result = check({
      history,
      faults,
      processes: processRecords,
      db: data,
      config: { jobs: options.jobs, ttlMs: options.ttlMs, boundMs: options.boundMs, dbOffsetMs, windowFrom, windowTo, stopAt },
    });
    const summary = formatCounts(result);
    phase('check');
    const report: SuiteReport = {
      tier: options.tier,
      seed: options.seed,
      mutant: options.mutant,
      mutantDescription: options.mutant ? describeMutant(options.mutant) : null,
      seconds: options.seconds,
      workers: options.workers,
      jobs: options.jobs,
      ttlMs: options.ttlMs,
      boundMs: options.boundMs,
      startedAt: startedAt.toISOString(),
      durationMs: Math.round(mono() - t0),
      phases,
      notes,
      faults,
      counts: result.counts,
      violationCount: result.violationCount,
      byProperty: result.byProperty,
      byKind: result.byKind,
      violations: result.violations,
      knownIssues: result.knownIssues,
      summary,
      reportFile: null,
    };
    if (options.resultsDir) {
      await mkdir(options.resultsDir, { recursive: true });
      const base = `${options.label ?? options.tier}${options.mutant ? `-${options.mutant}` : ''}-seed${options.seed}`;
      const file = `${options.resultsDir.replace(/\/$/, '')}/${base}.json`;
      report.reportFile = file;
      await writeFile(file, `${JSON.stringify(report, null, 2)}\n`);
      // the raw material, to re-check or debug a run
      await writeFile(`${options.resultsDir.replace(/\/$/, '')}/${base}.data.json`, JSON.stringify({ history, processes: processRecords, db: data, dbOffsetMs, windowFrom, windowTo, stopAt }));
      await writeFile(
        `${options.resultsDir.replace(/\/$/, '')}/${base}.stderr.log`,
        processes.map((p) => `==== ${p.name} (pid ${p.record.pid})\n${p.stderr}`).join('\n'),
      );
    }
    return report;
  } finally {
    stopping = true;
    await Promise.allSettled(processes.map((p) => p.kill()));
    await Promise.allSettled(proxies.map((p) => p.close()));
    await admin.end().catch(() => undefined);
    await withRetry(() => db.drop(), 10).catch((error: unknown) => log(`[faults] could not drop the test database: ${String(error)}`));
  }
}
