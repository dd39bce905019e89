// Waiting for a server that speaks the PostgreSQL protocol (a postgres process, a pooler) to
// pass a query, while watching that its process did not die meanwhile.
import pg from 'pg';

export interface ServerReadyOptions {
  /** What to call it in errors, e.g. 'pgbouncer on port 6432'. */
  what: string;
  /** @default 30000 */
  timeoutMs?: number;
  /** False once its process exited: no point in waiting longer. */
  alive: () => boolean;
  /** The server's output so far, for the error. */
  log?: () => string;
}

/** Resolves once `select 1` on `url` succeeds; rejects when the process exits or time runs out. */
export async function waitUntilServerReady(url: string, options: ServerReadyOptions): Promise<void> {
  const timeoutMs = options.timeoutMs ?? 30_000;
  const deadline = Date.now() + timeoutMs;
  const log = () => options.log?.() ?? '';
  for (;;) {
    if (!options.alive()) throw new Error(`${options.what} exited at start:\n${log()}`);
    const probe = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
    probe.on('error', () => undefined);
    try {
      await probe.connect();
      await probe.query('select 1');
      await probe.end();
      return;
    } catch (error) {
      await probe.end().catch(() => undefined);
      if (Date.now() > deadline) throw new Error(`${options.what} did not pass a query within ${timeoutMs / 1000} s: ${String(error)}\n${log()}`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  }
}
