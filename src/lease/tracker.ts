// The leases one client holds, and what happens to all of them at once: the shared heartbeat
// (keepAlive), a dropped liveness session, a step of the database clock, close(). The client
// and the worker share it by import (trackerOf); it is not part of the published API.
import { ClosedError } from '../errors.js';
import type { ClockStep } from '../schedule/database-clock.js';
import { DenseSet } from './dense-set.js';
import { Heartbeat } from './heartbeat.js';
import { LeaseControl, type LeaseGrant } from './lease-control.js';
import { controlOfLease, leaseOf, type Lease } from './lease.js';
import { reconfirm, sameIncarnation, type ReconfirmOutcome } from './reconfirm.js';
import type { LeaseRuntime } from './runtime.js';
import type pg from 'pg';

export class LeaseTracker {
  /** The leases held now (each control keeps its public Lease: control.lease). */
  private readonly active = new DenseSet<LeaseControl>({ get: (c) => c.trackedSlot, set: (c, at) => (c.trackedSlot = at) });
  private readonly heartbeat: Heartbeat;
  private closed = false;
  /** A lease ended: no longer held here, no longer renewed (one function for all of them). */
  private readonly ended = (control: LeaseControl): void => {
    this.active.delete(control);
    this.heartbeat.drop(control);
  };

  constructor(
    readonly runtime: LeaseRuntime,
    /** The liveness session's key now (null while there is none, or without liveness). */
    readonly livenessKey: () => string | null,
  ) {
    this.heartbeat = new Heartbeat(runtime);
  }

  /** Leases held now. */
  get size(): number {
    return this.active.size;
  }

  /**
   * Starts tracking a lease just granted under `grant.holderKey`. When the liveness session
   * dropped while the grant was in flight, the lease is lost at once.
   */
  track(grant: LeaseGrant): Lease {
    const control = new LeaseControl(grant, this.runtime);
    const lease = leaseOf(control);
    control.lease = lease;
    this.active.add(control);
    control.onEnd = this.ended;
    if (grant.holderKey !== null && this.livenessKey() !== grant.holderKey) control.markLost('liveness-lost');
    return lease;
  }

  /** Renews `lease` every `intervalMs` (default ttl/3), batched with the client's other leases. */
  keepAlive(lease: Lease, intervalMs?: number): Lease {
    const control = controlOfLease(lease);
    this.heartbeat.keep(control, intervalMs ?? control.grant.ttlMs / 3);
    return lease;
  }

  /**
   * The lease is about to be released by a statement that finishes many runs at once
   * (finish_runs): no more renewals. That statement and a renewal of the same leases would lock
   * their rows in different orders, and a deadlock costs a second; the local deadline still runs.
   */
  stopRenewing(lease: Lease): void {
    this.heartbeat.drop(controlOfLease(lease));
  }

  /** A lease the worker's claim took in SQL: tracked, kept alive, announced. */
  adopt(grant: LeaseGrant, tookOver: boolean): Lease {
    if (this.closed) throw new ClosedError();
    const lease = this.track(grant);
    if (!lease.lost) this.keepAlive(lease);
    const { events } = this.runtime;
    if (events.wants('lease:acquired')) events.emit('lease:acquired', { ...controlOfLease(lease).info(), expiresAt: grant.expiresAt, tookOver });
    return lease;
  }

  /** The liveness session dropped (or its suspended leases could not be taken back): every lease taken under its key is lost. */
  livenessLost(key: string): void {
    for (const control of this.active.snapshot()) {
      if (control.grant.holderKey === key) control.markLost('liveness-lost');
    }
  }

  /**
   * The server ended the liveness session `key` (registered on `incarnation`): its leases are
   * suspended, neither lost nor believed, until the next session takes them back (resumed) or
   * they are lost. Resolves true when the server is the same run as before (it did not restart:
   * nobody's lock was kept for the holder, anyone could take the leases), and then they are lost.
   */
  async livenessSuspended(key: string, incarnation: string): Promise<boolean> {
    const suspended = this.active.snapshot().filter((control) => control.grant.holderKey === key);
    for (const control of suspended) control.suspend();
    if (suspended.length === 0 || !(await sameIncarnation(this.runtime, incarnation))) return false;
    this.livenessLost(key);
    return true;
  }

  /** A new liveness session (`client`, holding `key`) takes back the suspended leases of `previousKey` that are still ours. */
  resumed(previousKey: string, key: string, client: pg.Client): Promise<ReconfirmOutcome> {
    const waiting = this.active.snapshot().filter((control) => control.grant.holderKey === previousKey && control.suspended);
    return reconfirm(this.runtime, client, key, waiting);
  }

  /**
   * The database clock stepped: report it, and check every held lease against the new
   * database time (a forward step past a lease's expiry loses it now, not at its next heartbeat).
   */
  clockStepped(step: ClockStep): void {
    this.runtime.events.emit('clock:step', { deltaMs: step.deltaMs, databaseTime: step.databaseTime, expected: step.expected });
    const now = this.runtime.clock.now();
    for (const control of this.active.snapshot()) control.clockStepped(now, step.deltaMs);
  }

  /** Stops the heartbeat and releases every held lease (best effort). */
  async close(): Promise<void> {
    this.closed = true;
    this.heartbeat.stop();
    await Promise.allSettled(this.active.snapshot().map((control) => (control.lease as Lease).release()));
  }
}

/** The lease was released by another statement (the scheduler's finish_run, finish_held_run). */
export function releasedRemotely(lease: Lease): void {
  controlOfLease(lease).endHere();
}

const TRACKERS = new WeakMap<object, LeaseTracker>();

/** Ties a client object to its tracker (called once, by createLeasehold). */
export function attachTracker(client: object, tracker: LeaseTracker): void {
  TRACKERS.set(client, tracker);
}

/** The tracker of a client made by createLeasehold. */
export function trackerOf(client: object): LeaseTracker {
  const tracker = TRACKERS.get(client);
  if (!tracker) throw new TypeError('not a leasehold client made by createLeasehold()');
  return tracker;
}
