// The demo's ways out besides the end of the story: stdout closed under it (`leasehold demo |
// head`), and --keep, which leaves the database for exploring until a signal. Either way its
// database and workers go.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, expect, inject, it } from 'vitest';

const MAIN = fileURLToPath(new URL('../../src/cli/demo-main.ts', import.meta.url));
const TSX = fileURLToPath(new URL('../../node_modules/tsx/dist/esm/index.mjs', import.meta.url));

const children: Array<ReturnType<typeof spawn>> = [];
afterAll(() => {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

function startDemo(args: string[]) {
  const demo = spawn(process.execPath, ['--import', TSX, MAIN, '--quick', ...args], {
    env: { ...process.env, DATABASE_URL: inject('serverUrl'), NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  children.push(demo);
  let stderr = '';
  demo.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const closed = new Promise<number | null>((resolve) => demo.on('close', (code) => resolve(code)));
  return { demo, closed, stderr: () => stderr };
}

async function demoDatabases(pid: number | undefined): Promise<number> {
  const admin = new pg.Client({ connectionString: inject('serverUrl') });
  await admin.connect();
  try {
    const { rows } = await admin.query<{ n: number }>('select count(*)::int as n from pg_database where datname like $1', [`leasehold_demo_${pid}_%`]);
    return rows[0]?.n ?? -1;
  } finally {
    await admin.end();
  }
}

it('cleans up when its stdout pipe is closed', { timeout: 90_000 }, async () => {
  const { demo, closed, stderr } = startDemo([]);
  // Read until the database exists, then close the pipe: the next write fails with EPIPE.
  await new Promise<void>((resolve) => {
    let seen = '';
    demo.stdout.on('data', (d: Buffer) => {
      seen += d.toString();
      if (seen.includes('starting 3 worker processes')) resolve();
    });
  });
  expect(await demoDatabases(demo.pid)).toBe(1);
  demo.stdout.destroy();
  const code = await closed;
  expect(code, stderr()).toBe(141);
  expect(stderr()).not.toMatch(/EPIPE|Unhandled/);
  expect(await demoDatabases(demo.pid)).toBe(0);
});

it('--keep leaves the database for exploring until SIGINT, then removes it', { timeout: 150_000 }, async () => {
  const { demo, closed, stderr } = startDemo(['--keep']);
  let stdout = '';
  const url = await new Promise<string>((resolve, reject) => {
    demo.stdout.on('data', (d: Buffer) => {
      stdout += d.toString();
      const kept = /Kept for exploring: (\S+)/.exec(stdout);
      if (kept && stdout.includes('Ctrl-C')) resolve(kept[1]!);
    });
    void closed.then(() => reject(new Error(`demo ended without keeping its database:\n${stdout}\n${stderr()}`)));
  });
  // Still there a while later, with the story's history in it.
  await new Promise((resolve) => setTimeout(resolve, 1_000));
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const { rows } = await client.query<{ n: number }>('select count(*)::int as n from leasehold.run_history');
  await client.end();
  expect(rows[0]?.n).toBeGreaterThan(0);
  expect(demo.exitCode).toBeNull();
  demo.kill('SIGINT');
  expect(await closed, `${stdout}\n${stderr()}`).toBe(0);
  expect(stdout).toContain('OK: the story happened as it should');
  expect(await demoDatabases(demo.pid)).toBe(0);
});
