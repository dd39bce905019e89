// The embedded server helper: it leaves the host process its own exit code and signals, and
// startEmbeddedPostgres({ programs }) runs a server of the programs given (another PostgreSQL
// major installed under an npm alias) or fails with a typed error for programs that are not there.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { DatabaseUnavailableError } from '../../src/errors.js';
import { startEmbeddedPostgres } from '../../src/db/embedded.js';
import { programsOfMajor } from '../support/postgres-major.js';

const TSX = fileURLToPath(new URL('../../node_modules/tsx/dist/esm/index.mjs', import.meta.url));
const SCRIPT = fileURLToPath(new URL('../fixtures/embedded-exit-code.ts', import.meta.url));

it('keeps the process exit code (a failing test run must not exit 0)', async () => {
  const child = spawn(process.execPath, ['--import', TSX, SCRIPT], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
  expect(code, stderr).toBe(3);
});

const installed = await programsOfMajor(14).catch((error: Error) => error);

describe('startEmbeddedPostgres({ programs })', () => {
  it.skipIf(installed instanceof Error)(`runs them: PostgreSQL 14 from test/postgres-majors${installed instanceof Error ? ` (skipped: ${installed.message})` : ''}`, async () => {
    const server = await startEmbeddedPostgres({ programs: installed as { initdb: string; postgres: string } });
    try {
      const client = new pg.Client({ connectionString: server.connectionString });
      await client.connect();
      const { rows } = await client.query<{ v: string }>("select current_setting('server_version_num') as v");
      await client.end();
      expect(Math.floor(Number(rows[0]!.v) / 10_000)).toBe(14);
    } finally {
      await server.stop();
    }
  });

  it('fails with DatabaseUnavailableError when they do not exist', async () => {
    const missing = { initdb: '/nonexistent/bin/initdb', postgres: '/nonexistent/bin/postgres' };
    await expect(startEmbeddedPostgres({ programs: missing })).rejects.toBeInstanceOf(DatabaseUnavailableError);
  });
});
