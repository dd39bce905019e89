// Jobs defined as data (leasehold.define_schedule) and the pause state of every job, followed at
// run time: one leasehold.schedule_changes() call per refresh, a range of the index on revision
// (nothing changed: no rows). Data jobs whose handler this worker has become JobStates of the
// engine; removed ones, or ones whose handler changed to one this worker lacks, leave it; a
// changed one is replaced in place (its running run finishes under its lease, the new schedule
// applies from the next slot). The database enforces pause and removal in claim(); this feed
// only spares the workers claims they would lose, and applies catch-up on resume.
import { storedScheduleSpec, type StoredJobRow } from '../control/job-row.js';
import { timedQuery } from '../db/connection.js';
import { ScheduleDefinitionError } from '../errors.js';
import type { LeaseRuntime } from '../lease/runtime.js';
import type { Logger } from '../observe/logger.js';
import { slotsBetween } from '../schedule/schedule.js';
import { lastSlotOf, MAX_MISSED_RECORDED, planStart, type LastSlot } from './catch-up.js';
import { NOTIFIED_POLL_MS } from './change-listener.js';
import type { ClaimRequest, SchedulerStore } from './claims.js';
import { defineJob, type CatchUpPolicy, type JobContext, type JobDefinition, type OverlapPolicy } from '../job/job.js';
import type { JobState } from './runs.js';

/** The context of a data job's run: a code job's, plus its handler name and stored payload. */
export interface DataJobContext<Payload = unknown> extends JobContext {
  /** The JSON payload stored with the schedule (`control.define({ payload })`). */
  payload: Payload;
  /** The handler name the schedule names. */
  handler: string;
}

/** A handler of data jobs, registered by name: `startWorker({ handlers: { 'sync-customer': fn } })`. */
export type DataJobHandler = (context: DataJobContext) => Promise<unknown>;

/** What the worker stores for each data job beyond its JobDefinition (timeout and jitter are applied by their options). */
export interface DataJobSettings {
  handler: string;
  payload: unknown;
  timeoutMs: number | null;
  jitterMs: number | null;
  revision: number;
}

const dataJobs = new WeakMap<JobDefinition, DataJobSettings>();

/** The stored settings of a data job's definition; undefined for a code job. */
export function dataJobSettings(job: JobDefinition): DataJobSettings | undefined {
  return dataJobs.get(job);
}

export interface FeedRow extends StoredJobRow {
  removed: boolean;
  last_slot: Date | null;
  database_time: Date;
  last_slot_unstarted: boolean | null;
}

/** The engine as the feed sees it (engine.ts). */
export interface FeedTarget {
  stateOf(name: string): JobState | undefined;
  addJob(job: JobDefinition): JobState;
  removeJob(name: string): void;
  claimNow(requests: ClaimRequest[]): void;
  wake(): void;
}

export interface JobFeedParts {
  runtime: LeaseRuntime;
  store: SchedulerStore;
  logger: Logger;
  holder: string;
  handlers: Readonly<Record<string, DataJobHandler>>;
  /** This worker's code jobs: a data row under one of their names is not run here (code wins). */
  codeNames: ReadonlySet<string>;
  refreshMs: number;
}

const PAGE = 5_000;

interface PauseSeen {
  at: Date;
  by: string | null;
  reason: string | null;
}

export class JobFeed {
  private revision = 0;
  private target: FeedTarget | undefined;
  private timer: NodeJS.Timeout | undefined;
  private running = false;
  private polling: Promise<void> | undefined;
  /** Jobs (code or data) this worker knows to be paused. */
  private readonly paused = new Map<string, PauseSeen>();
  /** name -> revision of a definition already reported as unusable. */
  private readonly reported = new Map<string, number>();
  private failing = false;
  private readonly handlerNames: string[];
  /** Changes arrive as notifications (change-listener.ts): the polls are the slow fallback. */
  private notified = false;
  /** A poke came while a refresh ran: refresh again right after it. */
  private again = false;

  constructor(private readonly parts: JobFeedParts) {
    this.handlerNames = Object.keys(parts.handlers);
  }

  isPaused(name: string): boolean {
    return this.paused.has(name);
  }

  /**
   * Reads every stored definition (paged) before the engine starts: the data jobs this worker
   * runs, their last slots for the catch-up plan, and which jobs are paused.
   */
  async load(): Promise<{ jobs: JobDefinition[]; lastSlots: Map<string, LastSlot | null> }> {
    // Only this worker's data jobs and the paused jobs (schedule_changes' snapshot), not every
    // definition of the fleet; changes from the revision read first on come through the feed (a
    // change made while the snapshot is read is applied twice, which changes nothing).
    const newest = await this.newestRevision();
    const latest = new Map<string, FeedRow>();
    let after = 0;
    for (;;) {
      const { runtime } = this.parts;
      const { rows } = await timedQuery<FeedRow & Record<string, unknown>>(
        runtime.controlPool,
        'select * from leasehold.schedule_changes($1, $2, $3, true)',
        [after, this.handlerNames, PAGE],
        runtime.queryTimeoutMs,
        runtime.where,
      );
      for (const row of rows) latest.set(row.name, row);
      const last = rows[rows.length - 1];
      if (!last || rows.length < PAGE) break;
      after = Number(last.revision);
    }
    this.revision = newest;
    const jobs: JobDefinition[] = [];
    const lastSlots = new Map<string, LastSlot | null>();
    for (const row of latest.values()) {
      if (row.paused_at && !row.removed) this.paused.set(row.name, { at: row.paused_at, by: row.paused_by, reason: row.pause_reason });
      const job = this.definitionOf(row);
      if (!job) continue;
      jobs.push(job);
      lastSlots.set(job.name, lastSlotOf(row));
    }
    return { jobs, lastSlots };
  }

