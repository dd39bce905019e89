// At start: which already-due slots of each job to claim at once. Slots after the last claimed
// one that are already due mean all workers were down (or the job is new to the fleet). Which
// run is up to the job's catch-up policy; the others are recorded as missed when the next slot
// is claimed. A last slot claimed ahead by a worker gone before its start (killed in the lead) is
// due again: claim() takes it back (a sole worker restarted after it ran it nowhere otherwise).
import type { Logger } from '../observe/logger.js';
import { jobClock } from '../schedule/jitter.js';
import { slotsBetween } from '../schedule/schedule.js';
import type { ClaimRequest, SchedulerStore } from './claims.js';
import type { JobState } from './runs.js';
import { NextSlots } from './next-slots.js';

export const MAX_MISSED_RECORDED = 1_000;

/** A job's last claimed slot, as register_jobs() and schedule_changes() give it to a starting worker. */
export interface LastSlot {
  slot: Date;
  /** Claimed ahead, never marked started, and its holder gone: due again (last_slot_unstarted). */
  unstarted: boolean;
}

/** A LastSlot from a row's columns (null: never claimed). */
export function lastSlotOf(row: { last_slot: Date | null; last_slot_unstarted: boolean | null }): LastSlot | null {
  return row.last_slot ? { slot: row.last_slot, unstarted: row.last_slot_unstarted === true } : null;
}

/** Sets each job's next slot and returns the catch-up claims (queueing the extra slots of { all: n }). */
export async function planStart(
  states: Iterable<Pick<JobState, 'job' | 'nextSlot'>>,
  lastSlots: ReadonlyMap<string, LastSlot | null>,
  startNow: Date,
  store: SchedulerStore,
  logger: Logger,
): Promise<ClaimRequest[]> {
  const catchUp: ClaimRequest[] = [];
  const nextSlots = new NextSlots();
  for (const state of states) {
    const { job } = state;
    // with jitter, a slot whose fire time (slot + offset) is still ahead is the next one, not a catch-up
    const now = jobClock(startNow, job.jitterOffsetMs);
    const last = lastSlots.get(job.name) ?? null;
    state.nextSlot = nextSlots.of(job.schedule, now);
    if (!last || job.catchUp === 'none') continue;
    // a slot still ahead is the tick's to claim again (claim() at the slot)
    const again = last.unstarted && last.slot.getTime() <= now.getTime() ? [last.slot] : [];
    const due = [...again, ...slotsBetween(job.schedule, last.slot, now, MAX_MISSED_RECORDED - again.length)];
    if (due.length === 0) continue;
    if (job.catchUp === 'latest') {
      const latest = due[due.length - 1] as Date;
      if (now.getTime() - latest.getTime() <= job.startingDeadlineMs) catchUp.push({ job, slot: latest });
    } else {
      const chosen = due.slice(-job.catchUp.all);
      await store.enqueue(job.name, chosen);
      catchUp.push({ job, slot: chosen[0] as Date });
      logger.info({ event: 'catch-up', job: job.name, slots: chosen.length }, `catching up ${chosen.length} missed slot(s) of "${job.name}"`);
    }
  }
  return catchUp;
}
