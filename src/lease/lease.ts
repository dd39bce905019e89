// A held lease: its identity (name, token, fence), its local deadline, its AbortSignal,
// renew, release and fenced transactions.
//
// The local deadline is measured on the monotonic clock from the moment the last confirmed
// acquire or renewal was *sent*; the server set expires_at = its now() + ttl at some later
// moment, so the local deadline never outlives the server's. When it passes without a
// confirmed renewal, the lease counts as lost and the signal fires, whatever the network does.
import { performance } from 'node:perf_hooks';
import { inspect } from 'node:util';
import type pg from 'pg';
import { isConnectionError, QueryTimeoutError, timedQuery } from '../db/connection.js';
import { InvalidArgumentError, LeaseLostError, type LeaseLostReason } from '../errors.js';
import type { LeaseInfo } from '../observe/events.js';
import { parseBoundedDuration, type Duration } from '../validate/duration.js';
import { checkOptionKeys } from '../validate/options.js';
import { runFencedTransaction } from './fenced-transaction.js';
import { TRANSACTION_OPTION_KEYS } from './option-keys.js';
import type { LeaseRuntime } from './runtime.js';
import { ACQUIRE_DEFAULTS, TRANSACTION_DEFAULTS } from './defaults.js';

export interface LeaseGrant {
  name: string;
  token: string;
  fence: number;
  holder: string;
  holderKey: string | null;
  acquiredAt: Date;
  expiresAt: Date;
  slot: Date | null;
  ttlMs: number;
  /** performance.now() when the acquire was sent. */
  sentAt: number;
}

export interface TransactionOptions {
  /**
   * How long the transaction may sit idle (between statements) before the server ends it.
   * Bounds how long a paused holder inside a fenced transaction can block a takeover.
   * @default the lease's ttl
   */
  idleTimeout?: Duration;
  /**
   * Read timeout of each statement `fn` runs (a statement's own `query_timeout` wins). When it
   * fires, the connection is closed and the transaction fails with TransactionFailedError.
   * @default the lease's ttl
   */
  statementTimeout?: Duration;
}

function checkTransactionOptions(options: TransactionOptions): void {
  if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'transaction(fn, options) takes an options object.');
  checkOptionKeys(options, TRANSACTION_OPTION_KEYS, 'transaction()');
}

