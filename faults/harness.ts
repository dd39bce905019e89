// The fault suite's driver: a fresh database, one fault proxy per worker, W worker processes,
// the nemesis, then a database snapshot and the checker. Used by faults/run.ts (the CLI) and
// test/faults.test.ts (the CI tier).
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { createLeasehold, silentLogger } from '../src/index.js';
import { createTestDatabase, type EmbeddedPostgres } from '../src/testing.js';
import { check, formatCounts, type CheckResult, type KnownIssue, type Violation } from './checker.js';
import { HaCluster } from './cluster.js';
import {
  FAULT_KINDS,
  HA_FAULT_KINDS,
  LIBFAKETIME_PATHS,
  mono,
  Rng,
  sleep,
  type FaultKind,
  type FaultRecord,
  type HistoryLine,
  type JobSpec,
  type MutantName,
  type ProcessRecord,
} from './common.js';
import { FAILOVER_MUTANT_DESCRIPTIONS, installMutant, MUTANT_DESCRIPTIONS, type FailoverMutantName } from './mutants.js';
import { Nemesis, type ClusterControl, type NemesisOptions, type WorkerView } from './nemesis.js';
import { FaultProxy, type ProxyMode } from './proxy.js';
import type { ReplicationMode } from './replication.js';
import { installTestSchema, probeDeadTokens, snapshot } from './test-database.js';

const TSX = fileURLToPath(new URL('../node_modules/tsx/dist/esm/index.mjs', import.meta.url));
const WORKER_SCRIPT = fileURLToPath(new URL('./worker.ts', import.meta.url));
export const RESULTS_DIR = fileURLToPath(new URL('./results/', import.meta.url));

export type Tier = 'ci' | 'soak' | 'mutant' | 'ha';

/** The replicated tier's database: a primary and a streaming standby of its own. */
export interface HaSetup {
  replication: ReplicationMode;
  /** Asynchronous mode: replication is held back this long before the primary goes away. */
  holdBackMs: number;
}

export interface SuiteOptions {
  tier: Tier;
  seed: number;
  /** How long the nemesis runs. */
  seconds: number;
  workers: number;
  jobs: JobSpec[];
  ttlMs: number;
  /** The bound B of property (c), ms. */
  boundMs: number;
  /** Before the nemesis starts (slots are checked from its end). */
  warmupMs: number;
  /** After the last fault healed, before the workers are stopped. */
  drainMs: number;
  nemesis: NemesisOptions;
  mutant: MutantName | FailoverMutantName | null;
  /** The server: its URL (superuser), and the embedded instance when restarts are possible. */
  server: { url: string; embedded: EmbeddedPostgres | null };
  /** A primary + standby of the suite's own instead of `server` (failover and clock-step faults). */
  ha?: HaSetup | null;
  /** Run the last worker with its wall clock 5 minutes ahead (libfaketime). */
  skew: boolean;
  /** Where to write the JSON report (and history); null: nowhere. */
  resultsDir: string | null;
  log: (line: string) => void;
}

export interface SuiteReport {
  tier: Tier;
  seed: number;
  mutant: MutantName | FailoverMutantName | null;
  mutantDescription: string | null;
  seconds: number;
  workers: number;
  jobs: JobSpec[];
  ttlMs: number;
  boundMs: number;
  startedAt: string;
  durationMs: number;
  /** Where the time went, ms: setup, workers starting, warm-up, faults, drain, stop, check. */
  phases: Record<string, number>;
  notes: string[];
  faults: FaultRecord[];
  counts: CheckResult['counts'];
  violationCount: number;
  byProperty: CheckResult['byProperty'];
  violations: Violation[];
  knownIssues: KnownIssue[];
  summary: string;
  reportFile: string | null;
}

