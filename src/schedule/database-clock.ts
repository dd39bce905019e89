// The database clock, read from this process: the offset between the database's clock and
// the local monotonic clock, measured with round-trip correction. Slots are scheduled and
// leases expire on this clock, so a worker whose wall clock is minutes off neither starts
// early nor late; local wall-clock steps change nothing, because the monotonic clock carries
// the time forward.
//
// The database clock itself can step (an operator sets the date, NTP steps instead of
// slewing, a VM resumes). Every answer that carries the database's time (renewals, acquires,
// claims, liveness pings) is a sample: the database time lies between `sent` and `received`
// on the monotonic clock, so the offset lies in [db - received, db - sent]. A sample whose
// interval misses the current estimate by more than the threshold is a step; smaller
// differences (drift, a slow answer) only nudge the estimate into the sample's interval.
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { timedQuery } from '../db/connection.js';

export interface Clock {
  /** Database time now, as this process estimates it. */
  now(): Date;
}

export interface ClockStep {
  /** How far the database clock jumped: positive forward, negative back. */
  deltaMs: number;
  /** Database time just after the step, as measured. */
  databaseTime: Date;
  /** What this process expected the database time to be at that moment. */
  expected: Date;
}

export interface DatabaseClockSettings {
  /** Offset changes above this count as a step. @default 1000 */
  stepThresholdMs?: number;
  /** Called once per detected step, after the estimate has moved to the new time. */
  onStep?: (step: ClockStep) => void;
}

export class DatabaseClock implements Clock {
  /** database epoch-ms minus local monotonic ms; null until the first sample. */
  private base: number | null = null;
  private lastRoundTripMs = 0;
  private readonly thresholdMs: number;
  private readonly listeners: Array<(step: ClockStep) => void> = [];

  constructor(
    private readonly pool: pg.Pool,
    private readonly timeoutMs: number,
    private readonly where: string,
    settings: DatabaseClockSettings = {},
  ) {
    this.thresholdMs = settings.stepThresholdMs ?? 1_000;
    if (settings.onStep) this.listeners.push(settings.onStep);
  }

  /** Adds a step listener; returns the function that removes it. */
  onStep(listener: (step: ClockStep) => void): () => void {
    this.listeners.push(listener);
    return () => {
      const index = this.listeners.indexOf(listener);
      if (index >= 0) this.listeners.splice(index, 1);
    };
  }

  /** Takes the best of a few samples (the one with the shortest round trip). */
  async sync(samples = 3): Promise<void> {
    let best: { databaseMs: number; sent: number; received: number } | undefined;
    for (let i = 0; i < samples; i++) {
      const sent = performance.now();
      const { rows } = await timedQuery<{ ms: string }>(
        this.pool,
        `select (extract(epoch from clock_timestamp()) * 1000)::text as ms`,
        [],
        this.timeoutMs,
        this.where,
      );
      const received = performance.now();
      if (!best || received - sent < best.received - best.sent) best = { databaseMs: Number(rows[0]?.ms), sent, received };
    }
    if (best) {
      this.sample(best.databaseMs, best.sent, best.received);
      // the best of several samples is a better estimate than the one we had
      this.base = best.databaseMs - (best.sent + best.received) / 2;
      this.lastRoundTripMs = best.received - best.sent;
    }
  }

  /**
   * A database time read by a statement sent at `sent` and answered at `received`
   * (performance.now()). Detects steps; otherwise keeps the estimate consistent with it.
   */
  observe(databaseTime: Date, sent: number, received: number): void {
    const ms = databaseTime.getTime();
    if (Number.isFinite(ms)) this.sample(ms, sent, received);
  }

  private sample(databaseMs: number, sent: number, received: number): void {
    const low = databaseMs - received;
    const high = databaseMs - sent;
    if (this.base === null) {
      this.base = (low + high) / 2;
      this.lastRoundTripMs = received - sent;
      return;
    }
    if (low > this.base + this.thresholdMs || high < this.base - this.thresholdMs) {
      const expected = new Date(this.base + received);
      const previous = this.base;
      this.base = (low + high) / 2;
      const step: ClockStep = { deltaMs: Math.round(this.base - previous), databaseTime: new Date(databaseMs), expected };
      for (const listener of [...this.listeners]) listener(step);
      return;
    }
    // drift or a slow answer: move the estimate just enough to agree with this sample
    if (this.base < low) this.base = low;
    else if (this.base > high) this.base = high;
  }

  /** True once a sample has been taken. */
  get synced(): boolean {
    return this.base !== null;
  }

  /** now() as epoch milliseconds, or null before the first sample (no Date made). */
  nowMs(): number | null {
    return this.base === null ? null : this.base + performance.now();
  }

  now(): Date {
    if (this.base === null) throw new Error('DatabaseClock.now() before sync()');
    return new Date(this.base + performance.now());
  }

  /** How far the local wall clock is from the database's (positive: local is ahead). */
  localOffsetMs(): number {
    return Date.now() - this.now().getTime();
  }

  get roundTripMs(): number {
    return this.lastRoundTripMs;
  }
}
