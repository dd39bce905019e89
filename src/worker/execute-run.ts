// One run of a claimed slot: adopt the lease the claim created (kept alive by the client's
// shared heartbeat), call the handler with its context, retry if configured, then record the
// outcome and release the lease in one statement (finish_runs, batched by the FinishQueue).
// Start and end are events (the logger is one of their subscribers); the handler's logger is
// made only if it asks for it. A job with a timeout gets a RunDeadline (run-deadline.ts): the
// signal fires at the deadline, the run is recorded timed-out, and a handler that never settles
// is given up one ttl later. The handler's context is run-context.ts.
//
// A run is a chain of callbacks on one object, not an async function: a worker starts thousands
// of runs a tick, and the suspended frame of an async function that awaits the handler and then
// the finish kept about 1.5 KB of heap per run in flight (the largest part of a run's garbage).
// Only runs with retries, a timeout or a handler wrapper take the async path (attempts()).
import { performance } from 'node:perf_hooks';
import type { Lease } from '../lease/lease.js';
import { startCheck } from '../lease/start-check.js';
import { releasedRemotely, type LeaseTracker } from '../lease/tracker.js';
import { childLogger, type JobLogger } from '../observe/child-logger.js';
import type { LeaseholdEmitter } from '../observe/events.js';
import type { Logger } from '../observe/logger.js';
import { STOPPED_BEFORE_START, type PreparedRun } from './claim-ahead.js';
import type { ClaimRow } from './claims.js';
import type { FinishItem, FinishQueue, FinishReceiver, FinishResult } from './finish-queue.js';
import type { JobContext, JobDefinition, RunTrigger } from '../job/job.js';
import { ABANDONED, describeError, pause, refusedForTimeout, RunDeadline, runSignal } from './run-deadline.js';
import { RunContext } from './run-context.js';
import type { RunOutcome } from '../job/run-outcomes.js';

export type { RunOutcome };

export interface RunEnvironment {
  tracker: LeaseTracker;
  finisher: FinishQueue;
  logger: Logger;
  events: LeaseholdEmitter;
  holder: string;
  shutdown: AbortSignal;
  /** Worker.wrapHandlers(): runs each handler call inside, e.g., a trace context. */
  wrapHandler?: HandlerWrapper | undefined;
}

/**
 * Wraps each call of a job's handler (once per attempt): it must call `call` once and return
 * (or throw) what it returns. Used to run the handler inside a context (a trace span's, an
 * AsyncLocalStorage store); the run itself is unchanged.
 */
export type HandlerWrapper = (run: { job: string; slot: Date; fence: number; attempt: number }, call: () => Promise<void>) => Promise<void>;

export interface RunReport {
  job: string;
  slot: Date;
  fence: number;
  outcome: RunOutcome;
  error: string | null;
  durationMs: number;
  nextBufferedSlot: Date | null;
}

/**
 * Told once when a run has ended: its report, or the error that ended it outside its handler.
 * One watcher for every run, given the run's tag back: a worker starts thousands of runs a tick,
 * and a frame or a closure waiting on each run's promise was garbage for each.
 */
export interface RunWatcher<T> {
  runEnded(tag: T, report: RunReport | undefined, error?: unknown): void;
}

/** Starts a claimed slot's run and tells `watcher` when it has ended; never throws. */
export function executeRun<T>(env: RunEnvironment, job: JobDefinition, claim: ClaimRow, holderKey: string | null, sentAt: number, watcher: RunWatcher<T>, tag: T): void {
  const run = new Run(env, job, claim, holderKey, sentAt, watcher, tag);
  if (run.prepare()) run.begin();
}

/**
 * Adopts the lease of a slot claimed ahead (claim_ahead), to start its handler later: begin()
 * at the slot, or handBack() (recorded aborted, unrun). Null when the lease could not be
 * adopted (the run is recorded aborted and `watcher` told). Never throws.
 */
export function prepareRun<T>(env: RunEnvironment, job: JobDefinition, claim: ClaimRow, holderKey: string | null, sentAt: number, watcher: RunWatcher<T>, tag: T): PreparedRun | null {
  const run = new Run(env, job, claim, holderKey, sentAt, watcher, tag);
  return run.prepare() ? run : null;
}

