// Contested acquire + release: N independent connections race for ONE lock or lease name for a
// fixed time. Each loops: one claim decision; if it won, release at once. A decision is one
// acquire call, won or lost. The same loop drives every pattern (pattern.ts).
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import type { ClaimConnection, ClaimPattern, PatternId } from './pattern.js';
import { percentileOfSorted, round, sortedCopy } from './stats.js';

/** The TTL every contested claim asks for (winners release at once, so it never runs out). */
export const CONTESTED_TTL_SECONDS = 30;
export const CONTESTED_TTL = `${CONTESTED_TTL_SECONDS} seconds`;

export interface CellResult {
  pattern: PatternId;
  clients: number;
  round: number;
  elapsedSeconds: number;
  decisions: number;
  wins: number;
  decisionsPerSecond: number;
  /** Commands sent by acquire calls (leasehold, advisory, Redis: exactly one per decision). */
  acquireRoundTrips: number;
  /** Commands sent by the winners' releases. */
  releaseRoundTrips: number;
  latencyMs: { p50: number; p99: number; max: number };
  /** Declined decisions by reason ('held', 'holder-committing', ...). */
  reasons: Record<string, number>;
  /** Releases that found the token no longer held: would mean two winners overlapped (must be 0). */
  releaseMismatches: number;
  /** CPU time of the server processes of the cell's connections, from /proc (null: not readable, or Redis). */
  serverCpuMs: number | null;
  /** WAL the server wrote during the cell, grants and releases included (null: Redis). */
  walBytes: number | null;
}

// The CPU time (user + system) of local processes, in ms; null when one cannot be read (a
// remote server). /proc counts in clock ticks of 10 ms: a cell's thousands of decisions make
// that fine enough per decision.
export function cpuMs(pids: readonly number[]): number | null {
  if (pids.length === 0) return null;
  let ticks = 0;
  try {
    for (const pid of pids) {
      const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      ticks += Number(fields[11]) + Number(fields[12]);
    }
  } catch {
    return null;
  }
  return ticks * 10;
}

/** A cell's result plus its raw latency samples (kept in memory for pooled percentiles). */
export interface CellRun {
  result: CellResult;
  latencies: Float64Array;
}

/** Opens `count` independent connections; on failure closes the ones already open. */
export async function openConnections<C extends ClaimConnection>(count: number, open: (index: number) => Promise<C>): Promise<C[]> {
  const settled = await Promise.allSettled(Array.from({ length: count }, (_, index) => open(index)));
  const connections = settled.flatMap((outcome) => (outcome.status === 'fulfilled' ? [outcome.value] : []));
  const failed = settled.find((outcome): outcome is PromiseRejectedResult => outcome.status === 'rejected');
  if (failed) {
    await closeConnections(connections);
    throw failed.reason;
  }
  return connections;
}

export async function closeConnections(connections: readonly ClaimConnection[]): Promise<void> {
  await Promise.allSettled(connections.map((connection) => connection.close()));
}

export async function runContestedCell<C extends ClaimConnection>(options: {
  pattern: ClaimPattern<C>;
  /** Opens one client connection (its own database session, or Redis connection). */
  open: (label: string) => Promise<C>;
  name: string;
  clients: number;
  seconds: number;
  round: number;
  /** The server's WAL position in bytes (PostgreSQL patterns): the cell's WAL is the difference. */
  walPosition?: (() => Promise<number>) | undefined;
}): Promise<CellRun> {
  const { pattern, name, clients } = options;
  const sessions = await openConnections(clients, (index) => options.open(`bench-${pattern.id}-${index}`));
  try {
    const latencies: number[] = [];
    const reasons: Record<string, number> = {};
    let decisions = 0;
    let wins = 0;
    let acquireRoundTrips = 0;
    let releaseRoundTrips = 0;
    let releaseMismatches = 0;

    const pids = sessions.flatMap((session) => (session.serverPid === undefined ? [] : [session.serverPid]));
    const walBefore = await options.walPosition?.();
    const cpuBefore = cpuMs(pids);
    const started = performance.now();
    const deadline = started + options.seconds * 1000;
    await Promise.all(
      sessions.map(async (session, index) => {
        const holder = `bench-${pattern.id}-${index}`;
        while (performance.now() < deadline) {
          if (session.failure) throw session.failure;
          const before = session.roundTrips;
          const sentAt = performance.now();
          const outcome = await pattern.acquire(session, name, holder, CONTESTED_TTL_SECONDS);
          latencies.push(performance.now() - sentAt);
          acquireRoundTrips += session.roundTrips - before;
          decisions++;
          if (!outcome.won) {
            reasons[outcome.reason] = (reasons[outcome.reason] ?? 0) + 1;
            continue;
          }
          wins++;
          if (!outcome.token) throw new Error(`${pattern.id}: a won claim returned no token`);
          const beforeRelease = session.roundTrips;
          const released = await pattern.release(session, name, outcome.token);
          releaseRoundTrips += session.roundTrips - beforeRelease;
          if (!released) releaseMismatches++;
        }
      }),
    );
    const elapsedSeconds = (performance.now() - started) / 1000;
    const cpuAfter = cpuMs(pids);
    const walAfter = await options.walPosition?.();

    const sorted = sortedCopy(latencies);
    return {
      latencies: sorted,
      result: {
        pattern: pattern.id,
        clients,
        round: options.round,
        elapsedSeconds: round(elapsedSeconds, 3),
        decisions,
        wins,
        decisionsPerSecond: round(decisions / elapsedSeconds, 1),
        acquireRoundTrips,
        releaseRoundTrips,
        latencyMs: {
          p50: round(percentileOfSorted(sorted, 50), 3),
          p99: round(percentileOfSorted(sorted, 99), 3),
          max: round(percentileOfSorted(sorted, 100), 3),
        },
        reasons,
        releaseMismatches,
        serverCpuMs: cpuBefore === null || cpuAfter === null ? null : cpuAfter - cpuBefore,
        walBytes: walBefore === undefined || walAfter === undefined ? null : walAfter - walBefore,
      },
    };
  } finally {
    await closeConnections(sessions);
  }
}

