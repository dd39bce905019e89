import type pg from 'pg';
import type { ConnectionOptions } from '../db/connection.js';
import type { Logger } from '../observe/logger.js';
import type { Duration } from '../validate/duration.js';
import type { LeaseLostError } from '../errors.js';
import type { Lease } from './lease.js';

/** Why an acquisition declined. */
export type SkipReason =
  /** Another holder has the lease and it has not expired. */
  | 'held'
  /** The lease is free by the clock, but its holder is committing a fenced transaction on it. */
  | 'holder-committing'
  /** Another acquirer is taking the lease at this instant (holder, since and until are null). */
  | 'being-acquired'
  /** A slot claim for a slot at or before the last claimed one: this occurrence already ran. */
  | 'slot-taken'
  /** A slot claim for a slot still in the future by the database clock. */
  | 'slot-not-due'
  /** A slot claim of a paused job (leasehold pause): no occurrence of it runs until it is resumed. */
  | 'paused';

export interface AcquireOptions {
  /** How long the lease lasts without renewal: milliseconds or '30s', '5m'. 100 ms to 7 days. */
  ttl: Duration;
  /** Claim this scheduled occurrence: succeeds only for a slot newer than the last claimed one and not in the future. */
  slot?: Date | undefined;
  /** Renew automatically every `heartbeatInterval` (together with the client's other kept leases: one statement per beat) until released or lost. @default false */
  heartbeat?: boolean | undefined;
  /** How often the heartbeat renews the lease. @default ttl / 3 */
  heartbeatInterval?: Duration | undefined;
}

export interface ForceReleaseOptions {
  /** Who releases it (an operator's name): recorded in `leasehold.actions`, and the run holding the lease is recorded `lost`, naming it. @default the login role, recorded as the actor */
  by?: string | undefined;
}

export interface RunOptions extends Omit<AcquireOptions, 'heartbeat'> {
  /**
   * Record the run in the history (leasehold.runs), as the scheduler and `leasehold exec` do,
   * so `leasehold status`, `leasehold runs NAME` and the dashboard show it; a run whose lease
   * was lost before it finished is recorded 'lost'. Costs one statement before the handler
   * (the release becomes the finishing statement). @default true
   */
  history?: boolean | undefined;
}

export interface NotAcquired {
  acquired: false;
  name: string;
  reason: SkipReason;
  /** Who holds (or last held) the lease, as it identified itself. */
  holder: string | null;
  /** When the current holder acquired it (database time). */
  since: Date | null;
  /** When the current holder's lease expires unless renewed (database time). */
  until: Date | null;
  /** The lease's current fence (an exact integer: see docs/high-availability.md for its range). */
  fence: number;
  lastSlot: Date | null;
  /** The database's now() when the decision was made. */
  databaseTime: Date;
}

export type AcquireResult = { acquired: true; lease: Lease } | NotAcquired;

export interface RunContext {
  /** Fires when the lease is lost (reason: a LeaseLostError). Pass it to fetch, timers, queries. */
  signal: AbortSignal;
  fence: number;
  /** Stable per occurrence: give it to payment providers, e-mail APIs and the like. */
  idempotencyKey: string;
  slot: Date | null;
  lease: Lease;
  /** A fenced transaction: see Lease.transaction. */
  transaction<T>(fn: (client: pg.PoolClient) => Promise<T>): Promise<T>;
}

export type RunResult<T> =
  | {
      ran: true;
      value: T;
      fence: number;
      /** Set when the lease was lost while the handler ran (it finished anyway). */
      lost?: LeaseLostError;
    }
  | { ran: false; skipped: NotAcquired };

/** A row of leasehold.lease_status. */
export interface LeaseStatus {
  name: string;
  state: 'free' | 'held' | 'expired';
  holder: string | null;
  fence: number;
  acquiredAt: Date | null;
  expiresAt: Date | null;
  secondsLeft: number | null;
  /** Whether the holder's liveness session is still connected (null when not tracked). */
  holderAlive: boolean | null;
  lastSlot: Date | null;
  releasedAt: Date | null;
}

export interface LeaseholdOptions extends ConnectionOptions {
  /** How this process names itself in leases and skips. @default `${hostname}:${pid}:${random}` */
  holder?: string | undefined;
  /**
   * The liveness session: a dedicated direct connection whose advisory lock frees this
   * process's leases at once when it dies. `false` turns it off (then only the TTL frees
   * the leases of a crashed holder); `{ connectionString }` points it at a direct server
   * address when lease calls go through a transaction-mode pooler.
   * @default true
   */
  liveness?: boolean | { connectionString: string } | undefined;
  /** Apply pending migrations on connect (under an advisory lock). With false, a schema that is not exactly current is an error. @default true */
  migrate?: boolean | undefined;
  /** Timeout for every library statement. Keep it well under your TTLs. @default '5s' */
  queryTimeout?: Duration | undefined;
  /** Timeout for opening a connection. @default '5s' */
  connectTimeout?: Duration | undefined;
  /** Connections for fenced transactions when the library creates the pool. @default 10 */
  poolSize?: number | undefined;
  /** pino-compatible logger. @default JSON lines on stderr, warnings and errors only */
  logger?: Logger | undefined;
}
