// Acting on jobs as data, from any process with a client (an application, an admin script, the
// CLI): schedules defined at run time, pause and resume, run now, backfill. Each act is one call
// of a SQL function: the rules, and the record of who did it (leasehold.actions), live in SQL,
// so psql and other languages act on jobs exactly as this class does.
import { dbHandle, type Queryable } from '../db/handle.js';
import type { LeaseRuntime } from '../lease/runtime.js';
import * as manual from './manual-runs.js';
import type { BackfillOptions, BackfillResult, RunNowOptions, RunRequest, WaitForRequestOptions } from './manual-runs.js';
import { pauseJob, resumeJob, type PauseOptions, type PauseResult, type ResumeOptions, type ResumeResult } from './pause.js';
import { defineSchedule, getSchedule, listSchedules, removeSchedule, type DefineResult, type ScheduleInfo, type ScheduleOptions } from './schedules.js';

// Set by JobControl's static block: the client makes one per Leasehold (Leasehold.control).
let construct: (runtime: LeaseRuntime) => JobControl;

export class JobControl {
  /** The client's control pool, every statement with the client's query timeout. */
  readonly #db: Queryable;

  private constructor(runtime: LeaseRuntime) {
    this.#db = dbHandle(runtime.controlPool, { where: runtime.where, timeoutMs: runtime.queryTimeoutMs });
  }

  static {
    construct = (runtime) => new JobControl(runtime);
  }

  // Run now and backfill (manual-runs.ts; operator level; docs/scheduler.md "Run now", "Backfill").

  /**
   * Asks for one extra run of `job` now, subject to its overlap policy; resolves to the request
   * id. A worker with a handler for the job starts it within about half a second.
   */
  runNow(job: string, options: RunNowOptions): Promise<string> {
    return manual.runNow(this.#db, job, options);
  }

  /** Requests the job's scheduled slots in (from, to], run one at a time in slot order; each slot at most once. */
  backfill(job: string, options: BackfillOptions): Promise<BackfillResult> {
    return manual.backfill(this.#db, job, options);
  }

  /** A run-now or backfill request and what became of it; null if there is none. */
  request(id: string): Promise<RunRequest | null> {
    return manual.request(this.#db, id);
  }

  /** Waits until the request's run ended (or it was skipped), at most `timeout`; resolves to the request as it then is. */
  waitForRequest(id: string, options?: WaitForRequestOptions): Promise<RunRequest> {
    return manual.waitForRequest(this.#db, id, options);
  }

  // --- schedules defined at run time (schedules.ts) and pause/resume (pause.ts) ---

  /** Creates or changes a job defined as data (upsert by name); workers with its handler pick it up within a tick. */
  define(options: ScheduleOptions): Promise<DefineResult> {
    return defineSchedule(this.#db, options);
  }

  /** Removes a data job; its running run finishes under its lease. False when there was none. */
  remove(name: string, options: { by: string }): Promise<boolean> {
    return removeSchedule(this.#db, name, options);
  }

  /** Every job (code and data) not removed, by name. */
  list(filter?: { source?: 'code' | 'data' }): Promise<ScheduleInfo[]> {
    return listSchedules(this.#db, filter);
  }

  /** One job's definition, or null. */
  get(name: string): Promise<ScheduleInfo | null> {
    return getSchedule(this.#db, name);
  }

  /** Pauses a job fleet-wide (operator level): no slot of it is claimed until resume(). */
  pause(name: string, options: PauseOptions): Promise<PauseResult> {
    return pauseJob(this.#db, name, options);
  }

  /** Resumes a paused job: the workers apply its catch-up policy. */
  resume(name: string, options: ResumeOptions): Promise<ResumeResult> {
    return resumeJob(this.#db, name, options);
  }
}

/** The JobControl of a client (not exported from the package). */
export function jobControl(runtime: LeaseRuntime): JobControl {
  return construct(runtime);
}
