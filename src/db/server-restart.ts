// Telling a server that is restarting (or failing over) from one that ended a single session
// while it keeps serving others. A liveness session the server ended with one of SHUTDOWN_CODES
// may belong to a restart, after which the holder takes its leases back (tracker.ts); until the
// new session proves that, a reconnect that fails the way a restarting server fails keeps them
// suspended, and any other failure loses them.

/** SQLSTATEs with which the server ends a session: admin_shutdown (fast or immediate shutdown, or pg_terminate_backend), crash_shutdown. */
const SHUTDOWN_CODES = new Set(['57P01', '57P02']);

function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' ? code : undefined;
}

/** The error, then its causes. */
function* chain(error: unknown): Generator<unknown> {
  for (let e = error, depth = 0; e !== undefined && e !== null && depth < 5; e = (e as { cause?: unknown }).cause, depth++) yield e;
}

/** The server ended the session on purpose (a shutdown, a crash of another backend, or a terminate). */
export function endedByServer(error: unknown): boolean {
  for (const e of chain(error)) if (SHUTDOWN_CODES.has(codeOf(e) ?? '')) return true;
  return false;
}

/**
 * Whether `error` is what a client gets from a server that is shutting down, down or starting
 * up: the session ended by the server, cannot_connect_now (57P03: shutting down, starting up,
 * in recovery), a refused or reset connection. Not a timeout, not an unknown host.
 */
export function restartLike(error: unknown): boolean {
  for (const e of chain(error)) {
    const code = codeOf(e);
    if (code !== undefined && (SHUTDOWN_CODES.has(code) || code === '57P03' || code === 'ECONNREFUSED' || code === 'ECONNRESET')) return true;
    if (e instanceof Error && /^Connection terminated( unexpectedly)?$/.test(e.message)) return true;
  }
  return false;
}
