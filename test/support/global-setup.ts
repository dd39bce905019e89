// One PostgreSQL server per test run: DATABASE_URL when set, otherwise an embedded server (of
// LEASEHOLD_PG_MAJOR when set: ./postgres-major.ts). Each test file then creates its own
// database on it (see ./db.ts).
import pg from 'pg';
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.js';
import { requestedMajor, requestedPrograms } from './postgres-major.js';

declare module 'vitest' {
  export interface ProvidedContext {
    serverUrl: string;
    serverKind: 'embedded' | 'external';
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let server: EmbeddedPostgres | undefined;
  let url = process.env.DATABASE_URL;
  const major = requestedMajor();
  if (url && major !== undefined) throw new Error('LEASEHOLD_PG_MAJOR picks an embedded server: unset DATABASE_URL to use it');
  if (!url) {
    server = await startEmbeddedPostgres({ programs: await requestedPrograms() });
    url = server.connectionString;
  }
  const { version, number } = await serverVersion(url).catch(async (error: unknown) => {
    await server?.stop();
    throw error;
  });
  // A major asked for and not run would pass for it: refuse.
  if (major !== undefined && Math.floor(number / 10_000) !== major) {
    await server?.stop();
    throw new Error(`LEASEHOLD_PG_MAJOR=${major}, but the embedded server is PostgreSQL ${version}`);
  }
  project.provide('serverUrl', url);
  project.provide('serverKind', server ? 'embedded' : 'external');
  // npm run test:versions reads this line for its summary.
  process.stdout.write(`[leasehold tests] PostgreSQL ${version} (${server ? `embedded on port ${server.port}` : 'DATABASE_URL'})\n`);
  return async () => {
    await server?.stop();
  };
}

async function serverVersion(url: string): Promise<{ version: string; number: number }> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ version: string; number: string }>(
      "select current_setting('server_version') as version, current_setting('server_version_num') as number",
    );
    return { version: rows[0]!.version, number: Number(rows[0]!.number) };
  } finally {
    await client.end();
  }
}
