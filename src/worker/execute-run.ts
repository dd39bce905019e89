// One run of a claimed slot: adopt the lease the claim created (kept alive by the client's
// shared heartbeat), call the handler with its context, retry if configured, then record the
// outcome and release the lease in one statement (finish_run). Start and end are events (the
// logger is one of their subscribers); the handler's logger is made only if it asks for it.
// A job with a timeout gets a RunDeadline: the signal fires at the deadline, the run is
// recorded timed-out, and a handler that never settles is given up one ttl later.
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { inTransaction } from '../db/transaction.js';
import { LeaseLostError, RunTimeoutError, ShutdownError } from '../errors.js';
import type { Lease } from '../lease/lease.js';
import { releasedRemotely, type LeaseTracker } from '../lease/tracker.js';
import { childLogger, type JobLogger } from '../observe/child-logger.js';
import type { LeaseholdEmitter } from '../observe/events.js';
import type { Logger } from '../observe/logger.js';
import type { ClaimRow } from './claims.js';
import type { FinishQueue } from './finish-queue.js';
import type { JobContext, JobDefinition, RunTrigger } from './job.js';

import type { RunOutcome } from './run-outcomes.js';

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
 * and a frame or a closure waiting on each run's promise was garbage for each (the heap held
 * about 15% more per run in flight).
 */
export interface RunWatcher<T> {
  runEnded(tag: T, report: RunReport | undefined, error?: unknown): void;
}

/**
 * Runs a claimed slot to its end and tells `watcher`. The outcome is recorded; the promise
 * settles when the run has ended and never rejects.
 */
export function executeRun<T>(
  env: RunEnvironment,
  job: JobDefinition,
  claim: ClaimRow,
  holderKey: string | null,
  sentAt: number,
  watcher: RunWatcher<T>,
  tag: T,
): Promise<void> {
  return new Run(env, job, claim, holderKey, sentAt, watcher, tag).execute();
}

/** executeRun() for a caller that awaits one run's report (leased()): rejects when the run failed outside its handler. */
export function executeRunToReport(env: RunEnvironment, job: JobDefinition, claim: ClaimRow, holderKey: string | null, sentAt: number): Promise<RunReport> {
  return new Promise<RunReport>((resolve, reject) => void executeRun(env, job, claim, holderKey, sentAt, TO_PROMISE, { resolve, reject }));
}

const TO_PROMISE: RunWatcher<{ resolve: (report: RunReport) => void; reject: (error: unknown) => void }> = {
  runEnded: (tag, report, error) => (report ? tag.resolve(report) : tag.reject(error)),
};

/**
 * One run. A class rather than closures: a worker starts thousands of runs a tick, and each
 * closure of a run (its signal, its logger, its attempts) was an allocation per run.
 */
class Run<T = unknown> {
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
  /** The run's signal combines its parts only when asked for (ctx.signal, a retry's pause): AbortSignal.any() costs more than the rest of starting a run, and many handlers never read it. */
  private combined: AbortSignal | undefined;
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

  /** Adopts the lease the claim created and lets go of the claim's row; what failed, if it did. */
  private adopt(): { error: unknown; token: string | null } | undefined {
    const claim = this.claim!;
    this.claim = null;
    try {
      this.lease = adoptLease(this.env, this.job, claim, this.holderKey, this.sentAt);
      return undefined;
    } catch (error) {
      return { error, token: claim.token };
    }
  }

