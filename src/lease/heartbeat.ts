// The heartbeat of one client: ONE renewal statement per beat for every lease kept alive,
// instead of one statement per lease every ttl/3.
//
// Each kept lease has its own interval (ttl/3 unless given) and a time its next renewal is due.
// A beat fires when the earliest lease is due and renews, in one leasehold.renew_leases
// statement, every lease that would be due before the next beat could come (one shortest
// interval later). So a lease is never renewed later than it would have been on its own, leases
// of one ttl fall into step after their first renewal, and leases with a longer ttl ride along
// with the beats of the shorter ones. One beat is in flight at a time, on the renew pool.
// Each kept lease's interval and due time are fields of its LeaseControl, and the kept leases a
// DenseSet: nothing is allocated per lease kept.
import { performance } from 'node:perf_hooks';
import { DenseSet } from './dense-set.js';
import type { LeaseControl } from './lease-control.js';
import { renewMany } from './renewal.js';
import type { LeaseRuntime } from './runtime.js';

export class Heartbeat {
  private readonly kept = new DenseSet<LeaseControl>({ get: (c) => c.keptSlot, set: (c, at) => (c.keptSlot = at) });
  private timer: NodeJS.Timeout | undefined;
  /** When the armed timer fires (Infinity when none is armed). */
  private armedAt = Infinity;
  private inFlight = false;
  private stopped = false;

  constructor(private readonly runtime: LeaseRuntime) {}

  /** Renews `control` every `intervalMs` (in the shared beat) until it ends. */
  keep(control: LeaseControl, intervalMs: number): void {
    if (!control.held || this.stopped) return;
    control.beatIntervalMs = intervalMs;
    control.beatDueAt = performance.now() + intervalMs;
    this.kept.add(control);
    // O(1) per lease: only an earlier due time moves the timer
    if (!this.inFlight && control.beatDueAt < this.armedAt) this.arm(control.beatDueAt);
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
    const kept = this.kept.view();
    let shortest = Infinity;
    for (const control of kept) shortest = Math.min(shortest, control.beatIntervalMs);
    const horizon = performance.now() + shortest;
    const batch: LeaseControl[] = [];
    for (const control of kept) if (control.beatDueAt < horizon) batch.push(control);
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
      for (const control of batch) if (this.kept.has(control)) control.beatDueAt = sentAt + control.beatIntervalMs;
    }
    this.armNext();
  }

  private armNext(): void {
    if (this.stopped) return;
    let earliest = Infinity;
    for (const control of this.kept.view()) earliest = Math.min(earliest, control.beatDueAt);
    if (earliest < Infinity) this.arm(earliest);
  }
}
