// The client handed to code inside a fenced transaction. It is the pooled connection with
// three guards: statements that would end or restart the transaction (BEGIN, COMMIT, ROLLBACK,
// END, ABORT, PREPARE TRANSACTION ...) are refused before they reach the server, because every
// statement after them would run outside the fence while the call still reported success;
// every statement gets a read timeout unless it brings its own; and release() is refused,
// since the connection goes back to the pool only when the fenced transaction is over.
import type pg from 'pg';

export interface GuardState {
  /** Set when a statement was refused or the transaction ended under the guard's feet. */
  violation: string | undefined;
  /** Set when a statement timed out or its connection broke: the session's state is unknown. */
  broken: Error | undefined;
}

interface QueryLike {
  text?: string;
  values?: unknown[];
  query_timeout?: number;
  submit?: unknown;
}

// `ROLLBACK TO [SAVEPOINT]` and `RELEASE SAVEPOINT` stay inside the transaction, so they pass.
const CONTROL =
  /(?:^|;)\s*(begin|start\s+transaction|commit|end|abort|rollback(?!\s+(?:(?:work|transaction)\s+)?to\b)|prepare\s+transaction|set\s+(?:session\s+)?characteristics\s+as\s+transaction)\b/i;

/** The first transaction-control statement in `text`, ignoring quoted text and comments. */
export function transactionControlIn(text: string): string | undefined {
  const bare = text
    .replace(/\$([A-Za-z_][A-Za-z0-9_]*)?\$[\s\S]*?\$\1\$/g, ' ')
    .replace(/'(?:[^']|'')*'/g, ' ')
    .replace(/"(?:[^"]|"")*"/g, ' ')
    .replace(/--[^\n]*/g, ' ')
    .replace(/\/\*[\s\S]*?\*\//g, ' ');
  const match = CONTROL.exec(bare);
  return match?.[1]?.replace(/\s+/g, ' ').toUpperCase();
}

/**
 * Wraps `client` for user code. `refuse` builds the error for a refused statement;
 * `isBroken` tells which failures leave the session in an unknown state.
 */
export function guardClient(
  client: pg.PoolClient,
  state: GuardState,
  statementTimeoutMs: number,
  refuse: (what: string) => Error,
  isBroken: (error: unknown) => boolean,
): pg.PoolClient {
  const refusal = (text: string | undefined): Error | undefined => {
    if (state.violation) return refuse(state.violation);
    if (state.broken) return refuse('a statement after a timeout or a broken connection');
    const control = text === undefined ? undefined : transactionControlIn(text);
    if (control) {
      state.violation = control;
      return refuse(control);
    }
    return undefined;
  };
  const afterStatement = () => {
    // 'I' (idle) means no transaction is open any more: something ended ours.
    if (client.getTransactionStatus() === 'I' && !state.violation) state.violation = 'a statement that ended the transaction';
  };
  const query = (first: unknown, second?: unknown, third?: unknown): unknown => {
    const config = first as QueryLike | undefined;
    if (config && typeof config === 'object' && typeof config.submit === 'function') {
      // cursors and streams manage their own reads; only the statement text is checked
      const refused = refusal(config.text);
      if (refused) throw refused;
      return client.query(first as pg.Submittable);
    }
    const text = typeof first === 'string' ? first : config?.text;
    const callback = [second, third].find((arg): arg is (error: Error | null, result?: unknown) => void => typeof arg === 'function');
    const refused = refusal(text);
    if (refused) {
      if (callback) {
        process.nextTick(() => callback(refused));
        return undefined;
      }
      return Promise.reject(refused);
    }
    const values = Array.isArray(second) ? (second as unknown[]) : undefined;
    const full: QueryLike = typeof first === 'string' ? { text: first } : { ...config };
    if (values) full.values = values;
    if (full.query_timeout === undefined) full.query_timeout = statementTimeoutMs;
    const promise = client.query(full as pg.QueryConfig).then(
      (result) => {
        afterStatement();
        return result;
      },
      (error: unknown) => {
        if (isBroken(error)) state.broken = error as Error;
        else afterStatement();
        throw error;
      },
    );
    if (!callback) return promise;
    promise.then(
      (result) => callback(null, result),
      (error: Error) => callback(error),
    );
    return undefined;
  };
  const release = () => {
    throw refuse('release() of the connection');
  };
  return new Proxy(client, {
    get(target, property) {
      if (property === 'query') return query;
      if (property === 'release') return release;
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? (value as (...args: unknown[]) => unknown).bind(target) : value;
    },
  });
}
