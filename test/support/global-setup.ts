// One PostgreSQL server per test run: DATABASE_URL when set, otherwise an embedded server.
// Each test file then creates its own database on it (see ./db.ts).
import type { TestProject } from 'vitest/node';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.js';

declare module 'vitest' {
  export interface ProvidedContext {
    serverUrl: string;
    serverKind: 'embedded' | 'external';
  }
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  let server: EmbeddedPostgres | undefined;
  let url = process.env.DATABASE_URL;
  if (!url) {
    server = await startEmbeddedPostgres();
    url = server.connectionString;
  }
  project.provide('serverUrl', url);
  project.provide('serverKind', server ? 'embedded' : 'external');
  process.stdout.write(`[leasehold tests] PostgreSQL: ${server ? `embedded on port ${server.port}` : 'DATABASE_URL'}\n`);
  return async () => {
    await server?.stop();
  };
}
