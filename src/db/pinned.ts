// Pinned pools: when the sessions of a pool do not suit the protocol (session-settings.ts), each
// of the library's statements on it runs in a transaction of its own that sets what the protocol
// needs: one simple query `set local statement_timeout; begin isolation level read committed;
// set local idle_in_transaction_session_timeout` (the opening, role-timeout.ts), the statement,
// COMMIT. Three round trips instead of one, on such pools only; a pool whose sessions suit it is
// never pinned.
//
// Why a transaction of its own, and not:
// - a SET per session on connect: through a transaction pooler (PgBouncer, docs/pgbouncer.md) the
//   next statement may run on another server session than the SET did;
// - pg's `statement_timeout` or `options: '-c …'` settings: sent as startup parameters, which
//   PgBouncer refuses unless told to ignore them (and then ignores them), and a pool the user
//   passes is not ours to configure;
// - the SQL functions: a function cannot change the isolation level of the transaction that
//   called it, and a statement_timeout it sets does not apply to the statement already running.
//
// A pool is pinned at start by what the connect check read, or later by a statement's error
// that says the session does not suit: a serialization failure (40001) or a cancel by the
// server's statement_timeout. Either rolled the statement back, so it runs again, pinned.
import type pg from 'pg';
import { isStatementTimeout, sendOpening } from './role-timeout.js';

interface PinGroup {
  /** Why the pools are pinned; null while they are not. */
  reason: string | null;
  /** Told once, when the group is pinned. */
  onPinned: ((reason: string) => void) | undefined;
}

const groups = new WeakMap<pg.Pool, PinGroup>();

/**
 * Makes `pools` one group (the pools of one client reach the same server as the same role):
 * pinning one pins them all, and `onPinned` hears it once.
 */
export function pinGroup(pools: readonly pg.Pool[], onPinned?: (reason: string) => void): void {
  const group: PinGroup = { reason: null, onPinned };
  for (const pool of pools) {
    const before = groups.get(pool);
    if (before?.reason && !group.reason) group.reason = before.reason;
    groups.set(pool, group);
  }
}

/** Pins `pool` (and its group) for `reason`; a pool pinned already keeps its first reason. */
export function pin(pool: pg.Pool, reason: string): void {
  let group = groups.get(pool);
  if (!group) groups.set(pool, (group = { reason: null, onPinned: undefined }));
  if (group.reason) return;
  group.reason = reason;
  group.onPinned?.(reason);
}

/** Why `pool` is pinned, or null when its statements run as they are. */
export function pinnedReason(pool: pg.Pool): string | null {
  return groups.get(pool)?.reason ?? null;
}

/**
 * The opening of a pinned transaction: the server's statement and idle timeouts at the client's
 * own timeout, and READ COMMITTED. One simple query, so one round trip; the SET first, so that
 * only it runs under the role's statement_timeout (role-timeout.ts). SET LOCAL before BEGIN in
 * one query string belongs to the transaction BEGIN then makes explicit.
 */
function pinnedBegin(timeoutMs: number): string {
  const ms = Math.max(1, Math.round(timeoutMs));
  return `set local statement_timeout = ${ms}; begin isolation level read committed; set local idle_in_transaction_session_timeout = ${ms}`;
}

/** Why an unpinned statement's error asks for pinning (it was rolled back: it may run again), or null. */
export function pinFor(error: unknown): string | null {
  if ((error as { code?: unknown } | null)?.code === '40001') {
    return 'a statement failed with a serialization failure (40001): the session isolation level is above READ COMMITTED';
  }
  if (isStatementTimeout(error)) {
    return "the server's statement_timeout cancelled a statement before its own timeout";
  }
  return null;
}

/** A query as the handle sends it. */
export interface StatementSpec {
  text: string;
  values: unknown[];
  timeoutMs: number;
  rowMode: 'array' | undefined;
  /** A named statement (prepared.ts), or undefined. */
  name?: string | undefined;
}

/**
 * `statement` in a pinned transaction on `client`. A failed statement is rolled back (nothing
 * happened); a connection left inside the transaction is the caller's to destroy (giveBack).
 */
export async function runPinned<R extends pg.QueryResultRow>(client: pg.PoolClient, statement: StatementSpec, breaksSession: (error: unknown) => boolean): Promise<pg.QueryResult<R>> {
  const { text, values, timeoutMs, rowMode, name } = statement;
  await sendOpening(client, pinnedBegin(timeoutMs), timeoutMs);
  let result: pg.QueryResult<R>;
  try {
    result = await client.query<R>({ text, values, query_timeout: timeoutMs, rowMode, name } as pg.QueryConfig);
  } catch (error) {
    if (!breaksSession(error)) await client.query({ text: 'rollback', query_timeout: timeoutMs } as pg.QueryConfig).catch(() => undefined);
    throw error;
  }
  await client.query({ text: 'commit', query_timeout: timeoutMs } as pg.QueryConfig);
  return result;
}
