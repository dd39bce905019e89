// One database handle for the library's own queries and plain transactions: every checkout
// waits a bounded time, every statement has a timeout, and a connection whose statement timed
// out or broke is destroyed instead of going back to the pool (the statement may still be
// running on it, and the next query would queue behind it). The fenced transaction
// (src/lease/fenced-transaction.ts) takes its connections and gives them back by the same rules.
import type pg from 'pg';
import { failure, LIBRARY_SETTING, unavailable } from './connect-failure.js';
import { isConnectionError, QueryTimeoutError } from './connection.js';
import { loginOf } from './connection-url.js';
import { permissionDenied } from './permissions.js';
import { pin, pinFor, pinnedReason, runPinned, type StatementSpec } from './pinned.js';
import { fallBackToUnnamed, statementName } from './prepared.js';
import { readOnlyRefusal } from './read-only.js';
import { isServerCancel, isStatementTimeout, sendOpening } from './role-timeout.js';

/** Waiting longer than this for a pooled connection is a hang, even with a short statement timeout: opening one can take a while on a loaded host. */
export const CHECKOUT_MIN_MS = 5_000;

/** How long a checkout may wait, given the statement timeout of the work it is for. */
export function checkoutTimeout(statementTimeoutMs: number): number {
  return Math.max(statementTimeoutMs, CHECKOUT_MIN_MS);
}

/** A connection from `pool`, waiting at most `timeoutMs`; a DatabaseUnavailableError otherwise. */
export async function checkout(pool: pg.Pool, timeoutMs: number, where: string): Promise<pg.PoolClient> {
  // every connection busy: a timeout is a wait for one of them, not a server that did not answer
  const busy = pool.totalCount >= (pool.options.max ?? 10) && pool.idleCount === 0;
  const pending = pool.connect();
  let timer: NodeJS.Timeout | undefined;
  let timedOut = false;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      timedOut = true;
      reject(new Error('timeout exceeded when trying to connect'));
    }, timeoutMs);
  });
  try {
    return await Promise.race([pending, timeout]);
  } catch (error) {
    // a connection that arrives after we gave up goes straight back
    pending.then((late) => late.release()).catch(() => undefined);
    const login = loginOf(pool.options);
    if (timedOut && !busy) throw failure('connect-timeout', { where, cause: error, login, timeoutMs, setting: LIBRARY_SETTING });
    throw unavailable(where, error, { login, connectTimeoutMs: pool.options.connectionTimeoutMillis });
  } finally {
    clearTimeout(timer);
  }
}

/** pg's client-side read timeout fired: the statement may still be running on the server. */
export function isReadTimeout(error: unknown): boolean {
  return error instanceof Error && error.message === 'Query read timeout';
}

/** The session's state is unknown after this error: the connection must not be reused. */
export function breaksSession(error: unknown): boolean {
  return isReadTimeout(error) || isConnectionError(error);
}

/**
 * Gives a connection back to its pool, or destroys it when `broken` is set or the session is
 * still inside a transaction (a reused session must start clean).
 */
export function giveBack(client: pg.PoolClient, broken: Error | undefined): void {
  const destroy = broken ?? (client.getTransactionStatus() === 'I' ? undefined : new Error('session left inside a transaction'));
  client.release(destroy);
}

/** The typed error for a failed statement: a timeout, an unreachable or read-only server, a missing grant, or the error itself. */
function typed(error: unknown, timeoutMs: number, where: string, role: string): unknown {
  if (isReadTimeout(error) || isStatementTimeout(error)) return new QueryTimeoutError(timeoutMs, { cause: error });
  if (isConnectionError(error)) return unavailable(where, error);
  return readOnlyRefusal(error, where) ?? permissionDenied(error, role) ?? error;
}

export interface QueryOptions {
  /** This statement's timeout in ms, instead of the handle's. */
  timeoutMs?: number;
}

export interface DbHandle {
  readonly pool: pg.Pool;
  /** host:port/database, for messages. */
  readonly where: string;
  /** Every statement's timeout, in ms. */
  readonly timeoutMs: number;
  /** One statement on a pooled connection; QueryTimeoutError when it takes longer than the timeout. */
  query<R extends pg.QueryResultRow>(text: string, values?: unknown[], options?: QueryOptions): Promise<pg.QueryResult<R>>;
  /**
   * BEGIN, `fn`, COMMIT (ROLLBACK on any error). Each of `fn`'s statements is bounded by the
   * server's statement_timeout (set for this transaction only, with the BEGIN: one round trip),
   * the opening and COMMIT by a read timeout.
   */
  transaction<T>(fn: (client: pg.PoolClient) => Promise<T>, options?: QueryOptions): Promise<T>;
}

export interface HandleSettings {
  where: string;
  timeoutMs: number;
}

/** A handle on `pool` whose statements and checkouts all have timeouts. */
export function dbHandle(pool: pg.Pool, settings: HandleSettings): DbHandle {
  return {
    pool,
    where: settings.where,
    timeoutMs: settings.timeoutMs,
    query: (text, values = [], options = {}) => timedQuery(pool, text, values, options.timeoutMs ?? settings.timeoutMs, settings.where),
    transaction: (fn, options = {}) => transaction(pool, options.timeoutMs ?? settings.timeoutMs, settings.where, fn),
  };
}

/**
 * One statement on a connection the caller holds (and must discard after a timeout: a handle
 * cannot close what it does not own).
 */
