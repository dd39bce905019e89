// The runs a worker has started and not yet finished: launching a claimed slot (executeRun),
// counting it per job, and at shutdown recording those still running as aborted.
import type { LeaseholdEmitter } from '../observe/events.js';
import type { Logger } from '../observe/logger.js';
import type { LeaseTracker } from '../lease/tracker.js';
import type { ClaimRow, SchedulerStore } from './claims.js';
import { executeRun, type HandlerWrapper, type RunEnvironment, type RunReport } from './execute-run.js';
import type { FinishQueue } from './finish-queue.js';
import type { JobDefinition } from './job.js';

export interface JobState {
  job: JobDefinition;
  /** The next slot this worker will try to claim. */
  nextSlot: Date | null;
  running: number;
  /**
   * The slot after nextSlot, worked out after the previous tick's claim was sent, so that the
   * next tick sends its claim without a schedule step per job first. Valid while `aheadJob` and
   * `aheadFrom` are still the state's job and nextSlot (a later write to nextSlot replaces it).
   * Three fields, not an object: a tick of 100,000 jobs would make 100,000 objects that live
   * until the next tick.
   */
  aheadJob?: JobDefinition | undefined;
  aheadFrom?: Date | null | undefined;
  aheadNext?: Date | null | undefined;
}

export interface RunSetSettings {
  tracker: LeaseTracker;
  store: SchedulerStore;
  finisher: FinishQueue;
  events: LeaseholdEmitter;
  logger: Logger;
  holder: string;
  /** Fires when the worker begins to stop: handlers see it through their signal. */
  shutdown: AbortSignal;
}

export class RunSet {
  private readonly runs = new Set<Promise<RunReport>>();
  /** job, fence and token of runs whose handler has not settled. */
  private readonly pending = new Set<{ job: string; fence: number; token: string | null }>();
  /** Worker.wrapHandlers(): every handler call from now on runs inside it (undefined: none). */
  wrapHandler: HandlerWrapper | undefined;

  /** What every run shares, made again only when wrapHandler changes. */
  private env: RunEnvironment | undefined;

  constructor(private readonly settings: RunSetSettings) {}

  private environment(): RunEnvironment {
    if (this.env?.wrapHandler !== this.wrapHandler || !this.env) {
      const { tracker, finisher, events, logger, holder, shutdown } = this.settings;
      this.env = { tracker, finisher, logger, events, holder, shutdown, wrapHandler: this.wrapHandler };
    }
    return this.env;
  }

  get size(): number {
    return this.runs.size;
  }

  /** Starts the run of a claimed slot; `settled` gets its report (not called if it failed outside its handler). */
  launch(state: JobState, row: ClaimRow, holderKey: string | null, sentAt: number, settled: (report: RunReport) => void): void {
    const { job } = state;
    state.running++;
    const entry = { job: job.name, fence: Number(row.fence), token: row.token };
    this.pending.add(entry);
    const { logger } = this.settings;
    const run = executeRun(this.environment(), job, row, holderKey, sentAt);
    this.runs.add(run);
    const done = () => {
      this.runs.delete(run);
      this.pending.delete(entry);
      state.running--;
    };
    // one reaction per run (a worker starts thousands per tick), not a then/catch/finally chain
    run.then(
      (report) => {
        done();
        try {
          settled(report);
        } catch (error) {
          logger.error({ event: 'run:error', job: job.name, err: String(error) }, 'a run failed outside its handler');
        }
      },
      (error: unknown) => {
        done();
        logger.error({ event: 'run:error', job: job.name, err: String(error) }, 'a run failed outside its handler');
      },
    );
  }

  /** Resolves when every run started so far has settled. */
  async settled(): Promise<void> {
    await Promise.allSettled([...this.runs]);
  }

  /**
   * After the grace period: record still-running runs as aborted and release their leases
   * (their handlers may still be running, but their fenced writes are now refused). When a
   * handler settles later, its own finish_run finds the run already recorded and does nothing.
   */
  async abandon(): Promise<void> {
    await Promise.allSettled(
      [...this.pending.values()].map(({ job, fence, token }) =>
        this.settings.store.finish(job, fence, token, 'aborted', 'did not stop within the shutdown grace period', 1),
      ),
    );
  }
}
