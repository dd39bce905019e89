// The heartbeat of one client: ONE renewal statement per beat for every lease kept alive,
// instead of one statement per lease every ttl/3.
//
// Each kept lease has its own interval (ttl/3 unless given) and a time its next renewal is due.
// A beat fires when the earliest lease is due and renews, in one leasehold.renew_leases
// statement, every lease that would be due before the next beat could come (one shortest
// interval later). So a lease is never renewed later than it would have been on its own, leases
// of one ttl fall into step after their first renewal, and leases with a longer ttl ride along
// with the beats of the shorter ones. One beat is in flight at a time, on the renew pool.
import { performance } from 'node:perf_hooks';
import type { LeaseControl } from './lease-control.js';
import { renewMany } from './renewal.js';
import type { LeaseRuntime } from './runtime.js';

interface Kept {
  intervalMs: number;
  /** performance.now() at which the next renewal is due. */
  dueAt: number;
}

export class Heartbeat {
  private readonly kept = new Map<LeaseControl, Kept>();
  private timer: NodeJS.Timeout | undefined;
  /** When the armed timer fires (Infinity when none is armed). */
  private armedAt = Infinity;
  private inFlight = false;
  private stopped = false;

  constructor(private readonly runtime: LeaseRuntime) {}

  /** Renews `control` every `intervalMs` (in the shared beat) until it ends. */
  keep(control: LeaseControl, intervalMs: number): void {
    if (!control.held || this.stopped) return;
    const entry = { intervalMs, dueAt: performance.now() + intervalMs };
    this.kept.set(control, entry);
    // O(1) per lease: only an earlier due time moves the timer
    if (!this.inFlight && entry.dueAt < this.armedAt) this.arm(entry.dueAt);
  }

  /** Stops renewing `control` (it ended). */
  drop(control: LeaseControl): void {
    this.kept.delete(control);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
    this.kept.clear();
  }

  private arm(at: number): void {
    clearTimeout(this.timer);
    this.armedAt = at;
    this.timer = setTimeout(() => void this.beat(), Math.max(0, at - performance.now()));
    this.timer.unref();
  }

  private async beat(): Promise<void> {
    this.timer = undefined;
    this.armedAt = Infinity;
    if (this.stopped) return;
    let shortest = Infinity;
    for (const entry of this.kept.values()) shortest = Math.min(shortest, entry.intervalMs);
    const horizon = performance.now() + shortest;
    const batch: LeaseControl[] = [];
    for (const [control, entry] of this.kept) if (entry.dueAt < horizon) batch.push(control);
    if (batch.length > 0) {
      this.inFlight = true;
      const sentAt = performance.now();
      try {
        await renewMany(this.runtime, batch);
      } catch {
        // renewMany loses the leases it could not renew; nothing else to do here
      } finally {
        this.inFlight = false;
      }
      for (const control of batch) {
        const entry = this.kept.get(control);
        if (entry) entry.dueAt = sentAt + entry.intervalMs;
      }
    }
    this.armNext();
  }

  private armNext(): void {
    if (this.stopped) return;
    let earliest = Infinity;
    for (const entry of this.kept.values()) earliest = Math.min(earliest, entry.dueAt);
    if (earliest < Infinity) this.arm(earliest);
  }
}
