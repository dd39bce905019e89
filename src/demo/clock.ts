// The database clock, which decides the slots, as the demo's narrator sees it from its own
// clock: one offset measured at the start (best of three round trips).
import { probeDatabaseClock, type ClockQueryable } from '../testing/database-clock.js';

export class DemoClock {
  /** database clock − local clock, ms */
  private offsetMs = 0;

  async measure(db: ClockQueryable): Promise<void> {
    this.offsetMs = (await probeDatabaseClock(db, { samples: 3 })).offsetMs;
  }

  dbNow(): number {
    return Date.now() + this.offsetMs;
  }

  localAt(dbTime: number): number {
    return dbTime - this.offsetMs;
  }

  /** The first slot of an every-`everyMs` schedule at or after `after` (database time) that `accept`s. */
  nextSlot(everyMs: number, after: number, accept: (slot: number) => boolean): number {
    for (let slot = Math.ceil(after / everyMs) * everyMs; ; slot += everyMs) if (accept(slot)) return slot;
  }
}