export async function clientQuery<R extends pg.QueryResultRow>(
  client: pg.ClientBase,
  text: string,
  values: unknown[],
  timeoutMs: number,
  where: string,
): Promise<pg.QueryResult<R>> {
  try {
    return await client.query<R>({ text, values, query_timeout: timeoutMs } as pg.QueryConfig);
  } catch (error) {
    throw typed(error, timeoutMs, where, (client as { user?: string }).user ?? 'this role');
  }
}

const MAX_TERMINATED_RETRIES = 5;

export interface StatementOptions {
  /** 'array': each row as an array of its columns (no object per row: a tick's claim parses thousands). */
  rowMode?: 'array';
  /** A named statement, parsed once per connection (prepared.ts): for the hottest statements. */
  prepared?: boolean;
}

/** One statement with a timeout on a pooled connection, retried on a connection the server had already terminated. */
export async function timedQuery<R extends pg.QueryResultRow>(
  pool: pg.Pool,
  text: string,
  values: unknown[],
  timeoutMs: number,
  where: string,
  options: StatementOptions = {},
): Promise<pg.QueryResult<R>> {
  for (let attempt = 1; ; attempt++) {
    const name = options.prepared ? statementName(pool, text) : undefined;
    try {
      return await queryOnce<R>(pool, { text, values, timeoutMs, where, rowMode: options.rowMode, name });
    } catch (error) {
      // a named statement that did not match the session (a transaction pooler) never ran
      if (name !== undefined && fallBackToUnnamed(pool, error)) continue;
      // A pooled connection whose backend was terminated (server restart, failover,
      // pg_terminate_backend) fails with 57P01/57P02 before or while running the statement;
      // either way the server rolled it back, so retrying is safe. After a restart every idle
      // connection of the pool is dead, so retry past a few of them.
      const code = ((error as { cause?: { code?: string } }).cause ?? {}).code;
      if (attempt < MAX_TERMINATED_RETRIES && (code === '57P01' || code === '57P02')) continue;
      throw error;
    }
  }
}

async function queryOnce<R extends pg.QueryResultRow>(
  pool: pg.Pool,
  { text, values, timeoutMs, where, rowMode, name }: StatementSpec & { where: string },
): Promise<pg.QueryResult<R>> {
  const client = await checkout(pool, checkoutTimeout(timeoutMs), where);
  const onError = () => undefined; // errors while checked out surface through the query
  client.on('error', onError);
  let broken: Error | undefined;
  const statement = { text, values, timeoutMs, rowMode, name };
  try {
    if (pinnedReason(pool)) return await runPinned<R>(client, statement, breaksSession);
    try {
      return await client.query<R>({ text, values, query_timeout: timeoutMs, rowMode, name } as pg.QueryConfig);
    } catch (error) {
      // the session does not suit the protocol after all (its settings changed since the start,
      // or the pool was never checked); the statement was rolled back: again, pinned
      const reason = pinFor(error);
      if (reason) pin(pool, reason);
      // a cancel that does not say why (role-timeout.ts: the role's timeout may read "user
      // request") runs this statement once more, pinned, without pinning the pool for it
      else if (!isServerCancel(error)) throw error;
      return await runPinned<R>(client, statement, breaksSession);
    }
  } catch (error) {
    if (breaksSession(error)) broken = error as Error;
    throw typed(error, timeoutMs, where, client.user ?? 'this role');
  } finally {
    client.off('error', onError);
    giveBack(client, broken);
  }
}

// The opening and COMMIT have a client-side read timeout; fn's statements the server's
// statement_timeout (a statement waiting on a lock is cancelled, the session stays usable), set
// in the opening, SET first (role-timeout.ts): none of fn's statements runs under the role's.
async function transaction<T>(pool: pg.Pool, timeoutMs: number, where: string, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await checkout(pool, checkoutTimeout(timeoutMs), where);
  let connectionError: Error | undefined;
  const onError = (error: Error) => {
    connectionError = error;
  };
  client.on('error', onError);
  let broken: Error | undefined;
  const control = (text: string) => client.query({ text, query_timeout: timeoutMs } as pg.QueryConfig);
  try {
    await sendOpening(client, `set local statement_timeout = ${Math.max(1, Math.round(timeoutMs))}; begin`, timeoutMs);
    const value = await fn(client);
    await control('commit');
    return value;
  } catch (error) {
    broken = connectionError ?? (breaksSession(error) ? (error as Error) : undefined);
    if (!broken) {
      await control('rollback').catch((rollbackError: unknown) => {
        broken = rollbackError as Error;
      });
    }
    // only timeouts are translated: fn's own errors reach the caller as they were
    if (isReadTimeout(error) || isStatementTimeout(error)) throw new QueryTimeoutError(timeoutMs, { cause: error });
    throw error;
  } finally {
    client.off('error', onError);
    giveBack(client, broken ?? connectionError);
  }
}

/** What the read models need: one statement at a time. A DbHandle is one. */
export interface Queryable {
  query<R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<pg.QueryResult<R>>;
}

/** A pool (through a handle) or a connection the caller holds, with `timeoutMs` on every statement. */
export function queryable(db: pg.Pool | pg.ClientBase, timeoutMs: number, where = 'the database'): Queryable {
  if ('idleCount' in db && 'totalCount' in db) return dbHandle(db, { where, timeoutMs });
  return { query: (text, values = []) => clientQuery(db, text, values, timeoutMs, where) };
}
