// Slots that neither ran nor were skipped between a job's claims (the worker was down, or the
// slot was past its starting deadline) are recorded as missed: looked for after the claim's
// runs have started, and recorded for every job of a claim in one statement.
import type { LeaseholdEmitter } from '../observe/events.js';
import type { Logger } from '../observe/logger.js';
import { slotsBetween } from '../schedule/schedule.js';
import { MAX_MISSED_RECORDED } from './catch-up.js';
import type { SchedulerStore } from './claims.js';
import type { StepRecorder } from './clock-steps.js';
import type { JobDefinition } from '../job/job.js';
import { NextSlots } from './next-slots.js';

/** A claimed slot of a job that had a claimed slot before: `previous`. */
export interface Follower {
  job: JobDefinition;
  previous: Date;
  claimed: Date;
}

export interface MissedSlotsParts {
  store: SchedulerStore;
  steps: StepRecorder;
  events: LeaseholdEmitter;
  logger: Logger;
  holder: string;
}

export class MissedSlots {
  constructor(private readonly parts: MissedSlotsParts) {}

  /** After every run of a claim has started: record the slots the claims in `followers` skipped over. */
  check(followers: readonly Follower[]): void {
    setImmediate(() => {
      const missed = followers.filter(missedBetween(new NextSlots()));
      if (missed.length > 0) void this.record(missed);
    });
  }

  // Slots inside a stored clock step window are dropped by record_missed() itself; so the
  // windows this worker saw are stored first (missed slots are not recorded until they are).
  private async record(claims: readonly Follower[]): Promise<void> {
    const { store, steps, events, logger, holder } = this.parts;
    const missed: Array<{ job: string; slots: Date[] }> = [];
    for (const { job, previous, claimed } of claims) {
      const between = slotsBetween(job.schedule, previous, new Date(claimed.getTime() - 1), MAX_MISSED_RECORDED);
      if (between.length > 0) missed.push({ job: job.name, slots: between });
    }
    if (missed.length === 0) return;
    if (!(await steps.flush())) {
      logger.warn({ event: 'slot:missed-record-failed', jobs: missed.length }, 'not recording missed slots: a clock step window is not stored yet');
      return;
    }
    try {
      const recorded = await store.recordMissedMany(missed, 'no worker claimed it in time (downtime or past its starting deadline)', holder);
      for (const [job, slots] of recorded) events.emit('slot:missed', { job, slots });
    } catch (error) {
      logger.warn({ event: 'slot:missed-record-failed', err: String(error) }, 'could not record missed slots');
    }
  }
}

/**
 * Whether a slot of the job lies strictly between `previous` and `claimed` (one schedule step
 * each; the usual answer is no). Jobs of one schedule that followed the same slot share one step.
 */
function missedBetween(nextSlots: NextSlots): (claim: Follower) => boolean {
  return ({ job, previous, claimed }) => {
    const next = nextSlots.of(job.schedule, previous);
    return next !== null && next < claimed;
  };
}
