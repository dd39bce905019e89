// The jobs of a worker mostly share their schedule and their next slot (10,000 jobs on
// '0 3 * * *' all wait for the same 03:00). A schedule's next() is a pure function of its
// argument, and jobs defined with the same pattern share one (schedule.ts): asked for the same
// instant as for the job before, it is not asked again, and the jobs keep one Date (about 100
// bytes of heap) between them, not one each. Nothing in the worker changes a slot's Date; it
// only replaces it.
import type { Schedule } from '../schedule/schedule.js';

/** One pass over the jobs (start, or a tick): next slots, shared between jobs with equal answers. */
export class NextSlots {
  #schedule: Schedule | undefined;
  #after = Number.NaN;
  #answer: Date | null = null;

  /** schedule.next(after); the previous answer when the same schedule was just asked for the same instant. */
  of(schedule: Schedule, after: Date): Date | null {
    const at = after.getTime();
    const last = this.#schedule;
    // the same next(), pattern and timezone: the same schedule (copies of one cached schedule are distinct objects)
    const same = last !== undefined && last.next === schedule.next && last.expression === schedule.expression && last.timezone === schedule.timezone;
    if (!same || at !== this.#after) {
      this.#answer = schedule.next(after);
      this.#schedule = schedule;
      this.#after = at;
    }
    return this.#answer;
  }
}