/** executeRun() for a caller that awaits one run's report (leased()): rejects when the run failed outside its handler. */
export function executeRunToReport(env: RunEnvironment, job: JobDefinition, claim: ClaimRow, holderKey: string | null, sentAt: number): Promise<RunReport> {
  return new Promise<RunReport>((resolve, reject) => executeRun(env, job, claim, holderKey, sentAt, TO_PROMISE, { resolve, reject }));
}

const TO_PROMISE: RunWatcher<{ resolve: (report: RunReport) => void; reject: (error: unknown) => void }> = {
  runEnded: (tag, report, error) => (report ? tag.resolve(report) : tag.reject(error)),
};

/**
 * One run. A class rather than closures: a worker starts thousands of runs a tick, and each
 * closure of a run (its signal, its logger, its attempts) was an allocation per run.
 */
class Run<T = unknown> implements FinishReceiver, PreparedRun {
  readonly fence: number;
  readonly slot: Date;
  readonly trigger: RunTrigger;
  readonly requestId: string | undefined;
  /** The claim's row until the lease is adopted from it; then let go, with its parsed strings (most of what a run in flight would keep of it). */
  private claim: ClaimRow | null;
  lease: Lease | null = null;
  deadline: RunDeadline | null = null;
  /** The attempt being made: 1, then 2 for the first retry, ... */
  attempt = 1;
  /** performance.now() when the run started (its report's duration). */
  private startedAt = 0;
  /** When the handler was called on the database clock's estimate (epoch ms; what the history records); null: not called. */
  private startedDbMs: number | null = null;
  /** The run's outcome and error text once its handler has ended (what finish_runs records). */
  private outcome: RunOutcome = 'succeeded';
  private errorText: string | null = null;
  /** The run gave up on a handler that ignored its timeout: its lease is left to expire, not released. */
  private abandoned = false;
  /** The handler was never called (the lease could not be adopted, or a run claimed ahead was handed back or lost before its start): recorded unrun, without events. */
  private unstarted = false;
  /** The run's signal combines its parts only when asked for (ctx.signal, a retry's pause): AbortSignal.any() costs more than the rest of starting a run, and many handlers never read it. */
  private combined: AbortSignal | undefined;
  /** The lease was renewed because too little of it was left to start on (once per run). */
  private renewedToStart = false;
  /** Made only when the handler (or a retry) logs. */
  private logger: JobLogger | undefined;

  constructor(
    readonly env: RunEnvironment,
    readonly job: JobDefinition,
    claim: ClaimRow,
    private readonly holderKey: string | null,
    private readonly sentAt: number,
    private readonly watcher: RunWatcher<T>,
    private readonly tag: T,
  ) {
    this.fence = Number(claim.fence);
    this.slot = claim.slot;
    this.trigger = claim.trigger ?? 'schedule';
    this.requestId = claim.request_id;
    this.claim = claim;
  }

  get aborted(): boolean {
    return this.env.shutdown.aborted || (this.lease?.signal.aborted ?? false) || (this.deadline?.signal.aborted ?? false);
  }

  signal(): AbortSignal {
    return (this.combined ??= runSignal(this.env.shutdown, this.lease, this.deadline));
  }

  log(): JobLogger {
    return (this.logger ??= childLogger(this.env.logger, { job: this.job.name, slot: this.slot.toISOString(), fence: this.fence }));
  }

  /** Adopts the lease the claim created; false when it could not (the run is recorded aborted, unrun). */
  prepare(): boolean {
    const { env, job } = this;
    const claim = this.claim!;
    this.claim = null;
    try {
      this.lease = adoptLease(env, job, claim, this.holderKey, this.sentAt);
      return true;
    } catch (error) {
      // The client closed between the claim and now: record the run as aborted, unrun.
      this.endUnstarted('aborted', describeError(error), claim.token);
      return false;
    }
  }

  /** A run claimed ahead is not started after all (the worker is stopping): recorded aborted, its lease released. */
  handBack(why: string): void {
    const { lease } = this;
    if (lease) this.env.tracker.stopRenewing(lease);
    this.endUnstarted('aborted', why, lease?.token ?? null);
  }