/** The presets: CI tier, soak tier, and the short mutation runs. */
export function preset(
  tier: Tier,
  overrides: { seconds?: number; workers?: number; kinds?: FaultKind[] } = {},
): Pick<SuiteOptions, 'seconds' | 'workers' | 'jobs' | 'ttlMs' | 'boundMs' | 'nemesis' | 'warmupMs' | 'drainMs'> {
  const ttlMs = 2_000;
  const boundMs = 1_500;
  const job = (name: string, everyMs: number, minMs: number, maxMs: number): JobSpec => ({ name, everyMs, ttlMs, minMs, maxMs });
  const all = FAULT_KINDS.filter((k) => k !== 'skew' && !HA_FAULT_KINDS.includes(k));
  if (tier === 'soak') {
    return {
      seconds: overrides.seconds ?? 1_800,
      workers: overrides.workers ?? 5,
      warmupMs: 3_000,
      drainMs: ttlMs + 3_000,
      ttlMs,
      boundMs,
      jobs: [
        job('instant', 1_000, 0, 15),
        job('fast-a', 1_000, 20, 300),
        job('fast-b', 1_000, 50, 600),
        job('creep-a', 1_000, 300, 2_200),
        job('creep-b', 2_000, 500, 3_500),
        job('mid-a', 2_000, 100, 1_500),
        job('mid-b', 3_000, 200, 2_500),
        job('slow-a', 5_000, 500, 6_000),
        job('slow-b', 5_000, 1_000, 4_000),
      ],
      nemesis: { kinds: [...all], ttlMs, pauseMs: [200, 3.5 * ttlMs], blackholeMs: [300, 3 * ttlMs], dropMs: [300, 3_000], gapMs: [500, 3_000], holderBias: 0.7, livenessBias: 0.5, restartEveryRounds: 8 },
    };
  }
  if (tier === 'ha') {
    const failoversOnly = overrides.kinds?.every((k) => k === 'failover') ?? false;
    // Failovers and database clock steps, with kills between them. No pauses, cut-offs or
    // terminated sessions: right after a failover, any worker that still believes it holds a
    // lease another worker was granted is a violation (g), so the other faults stay apart.
    return {
      seconds: overrides.seconds ?? 55,
      workers: overrides.workers ?? 3,
      warmupMs: 2_000,
      drainMs: ttlMs + 2_500,
      ttlMs,
      boundMs,
      // Failovers alone (the mutant runs): more long runs, so that more leases granted before a
      // hold-back are released during it, the release lost with the old primary.
      jobs: failoversOnly
        ? [job('instant', 1_000, 0, 15), job('fast', 1_000, 30, 400), job('creep', 1_000, 600, 1_800), job('long-a', 2_000, 900, 1_900), job('long-b', 2_000, 1_200, 2_600)]
        : [job('instant', 1_000, 0, 15), job('fast', 1_000, 30, 400), job('creep', 1_000, 200, 1_800), job('slow', 2_000, 500, 3_000)],
      nemesis: { kinds: overrides.kinds ?? ['failover', 'clock-step', 'kill', 'failover', 'clock-step'], ttlMs, pauseMs: [0, 0], blackholeMs: [0, 0], dropMs: [0, 0], gapMs: [1_500, 3_000], holderBias: 0.75, livenessBias: 0, restartEveryRounds: 1, stepMinutes: [2, 5] },
    };
  }
  if (tier === 'mutant') {
    // Short and aimed at lease holders: a long pause (well past TTL + B: expiry must free the
    // lease) and terminations of the liveness session (the stale run goes on and finishes
    // while another worker holds the lease); the 'instant' job's claims collide on the row
    // lock and retry while the first run is already over (the slot guard must refuse them).
    return {
      seconds: overrides.seconds ?? 9,
      workers: overrides.workers ?? 3,
      warmupMs: 1_000,
      drainMs: ttlMs + 500,
      ttlMs,
      boundMs,
      jobs: [job('instant', 1_000, 0, 15), job('fast', 1_000, 30, 350), job('creep', 1_000, 400, 2_500), job('slow', 2_000, 800, 3_000)],
      nemesis: { kinds: ['pause', 'terminate', 'terminate'], ttlMs, pauseMs: [3.2 * ttlMs, 3.5 * ttlMs], blackholeMs: [1_000, 2_000], dropMs: [1_000, 2_000], gapMs: [300, 600], holderBias: 1, livenessBias: 1, restartEveryRounds: 1 },
    };
  }
  return {
    seconds: overrides.seconds ?? 40,
    workers: overrides.workers ?? 3,
    warmupMs: 2_000,
    drainMs: ttlMs + 2_500,
    ttlMs,
    boundMs,
    jobs: [job('instant', 1_000, 0, 15), job('fast', 1_000, 30, 400), job('creep', 1_000, 200, 1_800), job('slow', 2_000, 500, 3_000)],
    nemesis: { kinds: [...all], ttlMs, pauseMs: [1.2 * ttlMs, 2.2 * ttlMs], blackholeMs: [800, 2 * ttlMs], dropMs: [800, 2_500], gapMs: [500, 1_200], holderBias: 0.75, livenessBias: 0.6, restartEveryRounds: 1 },
  };
}

function describeMutant(mutant: MutantName | FailoverMutantName): string {
  return mutant in MUTANT_DESCRIPTIONS ? MUTANT_DESCRIPTIONS[mutant as MutantName] : FAILOVER_MUTANT_DESCRIPTIONS[mutant as FailoverMutantName];
}