type State = 'held' | 'lost' | 'released';

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
  /**
   * Stable key for external side effects (payments, e-mails, webhooks): `name@slot` for a
   * slot claim, so a retry of the same occurrence by another worker sends the same key;
   * `name#fence` otherwise.
   */
  readonly idempotencyKey: string;
  /** Fires (with a LeaseLostError as its reason) when the lease is lost or released. */
  readonly signal: AbortSignal;
  /** @internal liveness key the lease was taken under */
  readonly holderKey: string | null;

  private state: State = 'held';
  private expiry: Date;
  private readonly ttlMs: number;
  private readonly controller = new AbortController();
  private deadlineTimer: NodeJS.Timeout | undefined;
  /** performance.now() at which the lease counts as lost without a confirmed renewal. */
  private deadline = 0;
  private heartbeatTimer: NodeJS.Timeout | undefined;
  private lostError: LeaseLostError | undefined;

  constructor(
    grant: LeaseGrant,
    private readonly runtime: LeaseRuntime,
  ) {
    this.name = grant.name;
    this.token = grant.token;
    this.fence = grant.fence;
    this.holder = grant.holder;
    this.holderKey = grant.holderKey;
    this.acquiredAt = grant.acquiredAt;
    this.expiry = grant.expiresAt;
    this.slot = grant.slot;
    this.ttlMs = grant.ttlMs;
    this.signal = this.controller.signal;
    this.idempotencyKey = grant.slot ? `${grant.name}@${grant.slot.toISOString()}` : `${grant.name}#${grant.fence}`;
    this.armDeadline(grant.sentAt + grant.ttlMs);
  }

  /** Database time until which the lease is ours unless renewed (as last confirmed). */
  get expiresAt(): Date {
    return this.expiry;
  }

  /** True once the lease is known or presumed lost; see `lostReason`. */
  get lost(): boolean {
    return this.state === 'lost';
  }

  get released(): boolean {
    return this.state === 'released';
  }

  /** Why the lease was lost, if it was. */
  get lostReason(): LeaseLostError | undefined {
    return this.lostError;
  }

  /** @internal */
  info(): LeaseInfo {
    return { name: this.name, fence: this.fence, holder: this.holder, slot: this.slot };
  }

  /**
   * Extends the lease by `ttl` (default: the ttl it was acquired with) from the database's
   * now(). Throws LeaseLostError when it is no longer ours or the answer did not come in
   * time (then it must be presumed lost: the renewal may or may not have happened).
   */
  async renew(ttl?: Duration): Promise<Date> {
    this.throwIfNotHeld();
    const ttlMs = ttl === undefined ? this.ttlMs : parseBoundedDuration(ttl, 'ttl', ACQUIRE_DEFAULTS.ttl.minMs, ACQUIRE_DEFAULTS.ttl.maxMs);
    const sentAt = performance.now();
    let row: { renewed: boolean; expires_at: Date | null; reason: string; database_time: Date } | undefined;
    for (let attempt = 1; ; attempt++) {
      try {
        const attemptSent = performance.now();
        const result = await timedQuery<{ renewed: boolean; expires_at: Date | null; reason: string; database_time: Date }>(
          this.runtime.renewPool,
          'select renewed, expires_at, reason, database_time from leasehold.renew($1, $2, $3::interval)',
          [this.name, this.token, `${ttlMs} milliseconds`],
          Math.min(this.runtime.queryTimeoutMs, Math.max(ttlMs / 3, 50)),
          this.runtime.where,
        );
        row = result.rows[0];
        if (row) this.runtime.clock.observe(row.database_time, attemptSent, performance.now());
        break;
      } catch (error) {
        // A broken pooled connection (say the server restarted) gets one immediate retry on
        // a fresh connection; a timeout does not, because its outcome is unknown.
        const retry = attempt === 1 && !(error instanceof QueryTimeoutError) && isConnectionError((error as { cause?: unknown }).cause ?? error);
        if (retry && this.state === 'held') continue;
        this.markLost(error instanceof QueryTimeoutError ? 'renew-timeout' : 'renew-failed', error);
        throw this.lostError;
      }
    }
    if (this.state !== 'held') throw this.lostError ?? new LeaseLostError(this.name, this.fence, 'released');
    if (!row?.renewed || !row.expires_at) {
      this.markLost(renewReason(row?.reason));
      throw this.lostError;
    }
    this.expiry = row.expires_at;
    this.armDeadline(sentAt + ttlMs);
    this.runtime.events.emit('lease:renewed', { ...this.info(), expiresAt: row.expires_at });
    return row.expires_at;
  }

  /**
   * Frees the lease if it is still ours. Returns false when it no longer was (a late release
   * changes nothing). Never throws for a lost lease; throws DatabaseUnavailableError only when
   * the database cannot be reached (the lease then ends by its TTL or liveness).
   */
  async release(): Promise<boolean> {
    if (this.state === 'released') return false;
    const wasHeld = this.state === 'held';
    this.stopTimers();
    this.state = 'released';
    this.runtime.forget(this);
    if (wasHeld) this.controller.abort(new LeaseLostError(this.name, this.fence, 'released'));
    const { rows } = await timedQuery<{ released: boolean }>(
      this.runtime.controlPool,
      'select leasehold.release($1, $2) as released',
      [this.name, this.token],
      this.runtime.queryTimeoutMs,
      this.runtime.where,
    );
    const released = rows[0]?.released === true;
    this.runtime.events.emit('lease:released', this.info(), released);
    this.runtime.logger.debug({ event: 'lease:released', lease: this.name, fence: this.fence, released }, 'lease released');
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
    this.throwIfNotHeld();
    checkTransactionOptions(options);
    const idleMs =
      options.idleTimeout === undefined ? this.ttlMs : parseBoundedDuration(options.idleTimeout, 'idleTimeout', TRANSACTION_DEFAULTS.idleTimeout.minMs, TRANSACTION_DEFAULTS.idleTimeout.maxMs);
    const statementMs =
      options.statementTimeout === undefined ? this.ttlMs : parseBoundedDuration(options.statementTimeout, 'statementTimeout', TRANSACTION_DEFAULTS.statementTimeout.minMs, TRANSACTION_DEFAULTS.statementTimeout.maxMs);
    return runFencedTransaction(
      {
        name: this.name,
        token: this.token,
        fence: this.fence,
        isHeld: () => this.state === 'held',
        refused: (error, detail) => {
          this.markLost('fence-mismatch', error, detail);
          return this.lostError ?? new LeaseLostError(this.name, this.fence, 'fence-mismatch');
        },
        reconfirm: async () => {
          await this.renew();
          this.runtime.logger.info(
            { event: 'lease:reconfirmed', lease: this.name, fence: this.fence },
            `lease "${this.name}" renewed after a database failover; running its fenced transaction again`,
          );
        },
      },
      this.runtime,
      { idleMs, statementMs },
      fn,
    );
  }

  /**
   * @internal the lease was released by another statement (the scheduler's finish_run):
   * stop heartbeats and fire the signal without a round trip of its own.
   */
  releasedRemotely(): void {
    if (this.state === 'released') return;
    const wasHeld = this.state === 'held';
    this.stopTimers();
    this.state = 'released';
    this.runtime.forget(this);
    if (wasHeld) this.controller.abort(new LeaseLostError(this.name, this.fence, 'released'));
  }

  /** @internal heartbeat every `intervalMs` until the lease ends. */
  startHeartbeat(intervalMs: number): void {
    const beat = () => {
      if (this.state !== 'held') return;
      this.renew()
        .catch(() => undefined) // renew() has already marked the lease lost and logged it
        .finally(() => {
          if (this.state === 'held') {
            this.heartbeatTimer = setTimeout(beat, intervalMs);
            this.heartbeatTimer.unref();
          }
        });
    };
    this.heartbeatTimer = setTimeout(beat, intervalMs);
    this.heartbeatTimer.unref();
  }

  /** @internal the lease stopped being ours: fire the signal once, log, stop timers. */
  markLost(reason: LeaseLostReason, cause?: unknown, detail?: string): void {
    if (this.state !== 'held') return;
    this.state = 'lost';
    this.stopTimers();
    this.lostError = new LeaseLostError(
      this.name,
      this.fence,
      reason,
      `Lease "${this.name}" (fence ${this.fence}) is lost (${reason}${detail ? `: ${detail}` : ''}); ` +
        'stop work that depends on it. Fenced writes under it will be refused.',
      cause === undefined ? undefined : { cause },
    );
    this.runtime.forget(this);
    this.controller.abort(this.lostError);
    this.runtime.events.emit('lease:lost', this.info(), this.lostError);
    this.runtime.logger.warn(
      { event: 'lease:lost', lease: this.name, fence: this.fence, holder: this.holder, reason, detail },
      `lease "${this.name}" lost (${reason})`,
    );
  }

  /**
   * @internal the database clock stepped (see DatabaseClock): the lease expires at its
   * database expiry on the new time. Already past it: lost at once. Otherwise the local
   * deadline moves earlier if the step brought the expiry closer.
   */
  clockStepped(databaseNow: Date, deltaMs: number): void {
    if (this.state !== 'held') return;
    const left = this.expiry.getTime() - databaseNow.getTime();
    if (left <= 0) {
      this.markLost('clock-step', undefined, `the database clock stepped ${deltaMs > 0 ? '+' : ''}${(deltaMs / 1000).toFixed(1)} s past its expiry`);
      return;
    }
    const deadline = performance.now() + left;
    if (deadline < this.deadline) this.armDeadline(deadline);
  }

  private armDeadline(monotonicDeadline: number): void {
    clearTimeout(this.deadlineTimer);
    this.deadline = monotonicDeadline;
    this.deadlineTimer = setTimeout(() => this.markLost('expired'), Math.max(0, monotonicDeadline - performance.now()));
    this.deadlineTimer.unref();
  }

  private stopTimers(): void {
    clearTimeout(this.deadlineTimer);
    clearTimeout(this.heartbeatTimer);
  }

  private throwIfNotHeld(): void {
    if (this.state === 'lost') throw this.lostError;
    if (this.state === 'released') throw new LeaseLostError(this.name, this.fence, 'released');
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.release().catch(() => undefined);
  }

  /** What logging a lease shows (JSON.stringify, pino, console.log): everything but the token. */
  toJSON(): { name: string; fence: number; holder: string; acquiredAt: Date; expiresAt: Date; slot: Date | null; state: State } {
    return { name: this.name, fence: this.fence, holder: this.holder, acquiredAt: this.acquiredAt, expiresAt: this.expiry, slot: this.slot, state: this.state };
  }

  [inspect.custom](): string {
    return `Lease ${inspect(this.toJSON())}`;
  }
}

function renewReason(reason: string | undefined): LeaseLostReason {
  switch (reason) {
    case 'expired':
      return 'expired';
    case 'released':
      return 'released';
    default:
      return 'taken-over';
  }
}
