// A run's timeout (RunDeadline), and the small helpers a run uses around it: the combined
// signal, a pause between attempts that the signal cuts short, how an error is described in
// history.
import { performance } from 'node:perf_hooks';
import { LeaseLostError, RunTimeoutError, ShutdownError } from '../errors.js';
import type { Lease } from '../lease/lease.js';
import type { JobDefinition } from '../job/job.js';

/** The database refused the lease's fence because the run's timeout passed (assert_lease's DETAIL). */
export function refusedForTimeout(lease: Lease): boolean {
  const lost = lease.lostReason;
  return lost !== undefined && lost.reason === 'fence-mismatch' && lost.message.includes(TIMED_OUT_DETAIL);
}

/** The first words of assert_lease's DETAIL for a run past its timeout (sql/baseline/2_scheduler.sql). */
const TIMED_OUT_DETAIL = 'the run timed out';

/** The shutdown signal, and the lease's and the deadline's when there are. */
export function runSignal(shutdown: AbortSignal, lease: Lease | null, deadline: RunDeadline | null): AbortSignal {
  if (!lease && !deadline) return shutdown;
  const signals = [shutdown];
  if (lease) signals.push(lease.signal);
  if (deadline) signals.push(deadline.signal);
  return AbortSignal.any(signals);
}

/** The result of RunDeadline.abandoned(): the handler did not settle in time. */
export const ABANDONED: unique symbol = Symbol('abandoned');

/**
 * A run's timeout, on the monotonic clock from when the claim was sent (before the database's
 * now() that starts its deadline there, so the signal fires no later than the database begins
 * to refuse the run's writes). A lease lost before the deadline makes the run lost, not
 * timed out.
 */
export class RunDeadline {
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
export function pause(ms: number, signal: AbortSignal): Promise<boolean> {
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

export function describeError(error: unknown): string {
  if (error instanceof LeaseLostError || error instanceof ShutdownError) return error.message;
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return String(error);
}