  private endUnstarted(outcome: RunOutcome, errorText: string, token: string | null): void {
    this.unstarted = true;
    this.outcome = outcome;
    this.errorText = errorText;
    this.attempt = 0;
    this.env.finisher.enqueue(this.finishItem(token));
  }

  /** Calls the handler (with the run's deadline, events, retries) and returns at its first await. */
  begin(): void {
    try {
      const { env, job, fence, slot, lease } = this;
      // claimed ahead: the worker began to stop, or the lease was lost, before the slot
      if (env.shutdown.aborted) return this.handBack(STOPPED_BEFORE_START);
      if (lease) {
        // the local deadline, not lease.lost: after a pause the start can fire before the deadline's timer
        const check = startCheck(lease);
        if (check === 'renew-first' && !this.renewedToStart) return void this.renewThenBegin(lease);
        if (check === 'lost') {
          env.tracker.stopRenewing(lease);
          return this.endUnstarted('lost', `the handler was not called: ${lease.lostReason?.message ?? 'lease lost'}`, lease.token);
        }
      }
      this.startedAt = performance.now();
      this.startedDbMs = env.tracker.runtime.clock.nowMs();
      this.deadline = job.timeoutMs === null ? null : new RunDeadline(job, slot, fence, this.sentAt, lease);
      if (env.events.wants('run:started')) {
        const lateMs = this.startedDbMs === null ? null : this.startedDbMs - slot.getTime() - job.jitterOffsetMs;
        env.events.emit('run:started', { job: job.name, slot, fence, holder: env.holder, lateMs });
      }
      if (this.deadline || env.wrapHandler || job.retry.attempts > 1) {
        void this.attemptsUntilSettled();
        return;
      }
      // one attempt, no wrapper, no deadline (most runs): the handler's promise settles the run
      let result: unknown;
      try {
        result = job.handler(new RunContext(this, 1));
      } catch (caught) {
        this.handlerEnded(caught);
        return;
      }
      if (isThenable(result)) {
        result.then(
          () => this.handlerEnded(undefined),
          (caught: unknown) => this.handlerEnded(caught === undefined ? REJECTED_WITHOUT_REASON : caught),
        );
      } else {
        queueMicrotask(() => this.handlerEnded(undefined));
      }
    } catch (error) {
      // outside the handler (a listener of run:started threw, say): the watcher reports it
      this.watcher.runEnded(this.tag, undefined, error);
    }
  }

  /** Renews the lease once, then begins, which checks it again (a failed renewal lost it): too little of it was left to start on, or a peer may have taken it over. */
  renewThenBegin(lease = this.lease): void {
    if (!lease) return this.begin();
    this.renewedToStart = true;
    void lease.renew().catch(() => undefined).then(() => this.begin());
  }

  /** The slow path: retries, a timeout or a wrapper. Resolves when the handler has ended or was given up. */
  private async attemptsUntilSettled(): Promise<void> {
    const { deadline } = this;
    let error: unknown;
    try {
      error = deadline ? await Promise.race([this.attempts(), deadline.abandoned().then(() => ABANDONED)]) : await this.attempts();
    } catch (caught) {
      error = caught;
    }
    this.handlerEnded(error);
  }

  /** Calls the handler, again after a failure as the job's retry says; resolves to the last error (undefined: it succeeded). */
  private async attempts(): Promise<unknown> {
    const { job, env } = this;
    for (; ; this.attempt++) {
      try {
        const ctx = new RunContext(this, this.attempt);
        const wrap = env.wrapHandler;
        if (wrap) await wrap({ job: job.name, slot: this.slot, fence: this.fence, attempt: this.attempt }, () => callHandler(job, ctx));
        else await job.handler(ctx);
        return undefined;
      } catch (caught) {
        if (this.attempt >= job.retry.attempts || this.aborted) return caught === undefined ? REJECTED_WITHOUT_REASON : caught;
        this.log().warn({ event: 'run:retry', attempt: this.attempt, err: String(caught) }, `run of "${job.name}" failed; retrying`);
        if (!(await pause(job.retry.delayMs, this.signal()))) return caught;
      }
    }
  }

