// The inside of a held lease: its state, local deadline and AbortController, and the ways it
// ends (lost, released here, released by another statement). The public Lease reads it; the
// tracker and the worker drive it. Not part of the published API.
//
// The local deadline is measured on the monotonic clock from the moment the last confirmed
// acquire or renewal was *sent*; the server set expires_at = its now() + ttl at some later
// moment, so the local deadline never outlives the server's. When it passes without a
// confirmed renewal, the lease counts as lost and the signal fires, whatever the network does.
import { performance } from 'node:perf_hooks';
import { LeaseLostError, type LeaseLostReason } from '../errors.js';
import type { LeaseInfo } from '../observe/events.js';
import type { DeadlineHolder } from './deadlines.js';
import type { Lease } from './lease.js';
import type { LeaseRuntime } from './runtime.js';

export interface LeaseGrant {
  name: string;
  token: string;
  fence: number;
  holder: string;
  holderKey: string | null;
  acquiredAt: Date;
  expiresAt: Date;
  slot: Date | null;
  ttlMs: number;
  /** performance.now() when the acquire was sent. */
  sentAt: number;
}

type LeaseState = 'held' | 'lost' | 'released';

export class LeaseControl implements DeadlineHolder {
  state: LeaseState = 'held';
  expiry: Date;
  lostError: LeaseLostError | undefined;
  // Made when someone asks for the signal: a worker starts and releases thousands of leases a
  // tick, most of whose signals nobody reads (see signal below).
  private controller: AbortController | undefined;
  /** Why the lease ended, once it has, for a signal asked for afterwards (a thunk: made on demand). */
  private abortReason: (() => unknown) | undefined;
  /** performance.now() at which the lease counts as lost without a confirmed renewal (on runtime.deadlines). */
  deadlineAt = 0;
  /** Its place in runtime.deadlines (DeadlineHolder). */
  deadlineSlot = -1;
  /** Called once when the lease ends (lost or released): the tracker stops renewing it. */
  onEnd: ((control: LeaseControl) => void) | undefined;
  /** The public Lease made for this control (by the tracker), if one was. */
  lease: Lease | undefined;
  /** Its place among the tracker's held leases (-1: not there). */
  trackedSlot = -1;
  /** Its place in the heartbeat (-1: not renewed), its renewal interval and when its next renewal is due (performance.now()). */
  keptSlot = -1;
  beatIntervalMs = 0;
  beatDueAt = 0;
  /**
   * The server ended the liveness session this lease was granted under (a restart, a failover):
   * not lost, not believed either until the new session takes it back (tracker.ts). Meanwhile no
   * renewal, no start; the local deadline still runs.
   */
  private suspension: { settle: () => void; settled: Promise<void> } | undefined;

  constructor(
    readonly grant: LeaseGrant,
    readonly runtime: LeaseRuntime,
  ) {
    this.expiry = grant.expiresAt;
    this.armDeadline(grant.sentAt + grant.ttlMs);
  }

  get held(): boolean {
    return this.state === 'held';
  }

