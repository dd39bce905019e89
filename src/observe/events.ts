// Typed events. Listeners run synchronously; one that throws is reported to the logger and
// never breaks the lease machinery that emitted the event.
import { EventEmitter } from 'node:events';
import type { Logger } from './logger.js';
import type { LeaseholdError, LeaseLostError } from '../errors.js';
import type { ReplicationReport } from '../db/replication.js';

export interface LeaseInfo {
  name: string;
  fence: number;
  holder: string;
  slot: Date | null;
}

export interface SkipInfo {
  name: string;
  reason: string;
  holder: string | null;
  fence: number;
  since: Date | null;
  until: Date | null;
}

export interface LeaseholdEvents {
  /** A lease was taken; `tookOver` when its previous holder never released it (expired, crashed, or replaced). */
  'lease:acquired': [lease: LeaseInfo & { expiresAt: Date; tookOver: boolean }];
  /** An acquisition declined because someone else holds the lease. */
  'lease:skipped': [skip: SkipInfo];
  /** A heartbeat extended a lease. */
  'lease:renewed': [lease: LeaseInfo & { expiresAt: Date }];
  /** A lease stopped being ours before we released it; its AbortSignal has fired. */
  'lease:lost': [lease: LeaseInfo, error: LeaseLostError];
  /** A lease was released (released: false when it was no longer ours). */
  'lease:released': [lease: LeaseInfo, released: boolean];
  /**
   * The liveness session dropped; every lease taken under it is lost, except when the server ended
   * the session (SQLSTATE 57P01/57P02) and then restarted or failed over: the next session takes
   * back the leases that are still ours (docs/high-availability.md).
   */
  'liveness:lost': [error: Error];
  /** At client start: acknowledged grants can be lost on failover, or the server is a standby (once per client). */
  'replication:warning': [report: ReplicationReport];
  /** The liveness session is (re)established. */
  'liveness:ready': [key: string];
  /** A scheduled run started on this worker. */
  /** lateMs: how long after its fire time (slot plus the job's jitter offset) the handler was called, on the database clock's estimate; null without one. */
  'run:started': [run: { job: string; slot: Date; fence: number; holder: string; lateMs: number | null }];
  /** A scheduled run ended; `outcome` is succeeded, failed, lost or aborted. */
  'run:finished': [run: { job: string; slot: Date; fence: number; outcome: string; error: string | null; durationMs: number }];
  /** A slot did not run because the previous run held the lease (emitted by the worker that recorded it: once per slot fleet-wide). */
  'slot:skipped': [skip: { job: string; slot: Date; holder: string | null; holderFence: number; holderSlot: Date | null; heldMs: number | null; buffered: boolean }];
  /**
   * The database clock jumped (by more than a second) between two readings: `deltaMs` > 0
   * forward, < 0 back. Leases whose expiry passed on the new time are lost at once.
   */
  'clock:step': [step: { deltaMs: number; databaseTime: Date; expected: Date }];
  /**
   * A fenced transaction (lease.transaction(), ctx.transaction()) ended: `committed`, or
   * `failed` with the error (nothing was written, except when the error is OutcomeUnknownError).
   * Emitted in the caller's async context, after the transaction.
   */
  'transaction:finished': [tx: LeaseInfo & { outcome: 'committed' | 'failed'; error: string | null; durationMs: number }];
  /** Slots that no worker ran were recorded as missed. */
  'slot:missed': [missed: { job: string; slots: Date[] }];
  /**
   * A worker's claims failed three times in a row for a reason no retry cures: `error` is a
   * DatabaseReadOnlyError (the server accepts no writes) or a PermissionDeniedError, and says what
   * to fix. The worker runs nothing meanwhile, and its health probes fail.
   */
  'worker:failing': [failure: { error: LeaseholdError; failures: number; since: Date }];
  /** A failing worker's claim succeeded again. */
  'worker:recovered': [];
}

export class LeaseholdEmitter {
  private readonly emitter = new EventEmitter();
  constructor(private readonly logger: Logger) {}

  on<E extends keyof LeaseholdEvents>(event: E, listener: (...args: LeaseholdEvents[E]) => void): () => void {
    this.emitter.on(event, listener as (...args: unknown[]) => void);
    return () => this.emitter.off(event, listener as (...args: unknown[]) => void);
  }

  /** Whether anyone listens to `event`: check it before building a costly payload. */
  wants(event: keyof LeaseholdEvents): boolean {
    return this.emitter.listenerCount(event) > 0;
  }

  emit<E extends keyof LeaseholdEvents>(event: E, ...args: LeaseholdEvents[E]): void {
    // nobody listens (most events, most of the time): no copy of the listener list
    if (this.emitter.listenerCount(event) === 0) return;
    for (const listener of this.emitter.listeners(event)) {
      try {
        (listener as (...a: unknown[]) => void)(...args);
      } catch (error) {
        this.logger.error({ event, err: error }, 'leasehold event listener threw');
      }
    }
  }
}

/** A skipped slot as JSON fields (log lines and the JSON-lines event vocabulary share it). */
export function skippedSlotFields(skip: LeaseholdEvents['slot:skipped'][0]): {
  job: string;
  slot: string;
  holder: string | null;
  holderFence: number;
  holderSlot: string | null;
  heldMs: number | null;
  buffered: boolean;
} {
  return {
    job: skip.job,
    slot: skip.slot.toISOString(),
    holder: skip.holder,
    holderFence: skip.holderFence,
    holderSlot: skip.holderSlot?.toISOString() ?? null,
    heldMs: skip.heldMs,
    buffered: skip.buffered,
  };
}
