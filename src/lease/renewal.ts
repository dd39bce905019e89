// Renewing leases over the wire (leasehold.renew_leases): one lease (Lease.renew) or many in one
// statement (what the heartbeat sends). Both apply the answer the same way: a confirmed renewal
// moves the lease's local deadline, anything else loses the lease with the answer's reason. A statement that timed out loses every lease in it (the renewal may or may not have
// happened); a broken pooled connection gets one immediate retry on a fresh one.
import { performance } from 'node:perf_hooks';
import { isConnectionError, QueryTimeoutError, timedQuery } from '../db/connection.js';
import { DatabaseUnavailableError } from '../errors.js';
import { renewReason, type LeaseControl } from './lease-control.js';
import type { LeaseRuntime } from './runtime.js';
import { restartLike } from '../db/server-restart.js';

interface RenewRow {
  renewed: boolean;
  expires_at: Date | null;
  reason: string;
  database_time: Date;
}

/** The read timeout of a renewal: well inside the lease's ttl, never over queryTimeout. */
function renewTimeoutMs(runtime: LeaseRuntime, ttlMs: number): number {
  return Math.min(runtime.queryTimeoutMs, Math.max(ttlMs / 3, 50));
}

/** Runs `send` once more on a fresh connection when the first attempt's connection broke. */
async function withOneRetry<T>(send: () => Promise<T>, stillWanted: () => boolean): Promise<T> {
  try {
    return await send();
  } catch (error) {
    // a timeout's outcome is unknown: no retry
    const retry = !(error instanceof QueryTimeoutError) && isConnectionError((error as { cause?: unknown }).cause ?? error);
    if (retry && stillWanted()) return send();
    throw error;
  }
}

function lossOf(error: unknown): 'renew-timeout' | 'renew-failed' {
  return error instanceof QueryTimeoutError ? 'renew-timeout' : 'renew-failed';
}

/** Applies one answer of renew_leases to the lease; returns the new expiry or undefined. */
function apply(control: LeaseControl, row: RenewRow | undefined, sentAt: number, ttlMs: number): Date | undefined {
  if (control.state !== 'held') return undefined;
  if (!row?.renewed || !row.expires_at) {
    control.markLost(renewReason(row?.reason));
    return undefined;
  }
  control.confirmed(row.expires_at, sentAt, ttlMs);
  return row.expires_at;
}

/** leasehold.renew_leases of one lease. Throws LeaseLostError when the lease is (presumed) lost. */
export async function renewOne(control: LeaseControl, ttlMs: number): Promise<Date> {
  control.throwIfNotHeld();
  if (control.suspended) {
    // its liveness session was ended by the server: the new session's reconfirm_leases decides,
    // and renews it when it keeps it (a renewal now would believe it without that proof)
    await control.whenSettled();
    control.throwIfNotHeld();
    return control.expiry;
  }
  const { runtime, grant } = control;
  const sentAt = performance.now();
  let row: RenewRow | undefined;
  try {
    row = await withOneRetry(async () => {
      const attemptSent = performance.now();
      const result = await timedQuery<RenewRow>(
        runtime.renewPool,
        'select renewed, expires_at, reason, database_time from leasehold.renew_leases(($1::text, $2::uuid, $3::interval))',
        [grant.name, grant.token, `${ttlMs} milliseconds`],
        renewTimeoutMs(runtime, ttlMs),
        runtime.where,
        { prepared: true },
      );
      const answer = result.rows[0];
      if (answer) runtime.clock.observe(answer.database_time, attemptSent, performance.now());
      return answer;
    }, () => control.held);
  } catch (error) {
    control.markLost(lossOf(error), error);
    control.throwIfNotHeld();
    throw error;
  }
  const expiresAt = apply(control, row, sentAt, ttlMs);
  if (expiresAt) return expiresAt;
  control.throwIfNotHeld();
  throw new Error('unreachable: a lease not renewed is lost');
}

/**
 * One heartbeat for many leases: leasehold.renew_leases in one statement. A statement the
 * server refused (say a lock timeout on one row) falls back to one renewal per lease, so that
 * only the leases that really failed are lost.
 */
export async function renewMany(runtime: LeaseRuntime, batch: readonly LeaseControl[]): Promise<void> {
  // a suspended lease is renewed by reconfirm_leases, if it is kept (tracker.ts)
  const held = batch.filter((control) => control.held && !control.suspended);
  if (held.length === 0) return;
  const names: string[] = [];
  const tokens: string[] = [];
  const ttls: string[] = [];
  let timeoutMs = runtime.queryTimeoutMs;
  for (const control of held) {
    names.push(control.grant.name);
    tokens.push(control.grant.token);
    ttls.push(`${control.grant.ttlMs} milliseconds`);
    timeoutMs = Math.min(timeoutMs, renewTimeoutMs(runtime, control.grant.ttlMs));
  }
  let sentAt = performance.now();
  let rows: Array<RenewRow & { name: string }>;
  try {
    rows = await withOneRetry(async () => {
      sentAt = performance.now();
      const result = await timedQuery<RenewRow & { name: string }>(
        runtime.renewPool,
        `select r.name, r.renewed, r.expires_at, r.reason, r.database_time
           from leasehold.renew_leases(variadic array(
                  select row(n, t, i)::leasehold.lease_renewal
                    from unnest($1::text[], $2::uuid[], $3::interval[]) with ordinality as u(n, t, i, k) order by k)) r`,
        [names, tokens, ttls],
        timeoutMs,
        runtime.where,
        { prepared: true },
      );
      const first = result.rows[0];
      if (first) runtime.clock.observe(first.database_time, sentAt, performance.now());
      return result.rows;
    }, () => held.some((control) => control.held));
  } catch (error) {
    // the server answered with a refusal (not a lost connection, not a timeout)
    if (!(error instanceof DatabaseUnavailableError)) {
      await Promise.all(held.map((control) => renewOne(control, control.grant.ttlMs).catch(() => undefined)));
      return;
    }
    // a restarting server (the session ended by it, refused, reset): the renewal did not happen,
    // and the leases stay ours until their local deadlines; the next beat tries again, and a
    // lease whose liveness session the server ended waits for its verdict (tracker.ts)
    if (!(error instanceof QueryTimeoutError) && restartLike(error)) return;
    for (const control of held) control.markLost(lossOf(error), error);
    return;
  }
  // one row per element, in the order sent
  held.forEach((control, i) => {
    const row = rows[i];
    apply(control, row?.name === control.grant.name ? row : undefined, sentAt, control.grant.ttlMs);
  });
}
