// What the demo orchestrator (lease-demo.ts) and its worker processes (worker.ts) say to each
// other: commands as JSON lines on the worker's stdin, events as JSON lines on its stdout.
import type { LeaseLostReason, SkipReason } from '../src/index.js';

/** The one lease every worker competes for. */
export const LEASE_NAME = 'nightly-report';

/** The demo table every finished job writes one row to, inside a fenced transaction. */
export const DEMO_TABLE_SQL = `
  create table report_runs (
    fence       bigint primary key,
    worker      text not null,
    finished_at timestamptz not null
  )`;

export type WorkerCommand =
  /** Start trying to run the job every `intervalMs`, the first try after `offsetMs`. */
  | { cmd: 'start'; ttl: string; jobMs: number; intervalMs: number; offsetMs: number }
  /** Use this ttl from the next try on. */
  | { cmd: 'configure'; ttl: string }
  /** Stop trying, let a running job finish, close the client and exit. */
  | { cmd: 'stop' };

export type WorkerEvent =
  | { type: 'ready'; pid: number }
  /** run() got the lease and the job started; `tookOver` when its previous holder never released it. */
  | { type: 'started'; fence: number; ttl: string; jobMs: number; tookOver: boolean }
  /** run() did not get the lease: who has it, for how long already, how long it has left. */
  | { type: 'skipped'; reason: SkipReason; holder: string | null; fence: number; heldMs: number | null; leftMs: number | null }
  /** The job's AbortSignal fired (not counting the normal release at its end). */
  | { type: 'lost'; fence: number; reason: LeaseLostReason | 'unknown' }
  /** The job's fenced write committed. */
  | { type: 'wrote'; fence: number }
  /**
   * The job's fenced write (ctx.transaction) was refused with a LeaseLostError.
   * `sqlRows` is what the same insert guarded only by the SQL check
   * leasehold.holds_lease(name, token, fence) wrote: 0 means the database refused it too.
   */
  | { type: 'refused'; fence: number; reason: LeaseLostReason; detail: string | null; signalAborted: boolean; sqlRows: number }
  /** run() returned after the job; `lost` is set when the lease was lost while it ran. */
  | { type: 'finished'; fence: number; lost: LeaseLostReason | null }
  | { type: 'error'; message: string }
  | { type: 'stopped' };

/** An event as it travels: stamped with the worker's name and its wall-clock time. */
export type WorkerMessage = WorkerEvent & { worker: string; at: number };

export type MessageOf<K extends WorkerEvent['type']> = Extract<WorkerMessage, { type: K }>;

const EVENT_TYPES: ReadonlySet<string> = new Set(['ready', 'started', 'skipped', 'lost', 'wrote', 'refused', 'finished', 'error', 'stopped']);
const COMMANDS: ReadonlySet<string> = new Set(['start', 'configure', 'stop']);

function record(text: string): Record<string, unknown> | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
}

/** Parses one stdout line of a worker; undefined for anything that is not an event. */
export function parseMessage(text: string): WorkerMessage | undefined {
  const value = record(text);
  if (!value || typeof value.type !== 'string' || !EVENT_TYPES.has(value.type)) return undefined;
  if (typeof value.worker !== 'string' || typeof value.at !== 'number') return undefined;
  return value as unknown as WorkerMessage;
}

/** Parses one stdin line of a worker; undefined for anything that is not a command. */
export function parseCommand(text: string): WorkerCommand | undefined {
  const value = record(text);
  if (!value || typeof value.cmd !== 'string' || !COMMANDS.has(value.cmd)) return undefined;
  return value as unknown as WorkerCommand;
}
