// What the demo orchestrator (run.ts) and its worker processes (worker.ts) say to each other:
// commands as JSON lines on the worker's stdin, events as JSON lines on its stdout. Also the
// demo's jobs, shared by both sides so that the orchestrator knows the schedule it plans for.
import type { LeaseLostReason } from '../errors.js';
import type { EventJson } from '../testing/events.js';

/** Runs every 2 s and usually takes less; a slow run makes the next slot skip. */
export const REPORT_JOB = {
  name: 'nightly-report',
  everyMs: 2_000,
  ttl: '3s',
  ttlMs: 3_000,
  overlap: 'skip',
  usualMs: 700,
  slowMs: 3_200,
} as const;

/** Runs every 3 s; a slow run makes the next slot wait and start as soon as it ends. */
export const SYNC_JOB = {
  name: 'sync-invoices',
  everyMs: 3_000,
  ttl: '3s',
  ttlMs: 3_000,
  overlap: 'buffer-one',
  usualMs: 300,
  slowMs: 4_200,
} as const;

export const DEMO_JOBS = [REPORT_JOB, SYNC_JOB] as const;
export type DemoJobName = (typeof DEMO_JOBS)[number]['name'];

/** Every run ends with one fenced write of a row into this table. */
export const DEMO_TABLE_SQL = `
  create table demo_writes (
    job        text not null,
    slot       timestamptz not null,
    fence      bigint not null,
    worker     text not null,
    written_at timestamptz not null default clock_timestamp(),
    primary key (job, fence)
  )`;

export type WorkerCommand =
  /** The run of `job` for `slot` (ISO) takes `ms`, on whichever worker claims it. */
  | { cmd: 'plan'; job: string; slot: string; ms: number }
  /** Stop the worker (finish running handlers), close and exit. */
  | { cmd: 'stop' };

export type WorkerEvent =
  | { type: 'ready'; pid: number; holder: string }
  /** run:started; `tookOver` when the lease's previous holder never released it; `plannedMs` how long the handler will take. */
  | ({ type: 'started'; tookOver: boolean; plannedMs: number } & EventJson<'run:started'>)
  /** run:finished */
  | ({ type: 'finished' } & EventJson<'run:finished'>)
  /** slot:skipped (only the worker that recorded the skip reports it) */
  | ({ type: 'skipped' } & EventJson<'slot:skipped'>)
  /** slot:missed */
  | ({ type: 'missed' } & EventJson<'slot:missed'>)
  /** lease:lost (a lease stopped being ours before we released it; its AbortSignal fired); `job` is the lease's name */
  | ({ type: 'lost'; job: string } & EventJson<'lease:lost'>)
  /** The run's fenced write committed. */
  | { type: 'wrote'; job: string; slot: string; fence: number }
  /**
   * The run's fenced write (ctx.transaction) was refused with a LeaseLostError. `sqlRows` is
   * what the same insert guarded only by the SQL check leasehold.holds_lease(name, token,
   * fence) wrote: 0 means the database refuses the stale fence on its own as well.
   */
  | {
      type: 'refused';
      job: string;
      slot: string;
      fence: number;
      reason: LeaseLostReason;
      error: string;
      signalAborted: boolean;
      sqlRows: number;
    }
  /** The worker (the library) logged at error level: a claim or a finish_run failed, a handler failed, … */
  | { type: 'log'; level: 'error'; message: string; fields: Record<string, unknown> }
  | { type: 'error'; message: string }
  | { type: 'stopped' };

/** An event as it travels: stamped with the worker's name and its wall-clock time. */
export type WorkerMessage = WorkerEvent & { worker: string; at: number };

export type MessageOf<K extends WorkerEvent['type']> = Extract<WorkerMessage, { type: K }>;

const EVENT_TYPES: ReadonlySet<string> = new Set([
  'ready',
  'started',
  'finished',
  'skipped',
  'missed',
  'lost',
  'wrote',
  'refused',
  'log',
  'error',
  'stopped',
]);
const COMMANDS: ReadonlySet<string> = new Set(['plan', 'stop']);

/** A worker's stdout line as an event; undefined for anything that is not one. */
export function toMessage(value: Record<string, unknown>): WorkerMessage | undefined {
  if (typeof value.type !== 'string' || !EVENT_TYPES.has(value.type)) return undefined;
  if (typeof value.worker !== 'string' || typeof value.at !== 'number') return undefined;
  return value as unknown as WorkerMessage;
}

/** A worker's stdin line as a command; undefined for anything that is not one. */
export function toCommand(value: Record<string, unknown>): WorkerCommand | undefined {
  if (typeof value.cmd !== 'string' || !COMMANDS.has(value.cmd)) return undefined;
  if (value.cmd === 'plan' && (typeof value.job !== 'string' || typeof value.slot !== 'string' || typeof value.ms !== 'number')) return undefined;
  return value as unknown as WorkerCommand;
}

/** `job@slot`, the key of a plan (and of a buffered slot). */
export function slotKey(job: string, slot: string | Date): string {
  return `${job}@${typeof slot === 'string' ? slot : slot.toISOString()}`;
}
