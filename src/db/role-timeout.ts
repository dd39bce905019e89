// The statements that set the client's own statement_timeout run under the role's (20 ms, say):
// the timeout they replace applies to them. On a loaded server such a statement, or the first one
// of a new connection, can be cancelled by it, which PostgreSQL does not always report as a
// timeout: when the timer fires after the statement's last interrupt check and the next
// statement of the query string arms a timer of its own, the pending cancel surfaces as
// "canceling statement due to user request" (57014 either way). With a 1 ms timeout on the role,
// 12 of 14 cancels of 120,684 pinned openings read "user request" (PostgreSQL 15).
//
// So the setting is made in one simple query, the opening, whose first statement is the SET: every
// statement after it runs under the client's timeout, and arming that timer clears whatever the
// role's left pending (PostgreSQL arms a fresh timer for each statement of a query string), so
// nothing of the role's timeout reaches the statements that follow the opening. An opening it
// cancelled is sent again: nothing of the caller's ran.
import type pg from 'pg';

/** The opening is sent at most this often: cancelled three times in a row, the server is more than busy for a moment. */
const OPENING_ATTEMPTS = 3;

/** The server cancelled the statement (57014): a statement_timeout, whatever the message says, or a pg_cancel_backend(). */
export function isServerCancel(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === '57014';
}

/** The server cancelled the statement because of statement_timeout, as its message says (the session stays usable). */
export function isStatementTimeout(error: unknown): boolean {
  return isServerCancel(error) && /statement timeout/i.test(String((error as { message?: unknown }).message));
}

/**
 * Sends `opening` (one simple query, first statement a SET of statement_timeout, session or
 * local) on `client`, again while the server cancels it. A cancelled opening that had begun a
 * transaction is rolled back first.
 */
export async function sendOpening(client: pg.ClientBase, opening: string, timeoutMs: number): Promise<void> {
  const send = (text: string) => client.query({ text, query_timeout: timeoutMs } as pg.QueryConfig);
  for (let attempt = 1; ; attempt++) {
    try {
      await send(opening);
      return;
    } catch (error) {
      if (attempt >= OPENING_ATTEMPTS || !isServerCancel(error)) throw error;
      if (client.getTransactionStatus() !== 'I') await send('rollback');
    }
  }
}
