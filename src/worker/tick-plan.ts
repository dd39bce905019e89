// What a tick claims, worked out from the jobs' states: which slots are due now (this worker's
// hash share first, the others' for the second pass), which are due within the lead of a claim
// ahead (claim-ahead.ts), and when the next tick is. Advances each due job's next slot.
import type { Logger } from '../observe/logger.js';
import { fireTime, jobClock } from '../schedule/jitter.js';
import { slotsBetween } from '../schedule/schedule.js';
import { MAX_MISSED_RECORDED } from './catch-up.js';
import type { ClaimRequest } from './claims.js';
import { NextSlots } from './next-slots.js';
import type { JobState } from './runs.js';
import { ShareDigest } from './share-reports.js';
import { owns, slotHash, type Share } from './shares.js';

export interface TickPlan {
  /** Due now, in this worker's share: claimed at once. */
  mine: ClaimRequest[];
  /** Due now, in the other workers' shares: claimed after them (the second pass). */
  others: ClaimRequest[];
  /** Due within the lead, in this worker's share: claimed ahead; their states, and when each run starts. */
  ahead: ClaimRequest[];
  aheadStates: JobState[];
  aheadStarts: Date[];
  /** The states whose next slot this tick advanced (their look-ahead is worked out afterwards). */
  advanced: JobState[];
  /** Jobs of every share due now or claimed ahead by this tick's workers: the size of the tick (claim-ahead.ts). */
  dueJobs: number;
  /** The digests of `mine` and `ahead`, reported once decided (share-reports.ts). */
  mineDigest: ShareDigest;
  aheadDigest: ShareDigest;
  /** Per request of `others`: its owner's index in the share; per index, the digest of its requests. */
  othersOwners: number[];
  othersDigests: ShareDigest[];
}

/**
 * The tick at `tickNow` (the database-corrected clock) with a claim-ahead lead of `leadMs` (0:
 * none). A state whose slot is within the lead is marked (leadSeen) so that the next tick for
 * it is at its slot: claimed ahead by this worker if it is in its share and the lease was free,
 * else claimed then as usual.
 */
export function planTick(states: readonly JobState[], tickNow: Date, share: Share, leadMs: number, logger: Logger): TickPlan {
  const plan: TickPlan = {
    mine: [], others: [], ahead: [], aheadStates: [], aheadStarts: [], advanced: [], dueJobs: 0,
    mineDigest: new ShareDigest(), aheadDigest: new ShareDigest(), othersOwners: [],
    othersDigests: Array.from({ length: share?.count ?? 0 }, () => new ShareDigest()),
  };
  const nextSlots = new NextSlots();
  for (const state of states) {
    // jitter: each job reads the clock behind by its offset, so its slots, its lateness and
    // its next slot are all judged from its fire times (slot + offset)
    const offset = state.job.jitterOffsetMs;
    const now = jobClock(tickNow, offset);
    const slot = state.nextSlot;
    if (!slot) continue;
    if (slot > now) {
      if (leadMs > 0 && state.leadSeen !== slot && slot.getTime() - now.getTime() <= leadMs) {
        state.leadSeen = slot;
        plan.dueJobs++;
        const hash = slotHash(state.shareHash, slot);
        if (owns(share, hash)) {
          plan.ahead.push({ job: state.job, slot });
          plan.aheadStates.push(state);
          plan.aheadStarts.push(fireTime(slot, offset));
          plan.aheadDigest.addPair(state.shareHash, state.digestHash, slot);
        }
      }
      continue;
    }
    // Usually one slot is due: the one after it is still ahead (one schedule step per job,
    // for thousands of jobs a tick). If this worker slept through several slots (a blocked
    // event loop, a suspended VM), claim only the latest: the others ran elsewhere or are
    // recorded as missed.
    let latest = slot;
    const following = nextAfter(state, latest, nextSlots);
    if (following === null || following > now) {
      state.nextSlot = following;
    } else {
      const slots = slotsBetween(state.job.schedule, new Date(slot.getTime() - 1), now, MAX_MISSED_RECORDED);
      latest = slots[slots.length - 1] ?? slot;
      state.nextSlot = state.job.schedule.next(now);
    }
    if (now.getTime() - latest.getTime() > state.job.startingDeadlineMs) {
      logger.warn({ event: 'slot:late', job: state.job.name, slot: latest.toISOString() }, `slot of "${state.job.name}" is past its starting deadline; not claiming it`);
      continue;
    }
    const hash = slotHash(state.shareHash, latest);
    if (owns(share, hash)) {
      plan.mine.push({ job: state.job, slot: latest });
      plan.mineDigest.addPair(state.shareHash, state.digestHash, latest);
    } else {
      const owner = hash % (share as { count: number }).count;
      plan.others.push({ job: state.job, slot: latest });
      plan.othersOwners.push(owner);
      (plan.othersDigests[owner] as ShareDigest).addPair(state.shareHash, state.digestHash, latest);
    }
    plan.advanced.push(state);
    plan.dueJobs++;
  }
  return plan;
}

