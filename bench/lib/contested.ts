// Contested acquire + release: N independent connections race for ONE lease name for a fixed
// time. Each loops: one claim decision; if it won, release at once. A decision is one
// acquire call, won or lost.
import { performance } from 'node:perf_hooks';
import type { ClaimPattern, PatternId } from './pattern.js';
import { closeSessions, openSessions } from './session.js';
import { percentileOfSorted, round, sortedCopy } from './stats.js';

export const CONTESTED_TTL = '30 seconds';

export interface CellResult {
  pattern: PatternId;
  clients: number;
  round: number;
  elapsedSeconds: number;
  decisions: number;
  wins: number;
  decisionsPerSecond: number;
  /** Statements sent by acquire calls (leasehold: exactly one per decision). */
  acquireRoundTrips: number;
  /** Statements sent by the winners' releases. */
  releaseRoundTrips: number;
  latencyMs: { p50: number; p99: number; max: number };
  /** Declined decisions by reason ('held', 'holder-committing', ...). */
  reasons: Record<string, number>;
  /** Releases that found the token no longer held: would mean two winners overlapped (must be 0). */
  releaseMismatches: number;
}

/** A cell's result plus its raw latency samples (kept in memory for pooled percentiles). */
export interface CellRun {
  result: CellResult;
  latencies: Float64Array;
}

export async function runContestedCell(options: {
  pattern: ClaimPattern;
  connectionString: string;
  name: string;
  clients: number;
  seconds: number;
  round: number;
}): Promise<CellRun> {
  const { pattern, name, clients } = options;
  const sessions = await openSessions(options.connectionString, clients, `bench-${pattern.id}`);
  try {
    const latencies: number[] = [];
    const reasons: Record<string, number> = {};
    let decisions = 0;
    let wins = 0;
    let acquireRoundTrips = 0;
    let releaseRoundTrips = 0;
    let releaseMismatches = 0;

    const started = performance.now();
    const deadline = started + options.seconds * 1000;
    await Promise.all(
      sessions.map(async (session, index) => {
        const holder = `bench-${pattern.id}-${index}`;
        while (performance.now() < deadline) {
          if (session.failure) throw session.failure;
          const before = session.roundTrips;
          const sentAt = performance.now();
          const outcome = await pattern.acquire(session, name, holder, CONTESTED_TTL);
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
      },
    };
  } finally {
    await closeSessions(sessions);
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
}

export interface ContestedComparison {
  clients: number;
  classic: PatternSummary;
  leasehold: PatternSummary;
  /** leasehold / classic decisions per second over all rounds. */
  ratio: number;
  /** The same ratio round by round (classic and leasehold of one round ran back to back). */
  perRoundRatios: number[];
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
  };
}

/** Pairs the classic and leasehold runs of each client count. */
export function compareContested(runs: readonly CellRun[], clientCounts: readonly number[]): ContestedComparison[] {
  return clientCounts.map((clients) => {
    const of = (pattern: PatternId) => runs.filter((run) => run.result.clients === clients && run.result.pattern === pattern);
    const classic = summarize(of('classic'));
    const leasehold = summarize(of('leasehold'));
    const perRoundRatios = leasehold.perRound.map((dps, index) => round(dps / (classic.perRound[index] ?? Number.NaN), 2));
    return {
      clients,
      classic,
      leasehold,
      ratio: round(leasehold.decisionsPerSecond / classic.decisionsPerSecond, 2),
      perRoundRatios,
    };
  });
}