  async execute(): Promise<void> {
    try {
      const { env, job, fence, slot } = this;
      const started = performance.now();
      // (the claim's row is not a local here: a suspended run would keep it)
      const unadopted = this.adopt();
      if (unadopted) {
        // The client closed between the claim and now: record the run as aborted, unrun.
        const errorText = describeError(unadopted.error);
        await env.finisher.finish({ job: job.name, fence, token: unadopted.token, outcome: 'aborted', error: errorText, attempts: 0 }).catch(() => undefined);
        this.watcher.runEnded(this.tag, { job: job.name, slot, fence, outcome: 'aborted', error: errorText, durationMs: 0, nextBufferedSlot: null });
        return;
      }
      const { lease } = this;
      const deadline = job.timeoutMs === null ? null : new RunDeadline(job, slot, fence, this.sentAt, lease);
      this.deadline = deadline;
      if (env.events.wants('run:started')) env.events.emit('run:started', { job: job.name, slot, fence, holder: env.holder });

      // A handler that ignores its timeout is given one ttl more to settle; after that the run is
      // recorded timed-out without it and its lease is left to expire (its writes are refused already).
      let error: unknown;
      if (deadline) error = await Promise.race([this.attempts(), deadline.abandoned().then(() => ABANDONED)]);
      else if (env.wrapHandler || job.retry.attempts > 1) error = await this.attempts();
      else {
        // one attempt, no wrapper, no deadline: the handler is awaited here (a worker starts
        // thousands of runs a tick; each async step is an allocation)
        try {
          await job.handler(new RunContext(this, 1));
        } catch (caught) {
          error = caught;
        }
      }
      const attempt = this.attempt;
      // the database may say so before this process's timer does (a clock step, a late timer)
      if (deadline && lease && refusedForTimeout(lease)) deadline.expire();
      deadline?.clear();
      const abandoned = error === ABANDONED;

      let outcome: RunOutcome = 'succeeded';
      if (deadline?.error) outcome = 'timed-out';
      else if (lease?.lost) outcome = 'lost';
      else if (error !== undefined) outcome = env.shutdown.aborted ? 'aborted' : 'failed';
      const errorText =
        outcome === 'timed-out'
          ? abandoned
            ? `${deadline!.error!.message} The handler did not settle within one ttl after it; the lease was left to expire.`
            : deadline!.error!.message
          : outcome === 'lost'
            ? (lease?.lostReason?.message ?? 'lease lost')
            : error === undefined
              ? null
              : describeError(error);

      let nextBufferedSlot: Date | null = null;
      try {
        // A lost lease's token is passed too: if the lease is in fact still ours (say the liveness
        // session dropped), this frees it at once; if not, the release matches nothing.
        if (lease) env.tracker.stopRenewing(lease);
        // an abandoned run keeps its lease until the TTL ends it: its handler may still be running
        const token = abandoned ? null : (lease?.token ?? null);
        const finished = await env.finisher.finish({ job: job.name, fence, token, outcome, error: errorText, attempts: attempt });
        nextBufferedSlot = finished.nextBufferedSlot;
      } catch (finishError) {
        this.log().error({ event: 'run:finish-failed', err: String(finishError) }, 'could not record the run; its lease ends by its TTL');
      } finally {
        if (lease && !abandoned) releasedRemotely(lease);
      }
      const report: RunReport = { job: job.name, slot, fence, outcome, error: errorText, durationMs: performance.now() - started, nextBufferedSlot };
      env.events.emit('run:finished', report);
      this.watcher.runEnded(this.tag, report);
    } catch (error) {
      // outside the handler (a listener of run:finished threw, say): the watcher reports it
      this.watcher.runEnded(this.tag, undefined, error);
    }
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
        if (this.attempt >= job.retry.attempts || this.aborted) return caught;
        this.log().warn({ event: 'run:retry', attempt: this.attempt, err: String(caught) }, `run of "${job.name}" failed; retrying`);
        if (!(await pause(job.retry.delayMs, this.signal()))) return caught;
      }
    }
  }
}

async function callHandler(job: JobDefinition, ctx: JobContext): Promise<void> {
  await job.handler(ctx);
}

/** Where a RunContext keeps its run: a symbol, so that the context's own keys are what JobContext names. */
const RUN = Symbol('run');

/** The handler's context: the run's fields, and on the prototype what is made only when read. */
class RunContext implements JobContext {
  readonly job: string;
  readonly slot: Date;
  readonly fence: number;
  readonly trigger: RunTrigger;
  readonly attempt: number;
  readonly lease: Lease | null;
  readonly [RUN]: Run;

  constructor(run: Run, attempt: number) {
    this[RUN] = run;
    this.job = run.job.name;
    this.slot = run.slot;
    this.fence = run.fence;
    this.trigger = run.trigger;
    this.attempt = attempt;
    this.lease = run.lease;
  }

  get idempotencyKey(): string {
    const run = this[RUN];
    return idempotencyKey(this.job, run.trigger, run.requestId, run.slot);
  }

