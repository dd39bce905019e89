// One benchmark run's record: what it measured (the JSON written to bench/results/, local and
// ignored by git) and where it goes. A run of every part also rewrites bench/RESULTS.md, the
// committed page that ships in the package.
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { BENCH_PARTS, type BenchPart } from './config.js';
import type { CellResult, ContestedComparison } from './contested.js';
import type { MachineInfo } from './machine.js';
import type { PatternInfo } from './pattern.js';
import { withHistory } from './history.js';
import { checkTargets, renderMarkdownPage } from './report.js';
import type { HeartbeatResults } from './heartbeats.js';
import type { ReadsResults } from './reads.js';
import type { DashboardResults } from './dashboard.js';
import type { TickSuiteResult } from './tick-suite.js';
import type { SchedulerResults } from './scheduler.js';
import type { TakeoverResult } from './takeover.js';
import type { WalResult } from './wal.js';

export interface BenchSettings {
  cellSeconds: number;
  rounds: number;
  clientCounts: number[];
  warmupSeconds: number;
  contestedTtl: string;
  walAttempts: number;
  walTrials: number;
  takeoverRuns: number;
  pollIntervalMs: number;
  /** Cells in the order they ran, e.g. "r1 classic×8". */
  order: string[];
}

export interface TargetCheck {
  what: string;
  target: string;
  measured: string;
  met: boolean;
}

/** Whether the Redis patterns ran: on a private redis-server, or left out and why. */
export type RedisStatus = { status: 'measured'; binary: string; version: string; port: number } | { status: 'skipped'; reason: string };

export interface AcquireResults {
  settings: BenchSettings;
  /** The patterns measured, classic (the baseline) first, with what each guarantees. */
  patterns: PatternInfo[];
  redis: RedisStatus;
  contested: { comparisons: ContestedComparison[]; cells: CellResult[] };
  /** WAL per declined claim, for the PostgreSQL patterns. */
  wal: WalResult[];
  /** Takeover after a SIGKILLed holder, one entry per mechanism. */
  takeover: TakeoverResult[];
}

export interface BenchResults {
  benchmark: 'leasehold';
  /** The parts this run measured. */
  parts: BenchPart[];
  machine: MachineInfo;
  acquire?: AcquireResults;
  scheduler?: SchedulerResults;
  tick?: TickSuiteResult;
  heartbeats?: HeartbeatResults;
  reads?: ReadsResults;
  dashboard?: DashboardResults;
  targets: TargetCheck[];
  /** os.loadavg() (1, 5, 15 min) when the run started and ended: other work on the machine skews the numbers. */
  loadAverage: { start: number[]; end: number[] };
  durationSeconds: number;
}

const BENCH_DIR = fileURLToPath(new URL('../', import.meta.url));

const RESULTS_DIR = fileURLToPath(new URL('../results/', import.meta.url));

/** The JSON file of a run: bench-<date>.json for a run of every part, else <parts>-<date>.json. */
function jsonNameOf(results: BenchResults, complete: boolean): string {
  return `${complete ? 'bench' : results.parts.join('-')}-${results.machine.date.replace(/[:.]/g, '-')}.json`;
}

/** Writes bench/RESULTS.md for a complete run, keeping its hand-written history. */
async function writePage(results: BenchResults, jsonName: string): Promise<string> {
  const previous = await readFile(`${BENCH_DIR}RESULTS.md`, 'utf8').catch(() => undefined);
  await writeFile(`${BENCH_DIR}RESULTS.md`, withHistory(renderMarkdownPage(results, jsonName), previous));
  return `${BENCH_DIR}RESULTS.md`;
}

/**
 * Writes bench/results/<parts>-<date>.json; a run of every part also writes
 * bench/results/latest.json and bench/RESULTS.md (keeping its hand-written history). Returns the files written.
 */
export async function writeResults(results: BenchResults): Promise<string[]> {
  await mkdir(RESULTS_DIR, { recursive: true });
  const complete = BENCH_PARTS.every((part) => results.parts.includes(part));
  const jsonName = jsonNameOf(results, complete);
  const json = `${JSON.stringify(results, null, 2)}\n`;
  const written = [`${RESULTS_DIR}${jsonName}`];
  await writeFile(`${RESULTS_DIR}${jsonName}`, json);
  if (complete) {
    await writeFile(`${RESULTS_DIR}latest.json`, json);
    written.push(`${RESULTS_DIR}latest.json`, await writePage(results, jsonName));
  }
  return written;
}

/**
 * Renders bench/RESULTS.md again from a complete run's JSON (`npm run bench -- --render FILE`),
 * with the targets checked again by this code: a change to the report or its checks without
 * measuring for 20 minutes. The page still names the run's own JSON and date.
 */
export async function renderSaved(file: string): Promise<string> {
  const saved = JSON.parse(await readFile(file, 'utf8')) as BenchResults;
  if (!BENCH_PARTS.every((part) => saved.parts.includes(part))) throw new Error(`${file} is not a complete run (parts: ${saved.parts.join(', ')})`);
  const results: BenchResults = { ...saved, targets: checkTargets(saved) };
  return writePage(results, jsonNameOf(results, true));
}
