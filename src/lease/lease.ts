// A held lease as its holder sees it: identity (name, token, fence), expiry, AbortSignal,
// renew, release and fenced transactions. Its state and deadline live in a LeaseControl
// (lease-control.ts) that only the library reaches: nothing internal is public here.
import { inspect } from 'node:util';
import type pg from 'pg';
import { timedQuery } from '../db/connection.js';
import { InvalidArgumentError, LeaseLostError } from '../errors.js';
import { parseBoundedDuration, type Duration } from '../validate/duration.js';
import { checkOptionKeys } from '../validate/options.js';
import { runFencedTransaction } from './fenced-transaction.js';
import type { LeaseControl } from './lease-control.js';
import { TRANSACTION_OPTION_KEYS } from './option-keys.js';
import { ACQUIRE_DEFAULTS, TRANSACTION_DEFAULTS } from './defaults.js';
import { renewOne } from './renewal.js';

export interface TransactionOptions {
  /**
   * How long the transaction may sit idle (between statements) before the server ends it.
   * Bounds how long a paused holder inside a fenced transaction can block a takeover.
   * @default the lease's ttl
   */
  idleTimeout?: Duration | undefined;
  /**
   * Read timeout of each statement `fn` runs (a statement's own `query_timeout` wins). When it
   * fires, the connection is closed and the transaction fails with TransactionFailedError.
   * @default the lease's ttl
   */
  statementTimeout?: Duration | undefined;
}

function checkTransactionOptions(options: TransactionOptions): void {
  if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'transaction(fn, options) takes an options object.');
  checkOptionKeys(options, TRANSACTION_OPTION_KEYS, 'transaction()');
}

// Set by Lease's static block: the only ways to make a Lease and to reach its control.
let construct: (control: LeaseControl) => Lease;
let controlOf: (lease: Lease) => LeaseControl;

export class Lease {
  readonly name: string;
  /** Secret of this acquisition. Never log it. */
  readonly token: string;
  /** Grows by one on every acquisition of this name; compare it in your own writes. */
  readonly fence: number;
  readonly holder: string;
  /** Database time of the acquisition. */
  readonly acquiredAt: Date;
  /** The scheduled occurrence this lease was claimed for, if any. */
  readonly slot: Date | null;
  readonly #control: LeaseControl;

  private constructor(control: LeaseControl) {
    const { grant } = control;
    this.#control = control;
    this.name = grant.name;
    this.token = grant.token;
    this.fence = grant.fence;
    this.holder = grant.holder;
    this.acquiredAt = grant.acquiredAt;
    this.slot = grant.slot;
  }

  /**
   * Stable key for external side effects (payments, e-mails, webhooks): `name@slot` for a
   * slot claim, so a retry of the same occurrence by another worker sends the same key;
   * `name#fence` otherwise.
   */
  get idempotencyKey(): string {
    return this.slot ? `${this.name}@${this.slot.toISOString()}` : `${this.name}#${this.fence}`;
  }

  /** Fires (with a LeaseLostError as its reason) when the lease is lost or released. */
  get signal(): AbortSignal {
    return this.#control.signal;
  }

  static {
    construct = (control) => new Lease(control);
    controlOf = (lease) => lease.#control;
  }

  /** Database time until which the lease is ours unless renewed (as last confirmed). */
  get expiresAt(): Date {
    return this.#control.expiry;
  }

  /** True once the lease is known or presumed lost; see `lostReason`. */
  get lost(): boolean {
    return this.#control.state === 'lost';
  }

  get released(): boolean {
    return this.#control.state === 'released';
  }

  /** Why the lease was lost, if it was. */
  get lostReason(): LeaseLostError | undefined {
    return this.#control.lostError;
  }

