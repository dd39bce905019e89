// Which scheduled occurrence a call from someone else's scheduler belongs to.
//
// Every replica's scheduler fires at its own time: its clock is off by some milliseconds or
// seconds, its event loop may be busy. The call is mapped to the occurrence (slot) at or just
// before the moment of the call on the database clock; a call up to `toleranceMs` before an
// occurrence counts for that occurrence (the replica's clock runs ahead), and then waits until
// the occurrence is due on the database clock. So replicas whose clocks differ by less than the
// tolerance all map a firing to the same slot, and the database lets one of them claim it.
import type { Schedule } from '../schedule/schedule.js';

/** Default tolerance: half the schedule's interval, at most 30 s. */
export function defaultToleranceMs(schedule: Schedule): number {
  return Math.min(Math.floor(schedule.nominalIntervalMs / 2), 30_000);
}

/** The last occurrence at or before `at`, or null when the schedule has none before it. */
export function occurrenceAtOrBefore(schedule: Schedule, at: Date): Date | null {
  const t = at.getTime();
  // Look back over a window that doubles until it holds an occurrence (a weekday cron's
  // weekend gap is longer than its nominal interval).
  for (let span = Math.max(schedule.nominalIntervalMs, 1_000), i = 0; i < 24; i++, span *= 2) {
    let slot = schedule.next(new Date(t - span));
    if (!slot || slot.getTime() > t) continue;
    for (let next = schedule.next(slot); next && next.getTime() <= t; next = schedule.next(next)) slot = next;
    return slot;
  }
  return null;
}

/** The occurrence a call at database time `now` belongs to. */
export function occurrenceFor(schedule: Schedule, now: Date, toleranceMs: number): Date | null {
  return occurrenceAtOrBefore(schedule, new Date(now.getTime() + toleranceMs));
}
