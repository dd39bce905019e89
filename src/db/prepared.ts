// Named (server-side prepared) statements for the library's hottest statements: acquire, release
// and renewal. Parsing and planning `select * from leasehold.acquire(…)` was about a third of a
// declined acquire's server time; a named statement is parsed once per connection and costs no
// round trip more (pg sends Parse with the first Bind).
//
// Through a transaction pooler (PgBouncer before 1.21, or without max_prepared_statements) the
// next statement may reach a server session that never saw the Parse (26000) or one that has the
// name from another client (42P05). Both fail before the statement runs: it runs again unnamed,
// and the pool uses unnamed statements from then on. The name is a digest of the text, so a
// session that has it from another client (or another version of leasehold) has this very text.
import { createHash } from 'node:crypto';
import type pg from 'pg';

const unnamedOnly = new WeakSet<pg.Pool>();
const names = new Map<string, string>();

/** The statement name to send `text` under on `pool`, or undefined when the pool runs it unnamed. */
export function statementName(pool: pg.Pool, text: string): string | undefined {
  if (unnamedOnly.has(pool)) return undefined;
  let name = names.get(text);
  if (name === undefined) {
    name = `leasehold_${createHash('sha256').update(text).digest('hex').slice(0, 24)}`;
    names.set(text, name);
  }
  return name;
}

/** The error says a named statement did not match this session (it did not run): true, and the pool runs its statements unnamed from now on. */
export function fallBackToUnnamed(pool: pg.Pool, error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (code !== '26000' && code !== '42P05') return false;
  unnamedOnly.add(pool);
  return true;
}

/** Whether `pool` runs its statements unnamed (it met a session without them). */
export function runsUnnamed(pool: pg.Pool): boolean {
  return unnamedOnly.has(pool);
}