  get signal(): AbortSignal {
    return this[RUN].signal();
  }

  get log(): JobLogger {
    return this[RUN].log();
  }

  // without a lease (overlap 'allow') there is nothing to fence against; statements get the
  // job's ttl as their timeout, as a fenced transaction's get the lease's; after the run's
  // deadline the client refuses at once (the database would too: LH003)
  transaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
    const run = this[RUN];
    if (run.deadline?.error) return Promise.reject(run.deadline.error);
    const runtime = run.env.tracker.runtime;
    return this.lease ? this.lease.transaction(fn) : inTransaction(runtime.workPool, runtime.where, fn, run.job.ttlMs);
  }
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

/** Distinct per trigger, so that a run now or a backfill never shares a key with a scheduled slot. */
function idempotencyKey(job: string, trigger: RunTrigger, requestId: string | undefined, slot: Date): string {
  if (trigger === 'manual') return `${job}@manual:${requestId ?? ''}`;
  if (trigger === 'backfill') return `${job}@backfill:${slot.toISOString()}`;
  return `${job}@${slot.toISOString()}`;
}

/** The database refused the lease's fence because the run's timeout passed (assert_lease's DETAIL). */
function refusedForTimeout(lease: Lease): boolean {
  const lost = lease.lostReason;
  return lost !== undefined && lost.reason === 'fence-mismatch' && lost.message.includes(TIMED_OUT_DETAIL);
}

/** The first words of assert_lease's DETAIL for a run past its timeout (sql/0013_run_timeout.sql). */
const TIMED_OUT_DETAIL = 'the run timed out';

/** The shutdown signal, and the lease's and the deadline's when there are. */
function runSignal(shutdown: AbortSignal, lease: Lease | null, deadline: RunDeadline | null): AbortSignal {
  if (!lease && !deadline) return shutdown;
  const signals = [shutdown];
  if (lease) signals.push(lease.signal);
  if (deadline) signals.push(deadline.signal);
  return AbortSignal.any(signals);
}

/** The result of RunDeadline.abandoned(): the handler did not settle in time. */
const ABANDONED: unique symbol = Symbol('abandoned');

/**
 * A run's timeout, on the monotonic clock from when the claim was sent (before the database's
 * now() that starts its deadline there, so the signal fires no later than the database begins
 * to refuse the run's writes). A lease lost before the deadline makes the run lost, not
 * timed out.
 */
class RunDeadline {
  private readonly controller = new AbortController();
  private timer: NodeJS.Timeout | undefined;
  private abandonTimer: NodeJS.Timeout | undefined;
  private onAbandon: (() => void) | undefined;
  error: RunTimeoutError | undefined;

  constructor(
    job: JobDefinition,
    slot: Date,
    fence: number,
    sentAt: number,
    lease: Lease | null,
  ) {
    const timeoutMs = job.timeoutMs ?? 0;
    this.expire = () => {
      if (this.error) return;
      this.error = new RunTimeoutError(job.name, slot, fence, timeoutMs);
      this.controller.abort(this.error);
    };
    this.timer = setTimeout(() => {
      this.timer = undefined;
      if (lease?.lost && !refusedForTimeout(lease)) return;
      this.expire();
      this.abandonTimer = setTimeout(() => this.onAbandon?.(), job.ttlMs);
    }, Math.max(0, sentAt + timeoutMs - performance.now()));
  }

  /** The deadline has passed: fire the signal (once) with a RunTimeoutError. */
  readonly expire: () => void;

  get signal(): AbortSignal {
    return this.controller.signal;
  }

  /** Resolves one ttl after the deadline (never, if the run settles first). */
  abandoned(): Promise<void> {
    return new Promise((resolve) => {
      this.onAbandon = resolve;
    });
  }

  clear(): void {
    clearTimeout(this.timer);
    clearTimeout(this.abandonTimer);
    this.onAbandon = undefined;
  }
}

/** Waits `ms` unless the signal fires first; returns false when it did. */
function pause(ms: number, signal: AbortSignal): Promise<boolean> {
  if (signal.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

function describeError(error: unknown): string {
  if (error instanceof LeaseLostError || error instanceof ShutdownError) return error.message;
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}
