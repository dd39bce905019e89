// The public `leasehold/testing` entry: createTestDatabase() makes a database a test can use
// and drop, and refuses a prefix that is not a plain name (it goes into CREATE DATABASE as a
// quoted identifier) with an InvalidArgumentError, creating nothing.
import pg from 'pg';
import { describe, expect, inject, it } from 'vitest';
import { InvalidArgumentError } from '../../src/errors.js';
import { createTestDatabase } from '../../src/testing.js';

async function databaseNames(): Promise<string[]> {
  const admin = new pg.Client({ connectionString: inject('serverUrl') });
  await admin.connect();
  try {
    const { rows } = await admin.query<{ datname: string }>('select datname from pg_database order by datname');
    return rows.map((row) => row.datname);
  } finally {
    await admin.end();
  }
}

describe('createTestDatabase()', () => {
  it('creates a database under a prefix with a dash, usable and then dropped', async () => {
    const db = await createTestDatabase(inject('serverUrl'), 'my-app');
    const name = new URL(db.url).pathname.slice(1);
    expect(name).toMatch(/^my-app_\d+_[a-z0-9]+$/);
    const client = new pg.Client({ connectionString: db.url });
    await client.connect();
    await client.query('select 1');
    await client.end();
    await db.drop();
    expect(await databaseNames()).not.toContain(name);
  });

  it.each(['x"; drop database postgres; --', 'a"b', '', '1abc', 'a b', 'x'.repeat(41)])('refuses the prefix %j with InvalidArgumentError and creates nothing', async (prefix) => {
    const before = await databaseNames();
    const error = await createTestDatabase(inject('serverUrl'), prefix).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).argument).toBe('prefix');
    // Other test files may create databases meanwhile: look only for names under this prefix.
    if (prefix !== '') expect((await databaseNames()).filter((name) => !before.includes(name) && name.startsWith(prefix))).toEqual([]);
  });
});
