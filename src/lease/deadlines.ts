// The local deadlines of one client's leases on one timer, not one timer per lease: a worker
// holds thousands of leases after a tick, and a timer per lease is an allocation and two timer
// list operations for every run. The timer is armed at the earliest deadline; when it fires,
// every lease whose deadline has passed is told so, and the timer is armed at the next one.
// A deadline that moves later (a confirmed renewal) costs a field write; the timer finds out
// when it fires. The holders are kept in a DenseSet (no hash table per tick's leases).
import { performance } from 'node:perf_hooks';
import { DenseSet } from './dense-set.js';

export interface DeadlineHolder {
  /** Its deadline (performance.now() milliseconds) has passed without being moved. */
  deadlinePassed(): void;
  /** The deadline (performance.now() milliseconds); written by Deadlines.set(). */
  deadlineAt: number;
  /** Its place in Deadlines (-1: none); written by Deadlines only. */
  deadlineSlot: number;
}

export class Deadlines {
  private readonly holders = new DenseSet<DeadlineHolder>({ get: (h) => h.deadlineSlot, set: (h, at) => (h.deadlineSlot = at) });
  private timer: NodeJS.Timeout | undefined;
  /** When the armed timer fires (Infinity: none armed). */
  private armedAt = Infinity;

  get size(): number {
    return this.holders.size;
  }

  /** Sets (or moves) `holder`'s deadline to `deadline` on the monotonic clock. */
  set(holder: DeadlineHolder, deadline: number): void {
    holder.deadlineAt = deadline;
    this.holders.add(holder);
    if (deadline < this.armedAt) this.arm(deadline);
  }

  /** `holder` has no deadline any more (its lease ended). */
  delete(holder: DeadlineHolder): void {
    this.holders.delete(holder);
    if (this.holders.size === 0) this.disarm();
  }

  private arm(deadline: number): void {
    clearTimeout(this.timer);
    this.armedAt = deadline;
    this.timer = setTimeout(() => this.fire(), Math.max(0, deadline - performance.now()));
    // a deadline alone does not keep the process alive (as a lease's own timer did not)
    this.timer.unref();
  }

  private disarm(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.armedAt = Infinity;
  }

  private fire(): void {
    this.timer = undefined;
    this.armedAt = Infinity;
    const now = performance.now();
    const passed: DeadlineHolder[] = [];
    let next = Infinity;
    for (const holder of this.holders.view()) {
      if (holder.deadlineAt <= now) passed.push(holder);
      else if (holder.deadlineAt < next) next = holder.deadlineAt;
    }
    for (const holder of passed) this.holders.delete(holder);
    if (next < Infinity) this.arm(next);
    for (const holder of passed) holder.deadlinePassed();
  }
}
