// Shared by the fault suite's driver, worker processes and checker: the history record
// types (run and slot lines carry the fields of the shared JSON vocabulary, src/testing/events.ts),
// the common monotonic clock and a seeded random generator.
//
// Time: every process on the machine reads the same CLOCK_MONOTONIC through
// process.hrtime(), so worker events and nemesis faults share one timeline whatever the wall
// clocks say (the skewed worker runs under libfaketime with DONT_FAKE_MONOTONIC=1, which
// leaves CLOCK_MONOTONIC alone).

import type { EventJson } from '../src/testing/events.js';

/** Milliseconds on the machine-wide monotonic clock (CLOCK_MONOTONIC), shared by all processes. */
export function mono(): number {
  return Number(process.hrtime.bigint()) / 1e6;
}

export type WriteStatus = 'accepted' | 'rejected' | 'failed' | 'indeterminate';

/** One line of a worker's JSONL history (stdout). `mono` is the shared monotonic clock in ms. */
export type HistoryLine =
  | { type: 'ready'; worker: string; pid: number; mono: number; wall: number }
  | { type: 'start-failed'; worker: string; error: string; mono: number }
  | { type: 'grant'; worker: string; job: string; slot: string | null; fence: number; tookOver: boolean; mono: number }
  | { type: 'start'; worker: string; job: string; slot: string; fence: number; plannedMs: number; mono: number; wall: number }
  | {
      type: 'write';
      worker: string;
      job: string;
      slot: string;
      fence: number;
      status: WriteStatus;
      ord: number | null;
      reason: string | null;
      /** The run's signal had fired (lease lost) before the write began: a refusal is then local, else by the server's fence check. */
      afterLost: boolean;
      mono: number;
    }
  /** run:finished; `token`: the run's token (replicated tier only, for the probes after a failover). */
  | ({ type: 'end'; worker: string; token?: string; mono: number } & Omit<EventJson<'run:finished'>, 'durationMs'>)
  | ({ type: 'skip'; worker: string; mono: number } & Omit<EventJson<'slot:skipped'>, 'buffered'>)
  | { type: 'skip-log'; worker: string; job: string; slot: string; holder: string | null; msg: string; mono: number }
  | ({ type: 'missed'; worker: string; mono: number } & EventJson<'slot:missed'>)
  | { type: 'lost'; worker: string; job: string; fence: number; reason: string; message: string; mono: number }
  | ({ type: 'liveness-lost'; worker: string; mono: number } & EventJson<'liveness:lost'>)
  | { type: 'stall'; worker: string; from: number; to: number; mono: number }
  | { type: 'stopped'; worker: string; mono: number }
  /**
   * A stale-token probe (replicated tier): some time after a run ended (its lease released or
   * lost), a fenced check with that run's token and fence. It must never be accepted: the token
   * was released or superseded, perhaps on a primary that is gone since. `by`: 'nemesis' when the
   * driver made it on a just-promoted standby before any worker could reach it.
   */
  | { type: 'probe'; worker: string; job: string; fence: number; status: 'accepted' | 'refused' | 'failed'; reason: string | null; endedMono: number; by?: 'nemesis'; mono: number };

export const FAULT_KINDS = ['kill', 'pause', 'terminate', 'restart', 'blackhole', 'drop', 'skew', 'failover', 'clock-step'] as const;
/** Faults of the replicated tier only (a primary with a standby, servers under libfaketime). */
export const HA_FAULT_KINDS: readonly FaultKind[] = ['failover', 'clock-step'];
export type FaultKind = (typeof FAULT_KINDS)[number];

/** A fault the nemesis injected: [t0, t1] on the shared monotonic clock. */
export interface FaultRecord {
  id: number;
  kind: FaultKind;
  /** Worker (holder name) it hit; null for faults on the database server. */
  target: string | null;
  t0: number;
  t1: number;
  /**
   * e.g. { backend: 'liveness' } for terminate, { mode: 'crash' } for restart, { how: 'freeze' }
   * for failover, { deltaMs, fromDb, toDb } for clock-step (database times around the step).
   */
  params: Record<string, string | number | boolean>;
  /** The target held a lease when the fault began. */
  targetHeld: boolean;
}

/** One worker process (a respawn is a new record with a new name). */
export interface ProcessRecord {
  worker: string;
  index: number;
  pid: number;
  spawnedAt: number;
  readyAt: number | null;
  exitedAt: number | null;
  skewed: boolean;
}

/** A job of the fault workload. */
export interface JobSpec {
  name: string;
  everyMs: number;
  ttlMs: number;
  /** Handler durations are uniform in [minMs, maxMs]. */
  minMs: number;
  maxMs: number;
}

export const MUTANTS = ['unfenced-write', 'release-no-token-check', 'acquire-ignores-expiry', 'slot-guard-off'] as const;
export type MutantName = (typeof MUTANTS)[number];

/** mulberry32: small, fast, good enough for fault plans; the same seed gives the same stream. */
export class Rng {
  private state: number;
  constructor(seed: number) {
    this.state = seed >>> 0 || 0x9e3779b9;
  }
  next(): number {
    this.state = (this.state + 0x6d2b79f5) >>> 0;
    let t = this.state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  }
  /** Uniform in [min, max). */
  between(min: number, max: number): number {
    return min + (max - min) * this.next();
  }
  int(min: number, maxInclusive: number): number {
    return Math.floor(this.between(min, maxInclusive + 1));
  }
  pick<T>(items: readonly T[]): T {
    if (items.length === 0) throw new Error('pick from an empty list');
    return items[Math.floor(this.next() * items.length)] as T;
  }
  shuffle<T>(items: readonly T[]): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
      const j = Math.floor(this.next() * (i + 1));
      [out[i], out[j]] = [out[j] as T, out[i] as T];
    }
    return out;
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, Math.max(0, ms)));