  /**
   * Extends the lease by `ttl` (default: the ttl it was acquired with) from the database's
   * now(). Throws LeaseLostError when it is no longer ours or the answer did not come in
   * time (then it must be presumed lost: the renewal may or may not have happened).
   */
  async renew(ttl?: Duration): Promise<Date> {
    this.#control.throwIfNotHeld();
    const ttlMs = ttl === undefined ? this.#control.grant.ttlMs : parseBoundedDuration(ttl, 'ttl', ACQUIRE_DEFAULTS.ttl.minMs, ACQUIRE_DEFAULTS.ttl.maxMs);
    return renewOne(this.#control, ttlMs);
  }

  /**
   * Frees the lease if it is still ours. Returns false when it no longer was (a late release
   * changes nothing). Never throws for a lost lease; throws DatabaseUnavailableError only when
   * the database cannot be reached (the lease then ends by its TTL or liveness).
   */
  async release(): Promise<boolean> {
    const control = this.#control;
    if (!control.endHere()) return false;
    const { runtime } = control;
    const { rows } = await timedQuery<{ released: boolean }>(
      runtime.controlPool,
      'select leasehold.release($1, $2) as released',
      [this.name, this.token],
      runtime.queryTimeoutMs,
      runtime.where,
      { prepared: true },
    );
    const released = rows[0]?.released === true;
    if (runtime.events.wants('lease:released')) runtime.events.emit('lease:released', control.info(), released);
    return released;
  }

  /**
   * Runs `fn` in a transaction that first locks the lease row where name, token and fence
   * still match and the lease is unexpired (leasehold.assert_lease). While it is open no
   * other holder can take the lease over, so what it commits cannot come from a stale holder.
   * Every statement has a read timeout (BEGIN and COMMIT: queryTimeout; yours: statementTimeout).
   * After a database failover the lease is refused until a renewal confirms it on the new
   * primary: then the call renews once itself and checks the fence again.
   * Throws LeaseLostError (and rolls back) when the lease is no longer ours;
   * TransactionFailedError when the server rolled back (serialization failure, deadlock,
   * read-only server, broken connection, timeout): nothing was written;
   * TransactionControlError when `fn` tried BEGIN/COMMIT/ROLLBACK itself: nothing was written;
   * OutcomeUnknownError when the COMMIT was sent but no answer came.
   */
  async transaction<T>(fn: (client: pg.PoolClient) => Promise<T>, options: TransactionOptions = {}): Promise<T> {
    const control = this.#control;
    control.throwIfNotHeld();
    checkTransactionOptions(options);
    const { ttlMs } = control.grant;
    const idleMs = options.idleTimeout === undefined ? ttlMs : parseBoundedDuration(options.idleTimeout, 'idleTimeout', TRANSACTION_DEFAULTS.idleTimeout.minMs, TRANSACTION_DEFAULTS.idleTimeout.maxMs);
    const statementMs =
      options.statementTimeout === undefined ? ttlMs : parseBoundedDuration(options.statementTimeout, 'statementTimeout', TRANSACTION_DEFAULTS.statementTimeout.minMs, TRANSACTION_DEFAULTS.statementTimeout.maxMs);
    const started = performance.now();
    const { events } = control.runtime;
    const finished = (error: unknown) => {
      if (!events.wants('transaction:finished')) return;
      events.emit('transaction:finished', {
        ...control.info(),
        outcome: error === undefined ? 'committed' : 'failed',
        error: error === undefined ? null : error instanceof Error ? `${error.name}: ${error.message}` : String(error),
        durationMs: performance.now() - started,
      });
    };
    const result = runFencedTransaction(
      {
        name: this.name,
        token: this.token,
        fence: this.fence,
        isHeld: () => control.held,
        refused: (error, detail) => {
          control.markLost('fence-mismatch', error, detail);
          return control.lostError ?? new LeaseLostError(this.name, this.fence, 'fence-mismatch');
        },
        reconfirm: async () => {
          await this.renew();
          control.runtime.logger.info(
            { event: 'lease:reconfirmed', lease: this.name, fence: this.fence },
            `lease "${this.name}" renewed after a database failover; running its fenced transaction again`,
          );
        },
      },
      control.runtime,
      { idleMs, statementMs },
      fn,
    );
    // observers (OpenTelemetry) see each transaction; the result is returned unchanged
    return result.then(
      (value) => {
        finished(undefined);
        return value;
      },
      (error: unknown) => {
        finished(error);
        throw error;
      },
    );
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release().catch(() => undefined);
  }

  /** What logging a lease shows (JSON.stringify, pino, console.log): everything but the token. */
  toJSON(): { name: string; fence: number; holder: string; acquiredAt: Date; expiresAt: Date; slot: Date | null; state: 'held' | 'lost' | 'released' } {
    return { name: this.name, fence: this.fence, holder: this.holder, acquiredAt: this.acquiredAt, expiresAt: this.expiresAt, slot: this.slot, state: this.#control.state };
  }

  [inspect.custom](): string {
    return `Lease ${inspect(this.toJSON())}`;
  }
}

/** The public face of a lease the library took (not exported from the package). */
export function leaseOf(control: LeaseControl): Lease {
  return construct(control);
}

/** The control of a lease (not exported from the package). */
export function controlOfLease(lease: Lease): LeaseControl {
  return controlOf(lease);
}