  /** Follows changes from now on, every refreshMs (or when notified, setNotified). */
  start(target: FeedTarget): void {
    this.target = target;
    this.running = true;
    this.arm();
  }

  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    await this.polling?.catch(() => undefined);
  }

  /** Refreshes now (a notification came, or listening began or ended). */
  poke(): void {
    if (!this.running) return;
    if (this.polling) this.again = true;
    else this.arm(0);
  }

  /** While notified, a refresh every NOTIFIED_POLL_MS (at least refreshMs) heals a lost notification. */
  setNotified(notified: boolean): void {
    this.notified = notified;
  }

  private arm(ms = this.notified ? Math.max(this.parts.refreshMs, NOTIFIED_POLL_MS) : this.parts.refreshMs): void {
    if (!this.running) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.polling = this.poll().finally(() => {
        this.polling = undefined;
        const now = this.again;
        this.again = false;
        if (now) this.arm(0);
        else this.arm();
      });
    }, ms);
  }

  /** One refresh: applies every change since the last revision seen. */
  async poll(): Promise<void> {
    try {
      for (;;) {
        const rows = await this.fetch();
        for (const row of rows) if (this.running) await this.apply(row);
        if (rows.length < PAGE || !this.running) break;
      }
      if (this.failing) this.parts.logger.info({ event: 'schedules:refresh-recovered' }, 'reading schedule changes works again');
      this.failing = false;
    } catch (error) {
      // logged once per streak of failures: a database outage is reported elsewhere too
      if (!this.failing) this.parts.logger.warn({ event: 'schedules:refresh-failed', err: String(error) }, 'could not read schedule changes; retrying');
      this.failing = true;
    }
  }

  /** The newest revision of leasehold.jobs (0 for none). */
  private async newestRevision(): Promise<number> {
    const { runtime } = this.parts;
    const { rows } = await timedQuery<{ revision: string }>(
      runtime.controlPool,
      'select coalesce(max(revision), 0)::text as revision from leasehold.jobs',
      [],
      runtime.queryTimeoutMs,
      runtime.where,
    );
    return Number(rows[0]?.revision ?? 0);
  }

  private async fetch(): Promise<FeedRow[]> {
    const { runtime } = this.parts;
    const { rows } = await timedQuery<FeedRow & Record<string, unknown>>(
      runtime.controlPool,
      'select * from leasehold.schedule_changes($1, $2, $3)',
      [this.revision, this.handlerNames, PAGE],
      runtime.queryTimeoutMs,
      runtime.where,
    );
    const last = rows[rows.length - 1];
    if (last) this.revision = Number(last.revision);
    return rows;
  }

  private async apply(row: FeedRow): Promise<void> {
    const target = this.target;
    if (!target) return;
    const wasPaused = this.paused.get(row.name);
    const nowPaused = row.paused_at !== null && !row.removed;
    if (nowPaused && row.paused_at) this.paused.set(row.name, { at: row.paused_at, by: row.paused_by, reason: row.pause_reason });
    else this.paused.delete(row.name);

    const current = target.stateOf(row.name);
    const currentIsData = current !== undefined && dataJobs.has(current.job);
    let state: JobState | undefined = current;
    if (row.source === 'data' && !this.parts.codeNames.has(row.name)) {
      const job = this.definitionOf(row);
      if (!job) {
        if (currentIsData) target.removeJob(row.name);
        return;
      }
      if (current && currentIsData) {
        const old = current.job;
        current.job = job;
        if (old.schedule.expression !== job.schedule.expression || old.schedule.timezone !== job.schedule.timezone) {
          // the new schedule applies from its next slot (define_schedule moved last_slot to now)
          current.nextSlot = nowPaused ? null : job.schedule.next(row.database_time);
          target.wake();
        }
      } else {
        state = target.addJob(job);
        if (nowPaused) {
          state.nextSlot = null;
        } else {
          await this.plan(state, row);
        }
        this.parts.logger.info({ event: 'schedule:added', job: job.name, handler: row.handler }, `schedule "${job.name}" added (${job.schedule.description})`);
        return;
      }
    } else if (currentIsData) {
      // removed, handed to a handler this worker lacks, or taken over by a code job
      target.removeJob(row.name);
      this.parts.logger.info({ event: 'schedule:removed', job: row.name }, `schedule "${row.name}" removed from this worker`);
      return;
    }
    if (!state) return;
    if (nowPaused && !wasPaused) {
      state.nextSlot = null;
      this.parts.logger.info({ event: 'job:paused', job: row.name, by: row.paused_by }, `job "${row.name}" paused by ${row.paused_by ?? 'unknown'}`);
    } else if (!nowPaused && wasPaused) {
      this.parts.logger.info({ event: 'job:resumed', job: row.name }, `job "${row.name}" resumed`);
      await this.plan(state, row, wasPaused);
    }
  }

  /** Next slot and catch-up of a job that starts here (new, or resumed after a pause). */
  private async plan(state: JobState, row: FeedRow, pause?: PauseSeen): Promise<void> {
    const target = this.target;
    if (!target) return;
    const { store, logger, holder } = this.parts;
    const now = row.database_time;
    let claims: ClaimRequest[];
    // planned on a copy: the job's state gets its next slot only once the slots of a pause are
    // recorded (a tick in between recorded them missed for downtime first, and the pause's
    // reason was lost)
    const planned: Pick<JobState, 'job' | 'nextSlot'> = { job: state.job, nextSlot: null };
    try {
      claims = await planStart([planned], new Map([[state.job.name, lastSlotOf(row)]]), now, store, logger);
    } catch (error) {
      // the change is applied all the same (the feed has moved past it): from the next slot on
      logger.warn({ event: 'catch-up:failed', job: state.job.name, err: String(error) }, `could not plan the catch-up of "${state.job.name}"; it runs from its next slot`);
      state.nextSlot = state.job.schedule.next(now);
      target.wake();
      return;
    }
    if (pause && row.last_slot) {
      // the slots the pause kept from running that catch-up does not run: missed, because paused
      const chosen = new Set(claims.map((c) => c.slot.getTime()));
      const due = slotsBetween(state.job.schedule, row.last_slot, now, MAX_MISSED_RECORDED);
      const kept = typeof state.job.catchUp === 'object' ? new Set(due.slice(-state.job.catchUp.all).map((d) => d.getTime())) : chosen;
      const missed = due.filter((slot) => !kept.has(slot.getTime()));
      const why = `paused by ${pause.by ?? 'unknown'} from ${pause.at.toISOString()}${pause.reason ? ` (${pause.reason})` : ''}`;
      await store.recordMissed(state.job.name, missed, why.slice(0, 1000), holder).catch((error: unknown) =>
        logger.warn({ event: 'slot:missed-record-failed', job: state.job.name, err: String(error) }, 'could not record the slots missed while paused'),
      );
    }
    state.nextSlot = planned.nextSlot;
    if (claims.length > 0) target.claimNow(claims);
    target.wake();
  }

  /** The JobDefinition of a data row this worker runs, or undefined (not its handler, removed, or unusable: logged once). */
  private definitionOf(row: FeedRow): JobDefinition | undefined {
    if (row.source !== 'data' || row.removed || row.handler === null) return undefined;
    const fn = this.parts.handlers[row.handler];
    if (!fn) return undefined;
    if (this.parts.codeNames.has(row.name)) {
      this.report(row, `a code job of this worker has the same name; the code job runs (code wins)`);
      return undefined;
    }
    try {
      const catchUp: CatchUpPolicy = row.catch_up.startsWith('all:') ? { all: Number(row.catch_up.slice(4)) } : (row.catch_up as CatchUpPolicy);
      const settings: DataJobSettings = {
        handler: row.handler,
        payload: row.payload,
        timeoutMs: row.timeout_ms === null ? null : Number(row.timeout_ms),
        jitterMs: row.jitter_ms === null ? null : Number(row.jitter_ms),
        revision: Number(row.revision),
      };
      const handlerName = row.handler;
      const payload = row.payload;
      const job = defineJob({
        name: row.name,
        ...storedScheduleSpec(row),
        ttl: Number(row.ttl_ms),
        overlap: row.overlap as OverlapPolicy,
        ...(row.buffer_limit !== null ? { bufferLimit: row.buffer_limit } : {}),
        catchUp,
        ...(row.starting_deadline_ms !== null ? { startingDeadline: Number(row.starting_deadline_ms) } : {}),
        ...(row.timeout_ms !== null ? { timeout: Number(row.timeout_ms) } : {}),
        ...(row.jitter_ms !== null ? { jitter: Number(row.jitter_ms) } : {}),
        // the handler sees the code job's context plus the payload and handler name
        handler: (context) => {
          // the code job's context underneath (its lazy parts are getters of its prototype)
          const data = Object.create(context, {
            payload: { value: payload, enumerable: true },
            handler: { value: handlerName, enumerable: true },
          }) as DataJobContext;
          return fn(data);
        },
      });
      dataJobs.set(job, settings);
      return job;
    } catch (error) {
      this.report(row, error instanceof Error ? error.message : String(error), error);
      return undefined;
    }
  }

  private report(row: FeedRow, message: string, cause?: unknown): void {
    const revision = Number(row.revision);
    if (this.reported.get(row.name) === revision) return;
    this.reported.set(row.name, revision);
    const error = new ScheduleDefinitionError(row.name, message, { cause });
    this.parts.logger.error({ event: 'schedule:invalid', job: row.name, revision, err: error.message }, error.message);
  }
}
