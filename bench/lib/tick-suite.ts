// The tick part: for each job count, the claim paths of tick-scale.ts in alternating order,
// `rounds` times each, on one database in one run; the report gives each path's median round
// and its ratio against the plain UPDATE ('baseline').
import os from 'node:os';
import { closeSessions } from './session.js';
import { median, round } from './stats.js';
import type { TargetCheck } from './results.js';
import type { Table } from './table.js';
import { measureTickRound, prepareTick, TICK_PATHS, type TickPath, type TickRound } from './tick-scale.js';

export interface TickSuiteSettings {
  jobCounts: number[];
  workers: number;
  rounds: number;
}

export interface TickSuiteResult {
  settings: TickSuiteSettings;
  /** Every round, in the order measured. */
  rounds: TickRound[];
  /** Load average (1, 5, 15 min) before and after. */
  loadAverage: { start: number[]; end: number[] };
}

export function tickSettings(env = process.env): TickSuiteSettings {
  const list = (env.BENCH_TICK_JOBS ?? '1000,10000,100000').split(',').map((s) => Number(s.trim()));
  if (list.some((n) => !Number.isInteger(n) || n < 1)) throw new Error(`BENCH_TICK_JOBS must list positive integers (got "${env.BENCH_TICK_JOBS}")`);
  const int = (name: string, fallback: number) => {
    const value = Number(env[name] ?? fallback);
    if (!Number.isInteger(value) || value < 1) throw new Error(`${name} must be a positive integer (got "${env[name]}")`);
    return value;
  };
  return { jobCounts: list, workers: int('BENCH_TICK_WORKERS', 4), rounds: int('BENCH_TICK_ROUNDS', 3) };
}

export async function measureTickSuite(url: string, settings: TickSuiteSettings, progress: (message: string) => void): Promise<TickSuiteResult> {
  const start = os.loadavg().map((n) => round(n, 2));
  const rounds: TickRound[] = [];
  for (const jobs of settings.jobCounts) {
    const { names, claimers, admin } = await prepareTick(url, jobs, settings.workers);
    try {
      progress(`tick: ${jobs.toLocaleString('en-US')} jobs due at one slot, ${settings.workers} workers, ${settings.rounds} round(s) per path; load ${os.loadavg().map((n) => n.toFixed(2)).join(' ')}`);
      for (let r = 0; r < settings.rounds; r++) {
        // alternate the order, so that neither path always runs on a warmer cache
        const order = r % 2 === 0 ? TICK_PATHS : [...TICK_PATHS].reverse();
        for (const path of order) {
          const result = await measureTickRound(path, names, claimers, admin);
          rounds.push(result);
          progress(
            `  ${path.padEnd(8)} last claim ${result.lastClaimMs} ms, rows p50/p99 ${result.startP50Ms}/${result.startP99Ms} ms, ` +
              `statement median ${result.statementMedianMs} ms (max ${result.statementMaxMs}), ${result.rowsReturned} rows back, ` +
              `exactly once ${result.exactlyOnce}/${jobs}, doubled ${result.doubled}; ` +
              `database CPU ${result.cpuUsPerJob ?? '-'} µs/job, WAL ${result.walBytesPerJob} B/job (claim and finish)`,
          );
        }
      }
    } finally {
      await closeSessions([admin, ...claimers.flatMap((c) => [c.session, c.liveness])]);
    }
  }
  return { settings, rounds, loadAverage: { start, end: os.loadavg().map((n) => round(n, 2)) } };
}

/** The median round of each (jobs, path). */
function medians(result: TickSuiteResult): Map<string, TickRound> {
  const out = new Map<string, TickRound>();
  for (const jobs of result.settings.jobCounts) {
    for (const path of TICK_PATHS) {
      const of = result.rounds.filter((r) => r.jobs === jobs && r.path === path);
      if (of.length === 0) continue;
      const pick = (key: keyof TickRound) => median(of.map((r) => r[key] as number));
      const first = of[0] as TickRound;
      out.set(`${jobs}:${path}`, {
        ...first,
        lastClaimMs: pick('lastClaimMs'),
        startP50Ms: pick('startP50Ms'),
        startP99Ms: pick('startP99Ms'),
        statementMedianMs: pick('statementMedianMs'),
        statementMaxMs: pick('statementMaxMs'),
        rowsReturned: pick('rowsReturned'),
        exactlyOnce: Math.min(...of.map((r) => r.exactlyOnce)),
        doubled: Math.max(...of.map((r) => r.doubled)),
        cpuUsPerJob: of.some((r) => r.cpuUsPerJob === null) ? null : pick('cpuUsPerJob'),
        walBytesPerJob: pick('walBytesPerJob'),
      });
    }
  }
  return out;
}

