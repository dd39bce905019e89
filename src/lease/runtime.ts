// What a Lease needs from the client that created it. Kept as an interface so that a lease
// does not import the client (and tests can reason about one piece at a time).
import type pg from 'pg';
import type { LeaseholdEmitter } from '../observe/events.js';
import type { DatabaseClock } from '../schedule/database-clock.js';
import type { Logger } from '../observe/logger.js';
import type { Deadlines } from './deadlines.js';

export interface LeaseRuntime {
  /** Pool for acquire, renew and release: kept apart from user work so a busy app pool cannot starve heartbeats. */
  readonly controlPool: pg.Pool;
  /**
   * Pool for renewals (heartbeats) alone: a burst of this process's own acquires or claims
   * queued on the control pool cannot delay a heartbeat. The user's pool when only one was given.
   */
  readonly renewPool: pg.Pool;
  /** Pool for fenced transactions (the user's, when one was passed). */
  readonly workPool: pg.Pool;
  /** This process's estimate of the database clock; every answer carrying database time feeds it. */
  readonly clock: DatabaseClock;
  /** Timeout for every library statement, in ms. */
  readonly queryTimeoutMs: number;
  /** host:port/db for messages. */
  readonly where: string;
  readonly logger: Logger;
  readonly events: LeaseholdEmitter;
  /** The local deadlines of this client's leases, on one timer. */
  readonly deadlines: Deadlines;
}
