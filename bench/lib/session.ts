// One benchmark connection: a dedicated pg.Client (its own PostgreSQL session, not a pool)
// that counts the statements it sends. Each statement is one network round trip: pg sends a
// parameterised query as Parse/Bind/Describe/Execute/Sync in one flush.
import pg from 'pg';

export class Session {
  /** Statements sent on this connection so far. */
  roundTrips = 0;
  /** Set when the connection reported an asynchronous error (it is then unusable). */
  failure: Error | undefined;

  private constructor(readonly client: pg.Client) {}

  /** The backend serving this connection (BackendKeyData), for its CPU time in /proc. */
  get serverPid(): number | undefined {
    return (this.client as unknown as { processID?: number }).processID ?? undefined;
  }

  static async open(connectionString: string, applicationName: string): Promise<Session> {
    const client = new pg.Client({ connectionString, application_name: applicationName });
    const session = new Session(client);
    client.on('error', (error: Error) => {
      session.failure = error;
    });
    try {
      await client.connect();
    } catch (error) {
      await client.end().catch(() => undefined);
      throw error;
    }
    return session;
  }

  /** Sends one statement (one round trip) and returns its rows; `name`: a named statement, parsed once per connection. */
  async query<R extends pg.QueryResultRow>(text: string, values?: unknown[], name?: string): Promise<R[]> {
    this.roundTrips++;
    const result = await this.client.query<R>(name === undefined ? { text, values } : { name, text, values });
    return result.rows;
  }

  /** Like query(), returning the affected row count. */
  async execute(text: string, values?: unknown[]): Promise<number> {
    this.roundTrips++;
    const result = await this.client.query(text, values);
    return result.rowCount ?? 0;
  }

  async close(): Promise<void> {
    await this.client.end().catch(() => undefined);
  }
}

/** Opens `count` independent connections; on failure closes the ones already open. */
export async function openSessions(connectionString: string, count: number, applicationName: string): Promise<Session[]> {
  const settled = await Promise.allSettled(
    Array.from({ length: count }, (_, index) => Session.open(connectionString, `${applicationName}-${index}`)),
  );
  const sessions = settled.flatMap((outcome) => (outcome.status === 'fulfilled' ? [outcome.value] : []));
  const failed = settled.find((outcome): outcome is PromiseRejectedResult => outcome.status === 'rejected');
  if (failed) {
    await closeSessions(sessions);
    throw failed.reason;
  }
  return sessions;
}

export async function closeSessions(sessions: readonly Session[]): Promise<void> {
  await Promise.allSettled(sessions.map((session) => session.close()));
}
