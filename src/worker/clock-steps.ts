// What the worker does when the database clock steps (the database's time is the authority).
//
// Forward: the slots the step jumped over never existed in real time. The worker stores the
// window in leasehold.clock_steps, and record_missed() records none of them as missed (for
// workers started later too); which of them run is the job's catch-up policy, as after downtime
// ('none': none, 'latest': the latest if within the starting deadline, { all: n }: the last n).
// Backward: the slots ahead are further away now; the worker sleeps until they are due on the
// database's new time (a claim fired early is refused as not due and re-armed, never dropped).
import type { Logger } from '../observe/logger.js';
import type { ClockStep } from '../schedule/database-clock.js';
import { jobClock } from '../schedule/jitter.js';
import type { Schedule } from '../schedule/schedule.js';
import type { ClaimRequest, SchedulerStore } from './claims.js';
import type { JobDefinition } from '../job/job.js';

interface JobState {
  job: JobDefinition;
  nextSlot: Date | null;
}

/**
 * Stores the windows forward steps jumped over in leasehold.clock_steps, in order, until
 * each is stored. record_missed() drops the slots inside a stored window, so this worker
 * records missed slots only once every window it saw is stored (see `flush`).
 */
export class StepRecorder {
  private readonly pending: Array<{ from: Date; to: Date }> = [];
  private flushing: Promise<boolean> = Promise.resolve(true);

  constructor(
    private readonly store: SchedulerStore,
    private readonly holder: string,
    private readonly logger: Logger,
  ) {}

  /** Queues the window (from, to] and starts storing it. */
  add(from: Date, to: Date): Promise<boolean> {
    this.pending.push({ from, to });
    // a database that stays away for a long time: the oldest windows are given up
    if (this.pending.length > 100) this.pending.shift();
    return this.flush();
  }

  /** Stores the windows not stored yet; true when none is left. Never rejects. */
  flush(): Promise<boolean> {
    this.flushing = this.flushing.then(async () => {
      for (let window = this.pending[0]; window; window = this.pending[0]) {
        try {
          await this.store.recordClockStep(window.from, window.to, this.holder);
          this.pending.shift();
        } catch (error) {
          this.logger.warn({ event: 'clock:step-record-failed', err: String(error) }, 'could not store a clock step window yet; missed slots wait for it');
          return false;
        }
      }
      return true;
    });
    return this.flushing;
  }
}

const MAX_COUNTED = 1_000_000;

/** The slots in (after, until]: how many there are (counted up to a bound) and the last `keep`. */
export function lastSlots(schedule: Schedule, after: Date, until: Date, keep: number): { count: number; last: Date[] } {
  const last: Date[] = [];
  let count = 0;
  for (let slot = schedule.next(after); slot && slot <= until && count < MAX_COUNTED; slot = schedule.next(slot)) {
    count++;
    if (keep > 0) {
      last.push(slot);
      if (last.length > keep) last.shift();
    }
  }
  return { count, last };
}

export interface StepPlan {
  /** Slots inside the step. */
  skipped: number;
  /** Slots to run, oldest first (for { all: n }, queued behind the first). */
  run: Date[];
}

/** Which of the slots a forward step jumped over run, by the job's catch-up policy. */
export function planAfterStep(job: JobDefinition, after: Date, now: Date): StepPlan {
  const keep = job.catchUp === 'none' ? 0 : job.catchUp === 'latest' ? 1 : job.catchUp.all;
  const { count, last } = lastSlots(job.schedule, after, now, keep);
  if (job.catchUp === 'latest') {
    const latest = last[last.length - 1];
    const inTime = latest !== undefined && now.getTime() - latest.getTime() <= job.startingDeadlineMs;
    return { skipped: count, run: inTime && latest ? [latest] : [] };
  }
  return { skipped: count, run: last };
}

export function describePolicy(job: JobDefinition): string {
  return typeof job.catchUp === 'object' ? `{ all: ${job.catchUp.all} }` : `'${job.catchUp}'`;
}

/**
 * After a forward step: each job's next slot moves past the step, the jumped-over slots are
 * logged (not recorded as missed), and the ones the catch-up policy runs are returned as
 * claims ({ all: n } queues the rest behind the first).
 */
export function followForwardStep(states: JobState[], step: ClockStep, stepNow: Date, store: SchedulerStore, logger: Logger): ClaimRequest[] {
  const requests: ClaimRequest[] = [];
  for (const state of states) {
    // with jitter, on the job's clock (behind by its offset): see src/schedule/jitter.ts
    const now = jobClock(stepNow, state.job.jitterOffsetMs);
    if (!state.nextSlot || state.nextSlot > now) continue;
    const { job } = state;
    const plan = planAfterStep(job, new Date(state.nextSlot.getTime() - 1), now);
    state.nextSlot = job.schedule.next(now);
    logger.warn(
      { event: 'clock:step-slots', job: job.name, deltaMs: step.deltaMs, slots: plan.skipped, running: plan.run.length, catchUp: describePolicy(job) },
      `"${job.name}": the database clock stepped +${(step.deltaMs / 1000).toFixed(1)} s over ${plan.skipped} slot(s); ` +
        `they never existed, so none is recorded as missed; catch-up ${describePolicy(job)} runs ${plan.run.length} of them`,
    );
    const first = plan.run[0];
    if (!first) continue;
    if (plan.run.length > 1) {
      void store.enqueue(job.name, plan.run).catch((error: unknown) => logger.warn({ event: 'catch-up:enqueue-failed', err: String(error) }, 'could not queue catch-up slots'));
    }
    requests.push({ job, slot: first });
  }
  return requests;
}

/** After a backward step nothing moves: the next slots are simply further away on the database's time. */
export function reportBackwardStep(states: JobState[], step: ClockStep, logger: Logger): void {
  const next = states
    .map((s) => s.nextSlot)
    .filter((d): d is Date => d !== null)
    .sort((a, b) => a.getTime() - b.getTime())[0];
  logger.warn(
    { event: 'clock:step-back', deltaMs: step.deltaMs, nextSlot: next?.toISOString() },
    `the database clock stepped back ${(-step.deltaMs / 1000).toFixed(1)} s; scheduling resumes on its time (next slot ${next?.toISOString() ?? 'none'})`,
  );
}