export interface PatternSummary {
  pattern: PatternId;
  clients: number;
  rounds: number;
  decisions: number;
  wins: number;
  elapsedSeconds: number;
  /** Total decisions / total elapsed time over all rounds. */
  decisionsPerSecond: number;
  /** Per-round decisions per second, in round order. */
  perRound: number[];
  /** Percentiles over the pooled samples of all rounds. */
  latencyMs: { p50: number; p99: number; max: number };
  roundTripsPerAcquireDecision: number;
  roundTripsPerDecision: number;
  reasons: Record<string, number>;
  releaseMismatches: number;
  /** Server CPU µs per decision (the connections' backends, from /proc), or null when not measured. */
  serverCpuUsPerDecision: number | null;
  /** WAL bytes per decision, winners' grants and releases included (null: Redis). */
  walBytesPerDecision: number | null;
}

export interface PatternComparison {
  summary: PatternSummary;
  /** This pattern's / classic's decisions per second over all rounds (classic: 1). */
  ratio: number;
  /** The same ratio round by round (the patterns of one round ran back to back). */
  perRoundRatios: number[];
}

export interface ContestedComparison {
  clients: number;
  /** Every pattern measured, classic (the baseline) first. */
  patterns: PatternComparison[];
}

/** The comparison of one pattern, or undefined when it was not measured. */
export function comparisonOf(comparison: ContestedComparison, pattern: PatternId): PatternComparison | undefined {
  return comparison.patterns.find((p) => p.summary.pattern === pattern);
}

function summarize(runs: readonly CellRun[]): PatternSummary {
  const first = runs[0];
  if (!first) throw new Error('no runs to summarize');
  const sum = (pick: (r: CellResult) => number) => runs.reduce((total, run) => total + pick(run.result), 0);
  const decisions = sum((r) => r.decisions);
  const elapsedSeconds = sum((r) => r.elapsedSeconds);
  const pooled = new Float64Array(runs.reduce((n, run) => n + run.latencies.length, 0));
  let offset = 0;
  for (const run of runs) {
    pooled.set(run.latencies, offset);
    offset += run.latencies.length;
  }
  pooled.sort();
  const reasons: Record<string, number> = {};
  for (const run of runs) {
    for (const [reason, count] of Object.entries(run.result.reasons)) reasons[reason] = (reasons[reason] ?? 0) + count;
  }
  const acquireRoundTrips = sum((r) => r.acquireRoundTrips);
  return {
    pattern: first.result.pattern,
    clients: first.result.clients,
    rounds: runs.length,
    decisions,
    wins: sum((r) => r.wins),
    elapsedSeconds: round(elapsedSeconds, 3),
    decisionsPerSecond: round(decisions / elapsedSeconds, 1),
    perRound: [...runs].sort((a, b) => a.result.round - b.result.round).map((run) => run.result.decisionsPerSecond),
    latencyMs: {
      p50: round(percentileOfSorted(pooled, 50), 3),
      p99: round(percentileOfSorted(pooled, 99), 3),
      max: round(percentileOfSorted(pooled, 100), 3),
    },
    roundTripsPerAcquireDecision: round(acquireRoundTrips / decisions, 3),
    roundTripsPerDecision: round((acquireRoundTrips + sum((r) => r.releaseRoundTrips)) / decisions, 3),
    reasons,
    releaseMismatches: sum((r) => r.releaseMismatches),
    serverCpuUsPerDecision: runs.some((run) => run.result.serverCpuMs === null)
      ? null
      : round((sum((r) => r.serverCpuMs ?? 0) * 1000) / decisions, 1),
    walBytesPerDecision: runs.some((run) => run.result.walBytes === null) ? null : round(sum((r) => r.walBytes ?? 0) / decisions, 1),
  };
}

/** Summarizes each pattern's runs per client count, with its ratio to classic's. */
export function compareContested(runs: readonly CellRun[], clientCounts: readonly number[], patterns: readonly PatternId[]): ContestedComparison[] {
  if (patterns[0] !== 'classic') throw new Error('classic, the baseline, must be the first pattern');
  return clientCounts.map((clients) => {
    const of = (pattern: PatternId) => runs.filter((run) => run.result.clients === clients && run.result.pattern === pattern);
    const classic = summarize(of('classic'));
    return {
      clients,
      patterns: patterns.map((id) => {
        const summary = id === 'classic' ? classic : summarize(of(id));
        return {
          summary,
          ratio: round(summary.decisionsPerSecond / classic.decisionsPerSecond, 2),
          perRoundRatios: summary.perRound.map((dps, index) => round(dps / (classic.perRound[index] ?? Number.NaN), 2)),
        };
      }),
    };
  });
}
