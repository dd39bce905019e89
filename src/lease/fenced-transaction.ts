// A fenced transaction: BEGIN, leasehold.assert_lease (locks the lease row while name, token
// and fence still match), the caller's statements, COMMIT. A lease refused only because it was
// last confirmed before a failover is renewed once and checked again. Every statement has a
// read timeout, BEGIN included; a connection whose statement timed out or broke is destroyed,
// never handed back to the pool, so the next transaction cannot queue behind a stuck one
// (the checkout and give-back rules of src/db/handle.ts).
// Failures reach the caller as typed errors that say what happened to the lease and writes.
import type pg from 'pg';
import { isConnectionError } from '../db/connection.js';
import { breaksSession, checkout, checkoutTimeout, giveBack, isReadTimeout } from '../db/handle.js';
import { LeaseLostError, OutcomeUnknownError, TransactionControlError, TransactionFailedError, type TransactionFailure } from '../errors.js';
import { guardClient, type GuardState } from './fenced-client.js';
import type { LeaseRuntime } from './runtime.js';

export interface FencedLease {
  readonly name: string;
  readonly token: string;
  readonly fence: number;
  /** The lease is still held as far as this process knows. */
  isHeld(): boolean;
  /** The database refused the fence (LH003): mark the lease lost and return why. */
  refused(error: unknown, detail: string | undefined): LeaseLostError;
  /** Renews the lease, confirming it in the server's current epoch; throws LeaseLostError if it is lost. */
  reconfirm(): Promise<void>;
}

// The first words of assert_lease's DETAIL when the lease is held but was last confirmed
// before a failover (docs/sql-api.md): not lost, only waiting for a renewal on the new primary.
const UNCONFIRMED_DETAIL = 'a database failover happened since the lease was last confirmed';

/** True for the LH003 that a renewal may cure: the lease was last confirmed before a failover. */
function isUnconfirmedSinceFailover(error: unknown): boolean {
  const { code, detail } = error as { code?: unknown; detail?: unknown };
  return code === 'LH003' && typeof detail === 'string' && detail.startsWith(UNCONFIRMED_DETAIL);
}

export interface FencedSettings {
  idleMs: number;
  /** Read timeout of the caller's statements (a statement may bring its own query_timeout). */
  statementMs: number;
}

const FAILURES: Record<string, TransactionFailure> = { '40001': 'serialization-failure', '40P01': 'deadlock', '25006': 'read-only' };

function failureOf(error: unknown): TransactionFailure | undefined {
  if (isReadTimeout(error)) return 'timeout';
  const code = (error as { code?: unknown }).code;
  if (typeof code === 'string' && code in FAILURES) return FAILURES[code];
  if (isConnectionError(error)) return 'connection-lost';
  return undefined;
}

function describeFailure(failure: TransactionFailure): string {
  switch (failure) {
    case 'serialization-failure':
      return 'a serialization failure (40001) under SERIALIZABLE or REPEATABLE READ isolation; run the transaction again';
    case 'deadlock':
      return 'a deadlock (40P01); run the transaction again';
    case 'read-only':
      return 'the server or session is read-only (25006: a standby, or default_transaction_read_only = on); point the client at the primary';
    case 'connection-lost':
      return 'the connection broke before COMMIT was sent; the server rolls the transaction back';
    case 'timeout':
      return 'a statement got no answer in time; the connection was closed and the server rolls the transaction back';
  }
}