  /** Fires when the lease ends: lost (with lostError) or released (a LeaseLostError 'released'). */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.abortReason) this.controller.abort(this.abortReason());
    }
    return this.controller.signal;
  }

  private abort(reason: () => unknown): void {
    this.abortReason = reason;
    // nobody holds the signal yet: nothing to tell now, and the reason is made only if asked
    this.controller?.abort(reason());
  }

  info(): LeaseInfo {
    const { name, fence, holder, slot } = this.grant;
    return { name, fence, holder, slot };
  }

  get suspended(): boolean {
    return this.suspension !== undefined;
  }

  /** The liveness session this lease was granted under was ended by the server: wait for its verdict. */
  suspend(): void {
    if (this.state !== 'held' || this.suspension) return;
    let settle = () => {};
    const settled = new Promise<void>((resolve) => (settle = resolve));
    this.suspension = { settle, settled };
  }

  /** Resolves when the lease is no longer suspended (taken back, lost or released). */
  whenSettled(): Promise<void> {
    return this.suspension?.settled ?? Promise.resolve();
  }

  /** The new liveness session `holderKey` took the lease back: held again, until `expiresAt`. */
  reconfirmed(holderKey: string, expiresAt: Date, sentAt: number, ttlMs: number): void {
    if (this.state !== 'held') return;
    this.grant.holderKey = holderKey;
    this.resume();
    this.confirmed(expiresAt, sentAt, ttlMs);
  }

  private resume(): void {
    const suspension = this.suspension;
    this.suspension = undefined;
    suspension?.settle();
  }

  /** A renewal sent at `sentAt` (performance.now()) for `ttlMs` was confirmed until `expiresAt`. */
  confirmed(expiresAt: Date, sentAt: number, ttlMs: number): void {
    if (this.state !== 'held') return;
    this.expiry = expiresAt;
    this.armDeadline(sentAt + ttlMs);
    const { events } = this.runtime;
    if (events.wants('lease:renewed')) events.emit('lease:renewed', { ...this.info(), expiresAt });
  }

  /** The lease stopped being ours: fire the signal once, report it, stop the deadline. */
  markLost(reason: LeaseLostReason, cause?: unknown, detail?: string): void {
    if (this.state !== 'held') return;
    const { name, fence } = this.grant;
    this.state = 'lost';
    this.lostError = new LeaseLostError(
      name,
      fence,
      reason,
      `Lease "${name}" (fence ${fence}) is lost (${reason}${detail ? `: ${detail}` : ''}); ` +
        'stop work that depends on it. Fenced writes under it will be refused.',
      cause === undefined ? undefined : { cause },
    );
    this.end();
    const lost = this.lostError;
    this.abort(() => lost);
    this.runtime.events.emit('lease:lost', this.info(), this.lostError);
  }

  /**
   * This process stops holding the lease (a release, or another statement such as the
   * scheduler's finish_run released it): stop the timers and fire the signal without a round
   * trip. Returns false when it had already ended.
   */
  endHere(): boolean {
    if (this.state === 'released') return false;
    const wasHeld = this.state === 'held';
    this.state = 'released';
    this.end();
    if (wasHeld) {
      const { name, fence } = this.grant;
      this.abort(() => releasedReason(name, fence));
    }
    return true;
  }

  /**
   * The database clock stepped (see DatabaseClock): the lease expires at its database expiry
   * on the new time. Already past it: lost at once. Otherwise the local deadline moves earlier
   * if the step brought the expiry closer.
   */
  clockStepped(databaseNow: Date, deltaMs: number): void {
    if (this.state !== 'held') return;
    const left = this.expiry.getTime() - databaseNow.getTime();
    if (left <= 0) {
      this.markLost('clock-step', undefined, `the database clock stepped ${deltaMs > 0 ? '+' : ''}${(deltaMs / 1000).toFixed(1)} s past its expiry`);
      return;
    }
    const deadline = performance.now() + left;
    if (deadline < this.deadlineAt) this.armDeadline(deadline);
  }

  throwIfNotHeld(): void {
    if (this.state === 'lost') throw this.lostError;
    if (this.state === 'released') throw new LeaseLostError(this.grant.name, this.grant.fence, 'released');
  }

  /** The local deadline passed without a confirmed renewal (runtime.deadlines). */
  deadlinePassed(): void {
    this.markLost('expired');
  }

  private armDeadline(monotonicDeadline: number): void {
    this.runtime.deadlines.set(this, monotonicDeadline);
  }

  private end(): void {
    this.resume();
    this.runtime.deadlines.delete(this);
    const onEnd = this.onEnd;
    this.onEnd = undefined;
    onEnd?.(this);
  }
}

/** What renew's `reason` means for a lease that was not renewed. */
export function renewReason(reason: string | undefined): LeaseLostReason {
  switch (reason) {
    case 'expired':
      return 'expired';
    case 'released':
      return 'released';
    default:
      return 'taken-over';
  }
}

/**
 * The signal's reason on a normal release, without a stack trace: a worker releases thousands
 * of leases per tick, and the trace would only point here.
 */
function releasedReason(name: string, fence: number): LeaseLostError {
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return new LeaseLostError(name, fence, 'released');
  } finally {
    Error.stackTraceLimit = limit;
  }
}
