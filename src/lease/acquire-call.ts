// One acquisition over the wire. The client makes the token itself, so that when the answer
// is lost (a timeout, a dropped connection) its retry presents the same token and gets its own
// grant back (same fence) instead of finding the lease "held" by itself.
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { timedQuery } from '../db/connection.js';
import { DatabaseReadOnlyError, DatabaseUnavailableError } from '../errors.js';
import type { LeaseRuntime } from './runtime.js';

export interface AcquireRow {
  acquired: boolean;
  token: string | null;
  fence: string;
  expires_at: Date | null;
  holder: string | null;
  acquired_at: Date | null;
  last_slot: Date | null;
  reason: string;
  database_time: Date;
  took_over: boolean;
}

export interface AcquireRequest {
  name: string;
  ttlMs: number;
  holder: string;
  holderKey: string | null;
  slot: Date | null;
}

/** The answer, and when the request that got it was sent (the start of the local deadline). */
export async function callAcquire(runtime: LeaseRuntime, request: AcquireRequest): Promise<{ row: AcquireRow; sentAt: number }> {
  const token = randomUUID();
  let sentAt = performance.now();
  const attempt = async (): Promise<AcquireRow> => {
    sentAt = performance.now();
    const result = await timedQuery<AcquireRow>(
      runtime.controlPool,
      'select * from leasehold.acquire($1, $2::interval, $3, $4::bigint, $5, $6::uuid)',
      [request.name, `${request.ttlMs} milliseconds`, request.holder, request.holderKey, request.slot, token],
      // an answer later than the ttl would hand us a lease that is already over
      Math.min(runtime.queryTimeoutMs, request.ttlMs),
      runtime.where,
      { prepared: true },
    );
    const row = result.rows[0];
    if (!row) throw new Error('leasehold.acquire returned no row');
    runtime.clock.observe(row.database_time, sentAt, performance.now());
    return row;
  };
  let row: AcquireRow;
  try {
    row = await attempt();
  } catch (error) {
    // a read-only server refused the statement: nothing was granted, and asking again changes nothing
    if (!(error instanceof DatabaseUnavailableError) || error instanceof DatabaseReadOnlyError) throw error;
    // The grant may have committed: ask once more with the same token.
    runtime.logger.warn(
      { event: 'lease:acquire-retry', lease: request.name, err: error.message },
      `acquire of "${request.name}" got no answer; asking again with the same token`,
    );
    try {
      row = await attempt();
      // 'being-acquired' may be our own first attempt, still running: once it commits, the
      // lease is held with our token and the next ask adopts it
      for (const pause of [25, 100, 400]) {
        if (row.acquired || row.reason !== 'being-acquired') break;
        await new Promise((resolve) => setTimeout(resolve, pause));
        row = await attempt();
      }
    } catch (retryError) {
      releaseUnknownGrant(runtime, request.name, token);
      throw retryError;
    }
    if (!row.acquired) releaseUnknownGrant(runtime, request.name, token);
  }
  return { row, sentAt };
}

/**
 * An acquisition whose outcome stayed unknown: free its grant if it committed (a release with
 * a token that matches nothing changes nothing). Again after the acquire's lock_timeout, for a
 * first attempt that was still running. Best effort; the TTL is the backstop.
 */
function releaseUnknownGrant(runtime: LeaseRuntime, name: string, token: string): void {
  for (const delay of [0, 2_500]) {
    setTimeout(() => {
      timedQuery(runtime.controlPool, 'select leasehold.release($1, $2::uuid)', [name, token], runtime.queryTimeoutMs, runtime.where).catch(() => undefined);
    }, delay).unref();
  }
}