export async function runFencedTransaction<T>(
  lease: FencedLease,
  runtime: LeaseRuntime,
  settings: FencedSettings,
  fn: (client: pg.PoolClient) => Promise<T>,
): Promise<T> {
  const client = await checkout(runtime.workPool, checkoutTimeout(runtime.queryTimeoutMs), runtime.where);
  const timeoutMs = runtime.queryTimeoutMs;
  let connectionError: Error | undefined;
  const onError = (error: Error) => {
    connectionError = error;
  };
  client.on('error', onError);
  const guard: GuardState = { violation: undefined, broken: undefined };
  // Destroy rather than reuse whenever the session's state is not known to be clean.
  let destroy: Error | undefined;
  let committing = false;
  const failed = (failure: TransactionFailure, cause: unknown) =>
    new TransactionFailedError(
      lease.name,
      lease.fence,
      failure,
      lease.isHeld(),
      `The fenced transaction on lease "${lease.name}" (fence ${lease.fence}) failed: ${describeFailure(failure)}. ` +
        `Nothing it wrote was committed. The lease is ${lease.isHeld() ? 'still held by this process' : 'no longer held'}.`,
      { cause },
    );
  const controlError = (what: string) =>
    new TransactionControlError(
      lease.name,
      lease.fence,
      `${what} inside the fenced transaction on lease "${lease.name}" (fence ${lease.fence}) was refused: ` +
        'the library opens and commits the transaction, and statements after an early COMMIT would run unfenced. ' +
        'The transaction was rolled back; nothing was written. Use savepoints for partial rollbacks.',
    );
  try {
    // After a failover the live holder's lease is refused until its next renewal confirms it
    // on the new primary: renew once, here, and check the fence again rather than lose the work.
    for (let attempt = 1; ; attempt++) {
      try {
        await client.query({ text: 'begin', query_timeout: timeoutMs } as pg.QueryConfig);
        await client.query({
          text: `select set_config('idle_in_transaction_session_timeout', $4, true),
                        leasehold.assert_lease($1, $2, $3)`,
          values: [lease.name, lease.token, lease.fence, `${Math.round(settings.idleMs)}ms`],
          query_timeout: timeoutMs,
        } as pg.QueryConfig);
        break;
      } catch (error) {
        if ((error as { code?: string }).code !== 'LH003') throw error;
        if (attempt > 1 || !isUnconfirmedSinceFailover(error)) throw lease.refused(error, (error as { detail?: string }).detail);
        await client.query({ text: 'rollback', query_timeout: timeoutMs } as pg.QueryConfig);
        await lease.reconfirm(); // LeaseLostError when the renewal finds the lease lost
      }
    }
    const guarded = guardClient(client, guard, settings.statementMs, controlError, breaksSession);
    let value: T;
    try {
      value = await fn(guarded);
    } catch (error) {
      if (guard.violation && !(error instanceof TransactionControlError)) throw controlError(guard.violation);
      throw error;
    }
    if (guard.violation) throw controlError(guard.violation);
    if (guard.broken) throw guard.broken;
    committing = true;
    const result = await client.query({ text: 'commit', query_timeout: timeoutMs } as pg.QueryConfig);
    if (result.command === 'ROLLBACK') {
      throw new Error('The fenced transaction was rolled back because a statement inside it failed.');
    }
    return value;
  } catch (error) {
    const broken = connectionError ?? guard.broken ?? (breaksSession(error) ? (error as Error) : undefined);
    if (broken || guard.violation) destroy = broken ?? new Error(`transaction control refused: ${guard.violation}`);
    if (committing && broken) {
      throw new OutcomeUnknownError(
        `The COMMIT of the fenced transaction on lease "${lease.name}" (fence ${lease.fence}) got no answer; ` +
          'it may or may not have committed: check the data before retrying. The connection was closed. ' +
          `The lease is ${lease.isHeld() ? 'still held by this process' : 'no longer held'}.`,
        { cause: error, leaseName: lease.name, fence: lease.fence },
      );
    }
    if (!committing && !destroy) {
      await client.query({ text: 'rollback', query_timeout: timeoutMs } as pg.QueryConfig).catch((rollbackError: unknown) => {
        destroy = rollbackError as Error;
      });
    }
    if (error instanceof LeaseLostError || error instanceof TransactionControlError) throw error;
    const failure = failureOf(broken ?? error);
    if (failure) throw failed(failure, error);
    throw error;
  } finally {
    client.off('error', onError);
    // A session still inside a transaction (or one whose state we lost track of) is not reused.
    giveBack(client, destroy ?? connectionError);
  }
}