export function findLibfaketime(): string | undefined {
  return LIBFAKETIME_PATHS.find((p) => existsSync(p));
}

class WorkerProcess {
  readonly record: ProcessRecord;
  readonly child: ChildProcess;
  readonly stderr: string[] = [];
  private readonly held = new Set<string>();
  /** Under a fault (stopped, cut off, killed): not a target for another one. */
  faulted = false;
  readonly ready: Promise<void>;
  readonly exited: Promise<void>;

  constructor(
    readonly index: number,
    readonly name: string,
    env: Record<string, string>,
    skewed: boolean,
    history: HistoryLine[],
  ) {
    this.child = spawn(process.execPath, ['--import', TSX, WORKER_SCRIPT], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    this.record = { worker: name, index, pid: this.child.pid ?? -1, spawnedAt: mono(), readyAt: null, exitedAt: null, skewed };
    let markReady: () => void = () => undefined;
    this.ready = new Promise((resolve) => {
      markReady = resolve;
    });
    this.exited = new Promise((resolve) => {
      this.child.on('exit', () => {
        this.record.exitedAt ??= mono();
        markReady();
        resolve();
      });
    });
    createInterface({ input: this.child.stdout as NodeJS.ReadableStream }).on('line', (text) => {
      let line: HistoryLine;
      try {
        line = JSON.parse(text) as HistoryLine;
      } catch {
        return; // a line cut short by SIGKILL
      }
      history.push(line);
      if (line.type === 'ready') {
        this.record.readyAt = line.mono;
        markReady();
      } else if (line.type === 'grant') this.held.add(`${line.job}|${line.fence}`);
      else if (line.type === 'end' || line.type === 'lost') this.held.delete(`${line.job}|${line.fence}`);
    });
    let size = 0;
    this.child.stderr?.on('data', (chunk: Buffer) => {
      if (size > 2_000_000) return;
      size += chunk.length;
      this.stderr.push(chunk.toString());
    });
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  get holding(): boolean {
    return this.held.size > 0;
  }

  signal(signal: NodeJS.Signals): void {
    if (this.alive) this.child.kill(signal);
  }

  /** Ends the process whatever its state (a stopped process is continued first). */
  async kill(): Promise<void> {
    if (!this.alive) return;
    this.child.kill('SIGCONT');
    this.child.kill('SIGKILL');
    await this.exited;
  }
}

async function dbOffset(admin: pg.Pool): Promise<{ offsetMs: number; rttMs: number }> {
  let best: { offsetMs: number; rttMs: number } | undefined;
  for (let i = 0; i < 7; i++) {
    const sent = mono();
    const { rows } = await admin.query<{ ms: number }>('select extract(epoch from clock_timestamp())::float8 * 1000 as ms');
    const received = mono();
    const rttMs = received - sent;
    const offsetMs = Number(rows[0]?.ms) - (sent + rttMs / 2);
    if (!best || rttMs < best.rttMs) best = { offsetMs, rttMs };
  }
  return best as { offsetMs: number; rttMs: number };
}

async function withRetry<T>(fn: () => Promise<T>, attempts = 20): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (error) {
      if (i >= attempts) throw error;
      await sleep(250);
    }
  }
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
  const processes: WorkerProcess[] = [];
  const current = new Map<number, WorkerProcess>();
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
  let cluster: HaCluster | undefined;
  let db: { url: string; drop: () => Promise<void> };
  if (options.ha) {
    // the template is prepared once; both servers are copies of it
    cluster = await HaCluster.create({ replication: options.ha.replication, libfaketime: haLibfaketime, prepare });
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
    const upstreamPort = cluster ? cluster.primaryPort : Number(dbUrl.port || 5432);
    for (let i = 0; i < options.workers; i++) {
      const proxy = new FaultProxy(upstreamPort, dbUrl.hostname === 'localhost' ? '127.0.0.1' : dbUrl.hostname);
      await proxy.listen();
      proxies.push(proxy);
      cluster?.follow(proxy);
    }

    const spawnWorker = (index: number): WorkerProcess => {
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
      if (options.ha) env.PROBE_MS = '300,1500';
      if (skewed && libfaketime) Object.assign(env, { LD_PRELOAD: libfaketime, FAKETIME: '+5m', DONT_FAKE_MONOTONIC: '1' });
      const proc = new WorkerProcess(index, name, env, skewed, history);
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

    const control: ClusterControl = {
      targets: (): WorkerView[] =>
        [...current.values()]
          .filter((p) => p.alive && p.record.readyAt !== null && !p.faulted)
          .map((p) => ({ index: p.index, name: p.name, holding: p.holding })),
      kill: (index) => {
        const proc = current.get(index);
        if (!proc) return;
        proc.faulted = true;
        proc.child.kill('SIGKILL');
        void proc.exited.then(() => respawn(index));
      },
      pause: (index) => {
        const proc = current.get(index);
        if (!proc) return;
        proc.faulted = true;
        proc.signal('SIGSTOP');
      },
      resume: (index) => {
        const proc = current.get(index);
        if (!proc) return;
        proc.signal('SIGCONT');
        proc.faulted = false;
      },
      setProxy: (index, mode: ProxyMode) => {
        (proxies[index] as FaultProxy).setMode(mode);
        const proc = current.get(index);
        if (proc) proc.faulted = mode !== 'pass';
      },
      terminate: async (index, preferLiveness) => {
        const ports = (proxies[index] as FaultProxy).upstreamPorts();
        if (ports.length === 0) return null;
        const { rows } = await admin.query<{ pid: number; application_name: string }>(
          'select pid, application_name from pg_stat_activity where client_port = any($1::int[]) and datname = current_database()',
          [ports],
        );
        const liveness = rows.filter((r) => r.application_name.endsWith('liveness'));
        const others = rows.filter((r) => !r.application_name.endsWith('liveness'));
        const pool = preferLiveness && liveness.length > 0 ? liveness : others.length > 0 ? others : liveness;
        if (pool.length === 0) return null;
        const victim = rng.pick(pool);
        await admin.query('select pg_terminate_backend($1)', [victim.pid]);
        return victim.application_name;
      },
      failover: async (how) => {
        if (!cluster) return null;
        const owned = cluster;
        const report = await owned.failover(how, options.ha?.holdBackMs ?? 0, (url, from) => probeDeadTokens(url, from, history));
        return { params: { ...report }, rebuild: () => owned.rebuildStandby() };
      },
      stepClock: async (seconds) => {
        if (!cluster?.clockSteps) return null;
        const now = async () => Number((await withRetry(() => admin.query<{ ms: number }>('select extract(epoch from clock_timestamp())::float8 * 1000 as ms'))).rows[0]?.ms);
        const fromDb = await now();
        cluster.stepClock(seconds);
        return { fromDb, toDb: await now() };
      },
      restartDatabase: async (mode) => {
        const server = options.server.embedded;
        if (!server || cluster) return false;
        if (mode === 'crash') {
          const pid = server.pid;
          if (pid) {
            process.kill(pid, 'SIGQUIT');
            for (let i = 0; i < 200; i++) {
              try {
                process.kill(pid, 0);
              } catch {
                break;
              }
              await sleep(20);
            }
            await sleep(50);
          }
        }
        await withRetry(() => server.restart(), 5);
        return true;
      },
    };

    phase('setup');
    log(`[faults] ${options.tier}${options.mutant ? ` (mutant ${options.mutant})` : ''}: seed ${options.seed}, ${options.workers} workers, ${options.jobs.length} jobs, ${options.seconds} s of faults`);
    for (let i = 0; i < options.workers; i++) spawnWorker(i);
    const readyBy = mono() + 90_000;
    await Promise.race([Promise.all(processes.map((p) => p.ready)), sleep(90_000)]);
    const notReady = processes.filter((p) => p.record.readyAt === null);
    if (notReady.length > 0 || mono() > readyBy) {
      throw new Error(`workers not ready: ${notReady.map((p) => `${p.name}: ${p.stderr.join('').slice(-500)}`).join('; ')}`);
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
      violations: result.violations,
      knownIssues: result.knownIssues,
      summary,
      reportFile: null,
    };
    if (options.resultsDir) {
      await mkdir(options.resultsDir, { recursive: true });
      const base = `${options.tier}${options.mutant ? `-${options.mutant}` : ''}-seed${options.seed}`;
      const file = `${options.resultsDir.replace(/\/$/, '')}/${base}.json`;
      report.reportFile = file;
      await writeFile(file, `${JSON.stringify(report, null, 2)}\n`);
      // the raw material, to re-check or debug a run
      await writeFile(`${options.resultsDir.replace(/\/$/, '')}/${base}.data.json`, JSON.stringify({ history, processes: processRecords, db: data, dbOffsetMs, windowFrom, windowTo, stopAt }));
      await writeFile(
        `${options.resultsDir.replace(/\/$/, '')}/${base}.stderr.log`,
        processes.map((p) => `==== ${p.name} (pid ${p.record.pid})\n${p.stderr.join('')}`).join('\n'),
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