const ratio = (a: number, b: number | undefined) => (b === undefined || !(b > 0) ? '-' : `${(a / b).toFixed(2)}x`);

/** The tick's database CPU and WAL per job against the plain statements' (issue 31), from this many jobs. */
export const TICK_CPU_RATIO_TARGET = 2;
export const TICK_WAL_RATIO_TARGET = 1.3;
const TICK_TARGET_MIN_JOBS = 10_000;

export function tickTargets(result: TickSuiteResult): TargetCheck[] {
  const m = medians(result);
  const checks: TargetCheck[] = [];
  for (const jobs of result.settings.jobCounts.filter((n) => n >= TICK_TARGET_MIN_JOBS)) {
    const after = m.get(`${jobs}:after`);
    const plain = m.get(`${jobs}:baseline`);
    if (!after || !plain) continue;
    const n = jobs.toLocaleString('en-US');
    if (after.cpuUsPerJob !== null && plain.cpuUsPerJob !== null && plain.cpuUsPerJob > 0) {
      checks.push({
        what: `tick database CPU per job (claim, share report, second pass, finish) vs the plain statements, ${n} jobs, ${result.settings.workers} workers`,
        target: `<= ${TICK_CPU_RATIO_TARGET}x`,
        measured: `${ratio(after.cpuUsPerJob, plain.cpuUsPerJob)} (${after.cpuUsPerJob} vs ${plain.cpuUsPerJob} µs)`,
        met: after.cpuUsPerJob <= TICK_CPU_RATIO_TARGET * plain.cpuUsPerJob,
      });
    }
    checks.push({
      what: `tick WAL per job vs the plain statements, ${n} jobs`,
      target: `<= ${TICK_WAL_RATIO_TARGET}x`,
      measured: `${ratio(after.walBytesPerJob, plain.walBytesPerJob)} (${after.walBytesPerJob} vs ${plain.walBytesPerJob} B)`,
      met: after.walBytesPerJob <= TICK_WAL_RATIO_TARGET * plain.walBytesPerJob,
    });
  }
  return checks;
}

export function tickTable(result: TickSuiteResult): Table {
  const m = medians(result);
  const rows: string[][] = [];
  for (const jobs of result.settings.jobCounts) {
    for (const path of TICK_PATHS) {
      const r = m.get(`${jobs}:${path}`);
      if (!r) continue;
      rows.push([
        jobs.toLocaleString('en-US'),
        path as TickPath,
        String(r.lastClaimMs),
        `${r.startP50Ms} / ${r.startP99Ms}`,
        String(r.statementMedianMs),
        String(r.rowsReturned),
        `${r.exactlyOnce}${r.doubled ? ` (${r.doubled} doubled)` : ''}`,
        ratio(r.lastClaimMs, m.get(`${jobs}:baseline`)?.lastClaimMs),
        r.cpuUsPerJob === null ? '-' : String(r.cpuUsPerJob),
        r.cpuUsPerJob === null ? '-' : ratio(r.cpuUsPerJob, m.get(`${jobs}:baseline`)?.cpuUsPerJob ?? undefined),
        String(r.walBytesPerJob),
        ratio(r.walBytesPerJob, m.get(`${jobs}:baseline`)?.walBytesPerJob),
      ]);
    }
  }
  return {
    headers: [
      'jobs', 'path', 'tick -> last claim ms', 'claimed row p50 / p99 ms', 'claim statement ms (median)', 'rows returned', 'exactly once', 'vs baseline',
      'database CPU µs/job (claim + finish)', 'CPU vs baseline', 'WAL B/job', 'WAL vs baseline',
    ],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows,
  };
}

export function tickLines(result: TickSuiteResult, render: (table: Table) => string): string[] {
  const { workers, rounds } = result.settings;
  return [
    `The tick: jobs due at one slot, ${workers} workers, median of ${rounds} round(s) per path, paths alternating in one run; ` +
      `load average ${result.loadAverage.start.join(' ')} -> ${result.loadAverage.end.join(' ')}`,
    render(tickTable(result)),
    '',
  ];
}
