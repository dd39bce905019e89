// The nemesis's hands on one fault run: kill, pause and resume worker processes, cut their
// proxies, terminate their backends, restart the server, fail over, step the database clock.
import type pg from 'pg';
import type { EmbeddedPostgres } from '../src/testing.js';
import { probeDatabaseClock } from '../src/testing/database-clock.js';
import { sleep, type HistoryLine, type Rng } from './common.js';
import type { ClusterControl, WorkerView } from './nemesis.js';
import type { FaultProxy, ProxyMode } from './proxy.js';
import { probeDeadTokens } from './test-database.js';
import type { FailoverTopology } from './topology.js';
import type { FaultWorker } from './worker-process.js';

/** What the control acts on: the run's current workers, their proxies and its database. */
export interface RunHandles {
  /** The live worker process of each index (a respawn replaces it). */
  current: Map<number, FaultWorker>;
  proxies: FaultProxy[];
  admin: pg.Pool;
  cluster: FailoverTopology | undefined;
  embedded: EmbeddedPostgres | null;
  holdBackMs: number;
  rng: Rng;
  history: HistoryLine[];
  /** Starts a new worker in the index's place (after a kill). */
  respawn(index: number): void;
}

export async function withRetry<T>(fn: () => Promise<T>, attempts = 20): Promise<T> {
  for (let i = 1; ; i++) {
    try {
      return await fn();
    } catch (error) {
      if (i >= attempts) throw error;
      await sleep(250);
    }
  }
}

export function clusterControl(run: RunHandles): ClusterControl {
return {
    targets: (): WorkerView[] =>
      [...run.current.values()]
        .filter((p) => p.alive && p.record.readyAt !== null && !p.faulted)
        .map((p) => ({ index: p.index, name: p.name, holding: p.holding })),
    kill: (index) => {
      const proc = run.current.get(index);
      if (!proc) return;
      proc.faulted = true;
      proc.signal('SIGKILL');
      void proc.exited.then(() => run.respawn(index));
    },
    pause: (index) => {
      const proc = run.current.get(index);
      if (!proc) return;
      proc.faulted = true;
      proc.signal('SIGSTOP');
    },
    resume: (index) => {
      const proc = run.current.get(index);
      if (!proc) return;
      proc.signal('SIGCONT');
      proc.faulted = false;
    },
    setProxy: (index, mode: ProxyMode) => {
      (run.proxies[index] as FaultProxy).setMode(mode);
      const proc = run.current.get(index);
      if (proc) proc.faulted = mode !== 'pass';
    },
    terminate: async (index, preferLiveness) => {
      const ports = (run.proxies[index] as FaultProxy).upstreamPorts();
      if (ports.length === 0) return null;
      const { rows } = await run.admin.query<{ pid: number; application_name: string }>(
        'select pid, application_name from pg_stat_activity where client_port = any($1::int[]) and datname = current_database()',
        [ports],
      );
      const liveness = rows.filter((r) => r.application_name.endsWith('liveness'));
      const others = rows.filter((r) => !r.application_name.endsWith('liveness'));
      const pool = preferLiveness && liveness.length > 0 ? liveness : others.length > 0 ? others : liveness;
      if (pool.length === 0) return null;
      const victim = run.rng.pick(pool);
      await run.admin.query('select pg_terminate_backend($1)', [victim.pid]);
      return victim.application_name;
    },
    failover: async (how) => {
      if (!run.cluster?.supports.includes(how)) return null;
      const owned = run.cluster;
      const steps = await owned.failover(how, run.holdBackMs, (url, from) => probeDeadTokens(url, from, run.history));
      return { steps, rebuild: () => owned.rebuildStandby() };
    },
    stepClock: async (seconds) => {
      if (!run.cluster?.clockSteps) return null;
      const cluster = run.cluster;
      const now = async () => (await withRetry(() => probeDatabaseClock(run.admin, { samples: 1 }))).databaseMs;
      const fromDb = await now();
      cluster.stepClock(seconds);
      return { fromDb, toDb: await now() };
    },
    restartDatabase: async (mode) => {
      const server = run.embedded;
      if (!server || run.cluster) return false;
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
}
