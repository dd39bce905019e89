// What a fault run is given and what it reports, and the presets of each tier (CI, soak,
// replicated, and the short mutation runs).
import type { EmbeddedPostgres } from '../src/testing.js';
import type { CheckResult, KnownIssue, Violation } from './checker.js';
import { FAULT_KINDS, HA_FAULT_KINDS, type FaultKind, type FaultRecord, type JobSpec, type MutantName } from './common.js';
import { FAILOVER_MUTANT_DESCRIPTIONS, MUTANT_DESCRIPTIONS, type FailoverMutantName } from './mutants.js';
import type { NemesisOptions } from './nemesis.js';
import type { ReplicationMode } from './replication.js';
import type { FailoverHow, FailoverTopology } from './topology.js';

export type Tier = 'ci' | 'soak' | 'mutant' | 'ha' | 'patroni' | 'pg-auto-failover';

/** The replicated tier's database: a primary and a streaming standby of its own. */
export interface HaSetup {
  replication: ReplicationMode;
  /** Asynchronous mode: replication is held back this long before the primary goes away. */
  holdBackMs: number;
}

export interface SuiteOptions {
  tier: Tier;
  /** The results files' name (default: the tier's), e.g. a topology's scenario. */
  label?: string;
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
  /** Or a topology of production tools (faults/topologies/), built and prepared by this function. */
  topology?: ((prepare: (url: string) => Promise<void>) => Promise<FailoverTopology>) | null;
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
  byKind: CheckResult['byKind'];
  violations: Violation[];
  knownIssues: KnownIssue[];
  summary: string;
  reportFile: string | null;
}

/** The presets: CI tier, soak tier, and the short mutation runs. */
export function preset(
  tier: Tier,
  overrides: { seconds?: number | undefined; workers?: number | undefined; kinds?: FaultKind[] | undefined; failovers?: FailoverHow[] | undefined } = {},
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
      nemesis: { kinds: overrides.kinds ?? ['failover', 'clock-step', 'kill', 'failover', 'clock-step'], ...(overrides.failovers ? { failovers: overrides.failovers } : {}), ttlMs, pauseMs: [0, 0], blackholeMs: [0, 0], dropMs: [0, 0], gapMs: [1_500, 3_000], holderBias: 0.75, livenessBias: 0, restartEveryRounds: 1, stepMinutes: [2, 5] },
    };
  }
  if (tier === 'patroni' || tier === 'pg-auto-failover') {
    // A topology of production tools (faults/topologies/): its scenario's failovers only, each
    // waited for (Patroni needs its ttl of 8 s to fail over a dead leader), with the replicated
    // tier's workload.
    return {
      seconds: overrides.seconds ?? 300,
      workers: overrides.workers ?? 3,
      warmupMs: 2_000,
      drainMs: ttlMs + 2_500,
      ttlMs,
      boundMs,
      jobs: [job('instant', 1_000, 0, 15), job('fast', 1_000, 30, 400), job('creep', 1_000, 200, 1_800), job('slow', 2_000, 500, 3_000)],
      nemesis: { kinds: ['failover'], ttlMs, pauseMs: [0, 0], blackholeMs: [0, 0], dropMs: [0, 0], gapMs: [1_500, 2_500], holderBias: 0.75, livenessBias: 0, restartEveryRounds: 1 },
    };
  }
  if (tier === 'mutant') {
    // Short and aimed at lease holders: a long pause (well past TTL + B: expiry must free the
    // lease) and terminations of the liveness session (the stale run goes on and finishes
    // while another worker holds the lease); the 'instant' job's claims collide on the row
    // lock and retry while the first run is already over (the slot guard must refuse them).
    // The pause comes first and lasts 4.5-5x the TTL: every run then has 3 s or more in which the
    // stopped holder's lease has expired beyond the checker's slack (faults/check/skips.ts), long
    // enough for a peer's claim of the slowest job (every 2 s) to fall in it. A pause drawn last
    // in a 9 s run was cut short by the run's end, a window of 1.4 s fell between two claims of
    // that job, and under load the mutant went unnoticed in three seeds.
    return {
      seconds: overrides.seconds ?? 13,
      workers: overrides.workers ?? 3,
      warmupMs: 1_000,
      drainMs: ttlMs + 500,
      ttlMs,
      boundMs,
      jobs: [job('instant', 1_000, 0, 15), job('fast', 1_000, 30, 350), job('creep', 1_000, 400, 2_500), job('slow', 2_000, 800, 3_000)],
      nemesis: { kinds: ['pause', 'terminate', 'terminate'], first: 'pause', ttlMs, pauseMs: [4.5 * ttlMs, 5 * ttlMs], blackholeMs: [1_000, 2_000], dropMs: [1_000, 2_000], gapMs: [300, 600], holderBias: 1, livenessBias: 1, restartEveryRounds: 1 },
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

export function describeMutant(mutant: MutantName | FailoverMutantName): string {
  return mutant in MUTANT_DESCRIPTIONS ? MUTANT_DESCRIPTIONS[mutant as MutantName] : FAILOVER_MUTANT_DESCRIPTIONS[mutant as FailoverMutantName];
}

