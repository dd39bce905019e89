// The database clock, read from this process: the offset between the database's
// clock_timestamp() and the local monotonic clock, measured with round-trip correction.
// Slots are scheduled on this clock, so a worker whose wall clock is minutes off neither
// starts early nor late; local wall-clock steps between measurements change nothing, because
// the monotonic clock carries the time forward.
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { timedQuery } from '../db/connection.js';

export interface Clock {
  /** Database time now, as this process estimates it. */
  now(): Date;
}

export class DatabaseClock implements Clock {
  /** database epoch-ms minus local monotonic ms; null until the first sync. */
  private base: number | null = null;
  private lastRoundTripMs = 0;

  constructor(
    private readonly pool: pg.Pool,
    private readonly timeoutMs: number,
    private readonly where: string,
  ) {}

  /** Takes the best of a few samples (the one with the shortest round trip). */
  async sync(samples = 3): Promise<void> {
    let best: { base: number; rtt: number } | undefined;
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
      const rtt = received - sent;
      const base = Number(rows[0]?.ms) - (sent + rtt / 2);
      if (!best || rtt < best.rtt) best = { base, rtt };
    }
    if (best) {
      this.base = best.base;
      this.lastRoundTripMs = best.rtt;
    }
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
