// The handler's context (JobContext) of a run: its fields, and what is made only when the handler
// reads it (the signal, the logger, the idempotency key).
import type pg from 'pg';
import { inTransaction } from '../db/transaction.js';
import type { Lease } from '../lease/lease.js';
import type { LeaseTracker } from '../lease/tracker.js';
import type { JobLogger } from '../observe/child-logger.js';
import type { JobContext, JobDefinition, RunTrigger } from '../job/job.js';
import type { RunDeadline } from './run-deadline.js';

/** What a context reads of its run (execute-run.ts's Run). */
export interface ContextRun {
  readonly job: JobDefinition;
  readonly slot: Date;
  readonly fence: number;
  readonly trigger: RunTrigger;
  readonly requestId: string | undefined;
  readonly lease: Lease | null;
  readonly deadline: RunDeadline | null;
  readonly env: { readonly tracker: LeaseTracker };
  signal(): AbortSignal;
  log(): JobLogger;
}

/** Where a RunContext keeps its run: a symbol, so that the context's own keys are what JobContext names. */
const RUN = Symbol('run');

/** The handler's context: the run's fields, and on the prototype what is made only when read. */
export class RunContext implements JobContext {
  readonly job: string;
  readonly slot: Date;
  readonly fence: number;
  readonly trigger: RunTrigger;
  readonly attempt: number;
  readonly lease: Lease | null;
  readonly [RUN]: ContextRun;

  constructor(run: ContextRun, attempt: number) {
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

/** Distinct per trigger, so that a run now or a backfill never shares a key with a scheduled slot. */
function idempotencyKey(job: string, trigger: RunTrigger, requestId: string | undefined, slot: Date): string {
  if (trigger === 'manual') return `${job}@manual:${requestId ?? ''}`;
  if (trigger === 'backfill') return `${job}@backfill:${slot.toISOString()}`;
  return `${job}@${slot.toISOString()}`;
}
