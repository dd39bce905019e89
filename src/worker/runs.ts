// The runs a worker has started and not yet finished: launching a claimed slot (prepareRun,
// then begin), counting it per job, and at shutdown recording those still running as aborted.
import type { LeaseholdEmitter } from '../observe/events.js';
import type { Logger } from '../observe/logger.js';
import { DenseSet } from '../lease/dense-set.js';
import type { LeaseTracker } from '../lease/tracker.js';
import type { ClaimRow, SchedulerStore } from './claims.js';
import type { PreparedRun } from './claim-ahead.js';
import { prepareRun, type HandlerWrapper, type RunEnvironment, type RunReport, type RunWatcher } from './execute-run.js';
import type { FinishQueue } from './finish-queue.js';
import type { JobDefinition } from '../job/job.js';
import { digestHash, nameHash } from './shares.js';

export interface JobState {
  job: JobDefinition;
  /** The next slot this worker will try to claim. */
  nextSlot: Date | null;
  running: number;
  /** nameHash(job.name), for the hash shares (shares.ts): a name's hash, once, not at every tick. */
  readonly shareHash: number;
  /** digestHash(job.name): with shareHash, the two hashes of a (job, slot) pair in a share's digest (share-reports.ts). */
  readonly digestHash: number;
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
  /**
   * The next slot whose claim-ahead window (claim-ahead.ts) this worker has passed: it was
   * claimed ahead, or left to be claimed at the slot. The next tick for it is then at its slot.
   */
  leadSeen?: Date | null | undefined;
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

/** A run this set started: what abandon() needs, and what its end updates. */
interface Started {
  job: string;
  fence: number;
  token: string | null;
  state: JobState;
  settled: (report: RunReport) => void;
  /** Its place in RunSet's set of started runs. */
  at: number;
}

export class RunSet implements RunWatcher<Started> {
  private readonly started = new DenseSet<Started>({ get: (s) => s.at, set: (s, at) => (s.at = at) });
  /** settled()'s callers, told when the last run has ended. */
  private idle: Array<() => void> = [];
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
    return this.started.size;
  }

  /** Starts the run of a claimed slot; `settled` gets its report (not called if it failed outside its handler). */
  launch(state: JobState, row: ClaimRow, holderKey: string | null, sentAt: number, settled: (report: RunReport) => void): void {
    this.prepare(state, row, holderKey, sentAt, settled)?.begin();
  }

  /** Adopts the lease of a claimed slot, to start its run at once (launch) or at its slot (claimed ahead); null: it could not, and the run ended aborted. */
  prepare(state: JobState, row: ClaimRow, holderKey: string | null, sentAt: number, settled: (report: RunReport) => void): PreparedRun | null {
    state.running++;
    const started: Started = { job: state.job.name, fence: Number(row.fence), token: row.token, state, settled, at: -1 };
    this.started.add(started);
    // the run tells this set when it ends (runEnded): nothing waits on a promise per run
    return prepareRun(this.environment(), state.job, row, holderKey, sentAt, this, started);
  }

  /** A run ended (its report) or failed outside its handler (the error). */
  runEnded(started: Started, report: RunReport | undefined, error?: unknown): void {
    if (!this.started.delete(started)) return;
    started.state.running--;
    if (this.started.size === 0 && this.idle.length > 0) {
      const idle = this.idle;
      this.idle = [];
      for (const resolve of idle) resolve();
    }
    const { logger } = this.settings;
    if (report === undefined) {
      logger.error({ event: 'run:error', job: started.job, err: String(error) }, 'a run failed outside its handler');
      return;
    }
    try {
      started.settled(report);
    } catch (caught) {
      logger.error({ event: 'run:error', job: started.job, err: String(caught) }, 'a run failed outside its handler');
    }
  }

  /** Resolves when no run is left (every run started so far has ended, and any started since). */
  settled(): Promise<void> {
    if (this.started.size === 0) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }

  /**
   * After the grace period: record still-running runs as aborted and release their leases
   * (their handlers may still be running, but their fenced writes are now refused). When a
   * handler settles later, its own finish_run finds the run already recorded and does nothing.
   */
  async abandon(): Promise<void> {
    await Promise.allSettled(
      this.started.snapshot().map(({ job, fence, token }) =>
        this.settings.store.finish(job, fence, token, 'aborted', 'did not stop within the shutdown grace period', 1),
      ),
    );
  }
}

/** A job's state before its first slot is worked out. */
export function newState(job: JobDefinition): JobState {
  return { job, nextSlot: null, running: 0, shareHash: nameHash(job.name), digestHash: digestHash(job.name), aheadJob: undefined, aheadFrom: undefined, aheadNext: undefined };
}
