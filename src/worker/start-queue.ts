// The runs a worker claimed ahead, waiting for their start (the slot plus the job's jitter) on
// one timer. Shortly before the first of them starts, the worker marks in the database that it
// starts them (leasehold.start_tick, sql/baseline/2_scheduler.sql): a peer claims a slot
// claimed ahead again only while its holder has not marked it and the lease is free (the holder
// died, or its lease expired in a pause). So a holder killed in the lead leaves its slots to a
// peer, and a mark always comes before any handler it covers: each slot runs at most once.
import type { DatabaseClock } from '../schedule/database-clock.js';
import type { PreparedRun } from './claim-ahead.js';

/**
 * Runs are marked started this long before their start: the mark's round trip is not added to
 * the start. A holder killed within it leaves its slot unrun (recorded lost at the next slot).
 */
export const MARK_AHEAD_MS = 100;

/** Marks the start of the runs claimed under `holderKey` planned until `through`; false: a peer took some of them, check each lease first. */
export type MarkStart = (holderKey: string, through: Date) => Promise<boolean>;

interface Waiting {
  run: PreparedRun;
  /** The liveness key the run was claimed under (null: liveness off, no peer claims it again). */
  key: string | null;
  /** What a mark must cover: the run's start, and its slot if later (epoch ms). */
  coverMs: number;
  /** none: not marked yet; marking: a mark in flight; ok: marked; check: marked, but a peer took some run of its span; failed: the mark failed. */
  mark: 'none' | 'marking' | 'ok' | 'check' | 'failed';
  error?: string;
}

export class StartQueue {
  private readonly byStart = new Map<number, Waiting[]>();
  private timer: NodeJS.Timeout | undefined;
  private armedAt = Infinity;

  constructor(
    private readonly clock: DatabaseClock,
    /** A start runs this long after its time on the database-corrected clock, as a tick does. */
    private readonly marginMs: number,
    private readonly markStart: MarkStart,
  ) {}

  /**
   * How long after a start's time on the clock's estimate its runs start: the margin, and the
   * round trip of the clock's best sample (the estimate of the database's time is off by less
   * than that), so that no run starts before its slot on the database's clock.
   */
  private delayMs(): number {
    return this.marginMs + this.clock.roundTripMs;
  }

  add(startMs: number, run: PreparedRun, key: string | null, slotMs: number): void {
    const waiting: Waiting = { run, key, coverMs: Math.max(startMs, slotMs), mark: key === null ? 'ok' : 'none' };
    const runs = this.byStart.get(startMs);
    if (runs) runs.push(waiting);
    else this.byStart.set(startMs, [waiting]);
    const wake = waiting.mark === 'none' ? startMs - MARK_AHEAD_MS : startMs + this.delayMs();
    if (wake < this.armedAt) this.arm(wake);
  }

  /** The database clock stepped: the timer is set again on the new estimate of its time. */
  rearm(): void {
    if (this.armedAt < Infinity) this.arm(this.armedAt);
  }

  /** Hands back every run not started yet (the worker is stopping). */
  handBackAll(why: string): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.armedAt = Infinity;
    const waiting = [...this.byStart.values()].flat();
    this.byStart.clear();
    for (const w of waiting) w.run.handBack(why);
  }

  /** Sets the timer for `atMs` (the database-corrected clock). */
  private arm(atMs: number): void {
    clearTimeout(this.timer);
    this.armedAt = atMs;
    this.timer = setTimeout(() => this.pump(), Math.max(0, atMs - this.clock.now().getTime()));
  }

  /** Marks what is about to start, starts what is due and marked, hands back what could not be marked; sets the timer for what is left. */
  private pump(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
    this.armedAt = Infinity;
    const now = this.clock.now().getTime();
    const delay = this.delayMs();
    let wake = Infinity;
    let toMark: Map<string, Waiting[]> | undefined;
    const due: Waiting[] = [];
    for (const [startMs, runs] of this.byStart) {
      const isDue = startMs + delay <= now + 1;
      let kept = 0;
      for (const w of runs) {
        if (w.mark === 'none' && startMs - MARK_AHEAD_MS <= now) {
          w.mark = 'marking';
          const list = (toMark ??= new Map()).get(w.key as string);
          if (list) list.push(w);
          else toMark.set(w.key as string, [w]);
        }
        if (w.mark === 'failed' || (isDue && (w.mark === 'ok' || w.mark === 'check'))) {
          due.push(w);
        } else {
          runs[kept++] = w;
          if (w.mark === 'none') wake = Math.min(wake, startMs - MARK_AHEAD_MS);
          else if (w.mark !== 'marking') wake = Math.min(wake, startMs + delay);
        }
      }
      runs.length = kept;
      if (kept === 0) this.byStart.delete(startMs);
    }
    if (wake < Infinity) this.arm(wake);
    if (toMark) for (const [key, list] of toMark) this.mark(key, list);
    for (const w of due) {
      if (w.mark === 'failed') w.run.handBack(`its start could not be recorded: ${w.error ?? 'unknown error'}`);
      else if (w.mark === 'check') w.run.renewThenBegin();
      else w.run.begin();
    }
  }

  /** One start_tick for the runs of `key` about to start; their starts wait for its answer. */
  private mark(key: string, list: Waiting[]): void {
    let through = -Infinity;
    for (const w of list) if (w.coverMs > through) through = w.coverMs;
    this.markStart(key, new Date(through)).then(
      (untouched) => {
        for (const w of list) w.mark = untouched ? 'ok' : 'check';
      },
      (error: unknown) => {
        for (const w of list) {
          w.mark = 'failed';
          w.error = error instanceof Error ? error.message : String(error);
        }
      },
    ).finally(() => this.pump());
  }
}
