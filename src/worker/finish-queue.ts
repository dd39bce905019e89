// Runs that end at about the same moment (a tick that started thousands of short jobs) are
// recorded and released with one finish_runs() statement instead of one each, so that they
// neither flood the small control pool nor leave leases to their TTL when it is busy.
// After a tick that started many runs at once the batches wait a little longer (hold()): the
// other workers are claiming the same tick on the same database, and recording runs that have
// ended can wait a few hundred milliseconds; their leases are released then.
import { performance } from 'node:perf_hooks';
import type { SchedulerStore } from './claims.js';
import type { RunOutcome } from '../job/run-outcomes.js';

// A claim that started this many runs holds back the recording of their ends (hold()) for
// twice as long as the claim took, at most HOLD_MAX_MS: the other workers are claiming and
// starting the same tick on the same database and cores (their claims took about as long, and
// starting their runs about as long again).
// Not above HOLD_MAX_RUNS: 25,000 runs held in memory cost a worker more garbage collection than
// the database time the hold saves (100,000 jobs on 4 workers: handler start p99 2.4-2.7 s
// without the hold, 2.9 s with it).
const HOLD_MIN_RUNS = 500;
const HOLD_MAX_RUNS = 5_000;
const HOLD_MAX_MS = 500;
// Runs claimed ahead all start at their slot, in every worker at once: their ends are recorded
// this long after the slot at the earliest, once the workers' starts are done.
const HOLD_AFTER_START_MS = 100;

export interface FinishRequest {
  job: string;
  fence: number;
  token: string | null;
  outcome: RunOutcome;
  error: string | null;
  attempts: number;
  /** When the handler was called, in epoch milliseconds on the database clock's estimate; null: never called (or no estimate). */
  startedMs: number | null;
}

export interface FinishResult {
  recorded: boolean;
  released: boolean;
  nextBufferedSlot: Date | null;
}

/**
 * A run's end, queued: what to record, and whom to tell when it is written. A run passes itself
 * as the receiver (one object per run; a promise and its two resolvers per run were garbage
 * for each of the thousands of runs that end after a tick).
 */
export interface FinishItem extends FinishRequest {
  receiver: FinishReceiver;
}

export interface FinishReceiver {
  finished(result: FinishResult): void;
  finishFailed(error: unknown): void;
}

/** A receiver for finish(): settles a promise. */
class PromiseReceiver implements FinishReceiver {
  constructor(
    readonly finished: (result: FinishResult) => void,
    readonly finishFailed: (error: unknown) => void,
  ) {}
}

const BATCH_DELAY_MS = 5;
const MAX_BATCH = 2_000;
const RETRY_DELAY_MS = 250;

export class FinishQueue {
  private pending: FinishItem[] = [];
  private timer: NodeJS.Timeout | undefined;
  // Batches go out one at a time, in order: the pool stays free for claims and heartbeats.
  private chain: Promise<void> = Promise.resolve();
  /** performance.now() before which no batch is sent (hold()). */
  private heldUntil = 0;

  constructor(private readonly store: SchedulerStore) {}

  finish(request: FinishRequest): Promise<FinishResult> {
    return new Promise((resolve, reject) => this.enqueue({ ...request, receiver: new PromiseReceiver(resolve, reject) }));
  }

  /** Queues `item`; its receiver is told once the batch it went out in is written (or failed). */
  enqueue(item: FinishItem): void {
    this.pending.push(item);
    if (this.pending.length >= MAX_BATCH && performance.now() >= this.heldUntil) this.flush();
    else this.timer ??= setTimeout(() => this.flush(), Math.max(BATCH_DELAY_MS, this.heldUntil - performance.now()));
  }

  /** Sends no batch for the next `ms` (a tick just started many runs); drain() still sends at once. */
  hold(ms: number): void {
    this.heldUntil = Math.max(this.heldUntil, performance.now() + ms);
  }

  /** A claim at the slot started `runs` runs and took `claimMs`: hold for twice that (HOLD_*). */
  holdAfterClaim(runs: number, claimMs: number): void {
    if (runs >= HOLD_MIN_RUNS && runs <= HOLD_MAX_RUNS) this.hold(Math.min(HOLD_MAX_MS, 2 * claimMs));
  }

  /** A claim ahead prepared `runs` runs whose first starts in `msToStart`: hold until just after the starts. */
  holdAfterAhead(runs: number, leadMs: number, msToStart: number): void {
    if (runs >= HOLD_MIN_RUNS && runs <= HOLD_MAX_RUNS) this.hold(Math.min(HOLD_MAX_MS + leadMs, msToStart + HOLD_AFTER_START_MS));
  }

  /** Resolves when everything queued so far has been written (or has failed). */
  drain(): Promise<void> {
    this.heldUntil = 0;
    this.flush();
    return this.chain;
  }

  private flush(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    if (this.pending.length === 0) return;
    const wait = this.heldUntil - performance.now();
    if (wait > 0) {
      this.timer = setTimeout(() => this.flush(), wait);
      return;
    }
    const batch = this.pending.splice(0, MAX_BATCH);
    this.chain = this.chain.then(() => this.write(batch));
    if (this.pending.length > 0) this.timer = setTimeout(() => this.flush(), 0);
  }

  private async write(batch: FinishItem[]): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        const rows = await this.store.finishMany(batch);
        // finish_runs answers in the order asked; matched by job and fence all the same (a map
        // only when the order does not hold)
        let byRun: Map<string, FinishResult> | undefined;
        for (let i = 0; i < batch.length; i++) {
          const item = batch[i] as FinishItem;
          let row: FinishResult | undefined = rows[i];
          if (!(row && rows[i]?.job === item.job && rows[i]?.fence === item.fence)) {
            byRun ??= new Map(rows.map((r) => [`${r.job}#${r.fence}`, r]));
            row = byRun.get(`${item.job}#${item.fence}`);
          }
          tell(item.receiver, row ?? NOT_RECORDED);
        }
        return;
      } catch (error) {
        // Recording the same outcome twice is harmless (only a 'running' run is updated, only
        // a matching token released), so one retry after a pause is safe.
        if (attempt === 1) {
          await new Promise((resolve) => setTimeout(resolve, RETRY_DELAY_MS));
          continue;
        }
        for (const item of batch) failed(item.receiver, error);
        return;
      }
    }
  }
}

const NOT_RECORDED: FinishResult = { recorded: false, released: false, nextBufferedSlot: null };

/** A receiver that throws must not keep the rest of its batch from being told. */
function tell(receiver: FinishReceiver, row: FinishResult): void {
  try {
    receiver.finished(row);
  } catch {
    // the receiver reports its own failures (a run's watcher)
  }
}

function failed(receiver: FinishReceiver, error: unknown): void {
  try {
    receiver.finishFailed(error);
  } catch {
    // as above
  }
}