  /** The handler settled (`error` undefined: it succeeded) or was given up: decide the outcome, then record it. */
  private handlerEnded(error: unknown): void {
    try {
      const { env, lease, deadline } = this;
      // the database may say so before this process's timer does (a clock step, a late timer)
      if (deadline && lease && refusedForTimeout(lease)) deadline.expire();
      deadline?.clear();
      const abandoned = error === ABANDONED;
      this.abandoned = abandoned;
      if (deadline?.error) this.outcome = 'timed-out';
      else if (lease?.lost) this.outcome = 'lost';
      else if (error !== undefined) this.outcome = env.shutdown.aborted ? 'aborted' : 'failed';
      this.errorText =
        this.outcome === 'timed-out'
          ? abandoned
            ? `${deadline!.error!.message} The handler did not settle within one ttl after it; the lease was left to expire.`
            : deadline!.error!.message
          : this.outcome === 'lost'
            ? (lease?.lostReason?.message ?? 'lease lost')
            : error === undefined
              ? null
              : describeError(error);
      // A lost lease's token is passed too: if the lease is in fact still ours (say the liveness
      // session dropped), this frees it at once; if not, the release matches nothing.
      if (lease) env.tracker.stopRenewing(lease);
      // an abandoned run keeps its lease until the TTL ends it: its handler may still be running
      env.finisher.enqueue(this.finishItem(abandoned ? null : (lease?.token ?? null)));
    } catch (caught) {
      this.watcher.runEnded(this.tag, undefined, caught);
    }
  }

  private finishItem(token: string | null): FinishItem {
    return { job: this.job.name, fence: this.fence, token, outcome: this.outcome, error: this.errorText, attempts: this.attempt, startedMs: this.startedDbMs, receiver: this };
  }

  /** The FinishQueue wrote the run's end. */
  finished(result: FinishResult): void {
    this.ended(result.nextBufferedSlot);
  }

  /** The FinishQueue could not write it: the lease ends by its TTL. */
  finishFailed(error: unknown): void {
    if (!this.unstarted) this.log().error({ event: 'run:finish-failed', err: String(error) }, 'could not record the run; its lease ends by its TTL');
    this.ended(null);
  }

  private ended(nextBufferedSlot: Date | null): void {
    try {
      const { env, job, slot, fence, lease, unstarted } = this;
      if (lease && !this.abandoned) releasedRemotely(lease);
      const report: RunReport = {
        job: job.name,
        slot,
        fence,
        outcome: this.outcome,
        error: this.errorText,
        durationMs: unstarted ? 0 : performance.now() - this.startedAt,
        nextBufferedSlot,
      };
      if (!unstarted) env.events.emit('run:finished', report);
      this.watcher.runEnded(this.tag, report);
    } catch (error) {
      // outside the handler (a listener of run:finished threw, say): the watcher reports it
      this.watcher.runEnded(this.tag, undefined, error);
    }
  }
}

/** What a run that failed by rejecting with `undefined` records: a reason, where there was none. */
const REJECTED_WITHOUT_REASON = new Error('the handler rejected without a reason (undefined)');

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof value === 'object' && value !== null && typeof (value as { then?: unknown }).then === 'function';
}

async function callHandler(job: JobDefinition, ctx: JobContext): Promise<void> {
  await job.handler(ctx);
}

/** The lease the claim created (null under overlap 'allow'), with its heartbeat running. */
function adoptLease(env: RunEnvironment, job: JobDefinition, claim: ClaimRow, holderKey: string | null, sentAt: number): Lease | null {
  if (!claim.token || !claim.expires_at) return null;
  return env.tracker.adopt(
    {
      name: job.name,
      token: claim.token,
      fence: Number(claim.fence),
      holder: env.holder,
      holderKey,
      acquiredAt: claim.database_time,
      expiresAt: claim.expires_at,
      // a run now or backfill is not the scheduled slot: its lease keys by fence (job#fence), never job@slot
      slot: claim.trigger ? null : claim.slot,
      ttlMs: job.ttlMs,
      sentAt,
    },
    claim.took_over,
  );
}
