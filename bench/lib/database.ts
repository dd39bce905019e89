// The benchmark's database: DATABASE_URL's server, or an embedded one with fsync on (so
// commits cost what they cost in production), a fresh database on it with the leasehold
// schema installed, and the classic pattern's table. close() drops and stops everything.
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.js';
import { createLeasehold } from '../../src/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { createTestDatabase } from '../../src/testing.js';
import { CREATE_CLASSIC_TABLE } from './classic.js';
import { Session } from './session.js';

export type ServerKind = 'embedded' | 'DATABASE_URL';

export interface BenchDatabase {
  /** URL of the fresh benchmark database. */
  url: string;
  serverKind: ServerKind;
  close(): Promise<void>;
}

export async function openBenchDatabase(databaseUrl: string | undefined): Promise<BenchDatabase> {
  let server: EmbeddedPostgres | undefined;
  let drop: (() => Promise<void>) | undefined;
  // One close for every caller (a signal handler and the run's own cleanup may both call it):
  // each waits until the database is dropped and the server stopped, not only the first.
  let closing: Promise<void> | undefined;
  const close = (): Promise<void> =>
    (closing ??= (async () => {
      const dropping = drop;
      drop = undefined;
      if (dropping) await dropping().catch((error: unknown) => process.stderr.write(`could not drop the bench database: ${String(error)}\n`));
      const stopping = server;
      server = undefined;
      if (stopping) await stopping.stop().catch((error: unknown) => process.stderr.write(`could not stop PostgreSQL: ${String(error)}\n`));
    })());
  try {
    if (!databaseUrl) server = await startEmbeddedPostgres({ settings: { fsync: 'on', synchronous_commit: 'on' } });
    const serverUrl = databaseUrl ?? (server as EmbeddedPostgres).connectionString;
    const database = await createTestDatabase(serverUrl, 'leasehold_bench');
    drop = () => database.drop();

    // Install the schema the way an application does: createLeasehold migrates on connect.
    const leasehold = await createLeasehold({ connectionString: database.url, logger: silentLogger() });
    await leasehold.close();

    const setup = await Session.open(database.url, 'bench-setup');
    try {
      await setup.query(CREATE_CLASSIC_TABLE);
    } finally {
      await setup.close();
    }
    return { url: database.url, serverKind: server ? 'embedded' : 'DATABASE_URL', close };
  } catch (error) {
    await close();
    throw error;
  }
}