/**
 * A slot claimed ahead: its job moves on to the slot after it. By time, not by Date: the claim's
 * rows share one Date per instant, and states whose slots were worked out apart hold others
 * (compared by identity, most of a share claimed ahead was claimed again at its slot).
 */
export function advancePast(state: JobState, slot: Date, nextSlots: NextSlots): void {
  if (state.nextSlot?.getTime() !== slot.getTime()) return;
  state.nextSlot = nextAfter(state, slot, nextSlots);
}

/** The job's slot after `slot`: worked out by lookAhead() after the previous tick, or now. */
function nextAfter(state: JobState, slot: Date, nextSlots: NextSlots): Date | null {
  return state.aheadJob === state.job && state.aheadFrom?.getTime() === slot.getTime() ? (state.aheadNext ?? null) : nextSlots.of(state.job.schedule, slot);
}

/**
 * When the next tick is due (epoch ms on the database-corrected clock): the earliest fire time
 * (slot + jitter offset) of any job, less the lead for a slot not yet looked at for a claim
 * ahead. Null: no job has a next slot.
 */
export function nextTickAt(states: readonly JobState[], leadMs: number): number | null {
  let earliest: number | null = null;
  let seen: Date | null = null;
  let seenOffset = 0;
  let seenLead = 0;
  for (const state of states) {
    const slot = state.nextSlot;
    if (slot === null) continue;
    const lead = leadMs > 0 && state.leadSeen !== slot ? leadMs : 0;
    // jobs sharing a next slot share its Date (next-slots.ts): one sum for a run of them, not
    // a boxed number per job each time the timer is set
    if (slot === seen && state.job.jitterOffsetMs === seenOffset && lead === seenLead) continue;
    seen = slot;
    seenOffset = state.job.jitterOffsetMs;
    seenLead = lead;
    // a job with jitter fires its slot at slot + offset (src/schedule/jitter.ts)
    const at = slot.getTime() + seenOffset - lead;
    if (earliest === null || at < earliest) earliest = at;
  }
  return earliest;
}

/** How many jobs fall due at the earliest next slot (the first tick's prior: claim-ahead.ts). */
export function dueAtNextSlot(states: readonly JobState[]): number {
  let earliest = Number.POSITIVE_INFINITY;
  let count = 0;
  for (const state of states) {
    const at = state.nextSlot?.getTime();
    if (at === undefined) continue;
    if (at < earliest) {
      earliest = at;
      count = 0;
    }
    if (at === earliest) count++;
  }
  return count;
}

/** Works out each state's slot after its next one (JobState.aheadNext). */
export function lookAhead(states: readonly JobState[]): void {
  const nextSlots = new NextSlots();
  for (const state of states) {
    const from = state.nextSlot;
    state.aheadJob = state.job;
    state.aheadFrom = from;
    state.aheadNext = from ? nextSlots.of(state.job.schedule, from) : null;
  }
}
