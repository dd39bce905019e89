// At start: which already-due slots of each job to claim at once. Slots after the last claimed
// one that are already due mean all workers were down (or the job is new to the fleet). Which
// run is up to the job's catch-up policy; the others are recorded as missed when the next slot
// is claimed.
import type { Logger } from '../observe/logger.js';
import { jobClock } from '../schedule/jitter.js';
import { slotsBetween } from '../schedule/schedule.js';
import type { ClaimRequest, SchedulerStore } from './claims.js';
import type { JobState } from './runs.js';
import { NextSlots } from './next-slots.js';

export const MAX_MISSED_RECORDED = 1_000;

/** Sets each job's next slot and returns the catch-up claims (queueing the extra slots of { all: n }). */
export async function planStart(
  states: Iterable<Pick<JobState, 'job' | 'nextSlot'>>,
  lastSlots: Map<string, Date | null>,
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
    const due = slotsBetween(job.schedule, last, now, MAX_MISSED_RECORDED);
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
