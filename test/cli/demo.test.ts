// The demo (src/demo): run once, in its shortened form, as a real process on the suite's
// server. It must tell the whole story (runs, a skip naming the holder, a buffered slot
// started, a kill with an on-time takeover, a freeze with a refused stale write), exit 0 on
// its own (no process.exit) and leave no worker process or database behind.
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { afterAll, expect, inject, it } from 'vitest';

const MAIN = fileURLToPath(new URL('../../src/cli/demo-main.ts', import.meta.url));
const TSX = fileURLToPath(new URL('../../node_modules/tsx/dist/esm/index.mjs', import.meta.url));

let child: ReturnType<typeof spawn> | undefined;
afterAll(() => {
  if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
});

it('tells the scheduler story and exits 0, leaving nothing behind', { timeout: 120_000 }, async () => {
  const serverUrl = inject('serverUrl');
  const demo = spawn(process.execPath, ['--import', TSX, MAIN, '--quick'], {
    env: { ...process.env, DATABASE_URL: serverUrl, NO_COLOR: '1' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  child = demo;
  let stdout = '';
  let stderr = '';
  demo.stdout?.on('data', (d: Buffer) => (stdout += d.toString()));
  demo.stderr?.on('data', (d: Buffer) => (stderr += d.toString()));
  const code = await new Promise<number | null>((resolve) => demo.on('close', (exitCode) => resolve(exitCode)));
  const output = `${stdout}\n${stderr}`;

  expect(code, output).toBe(0);
  expect(stdout).toMatch(/worker-\d +RUN +nightly-report +slot \d\d:\d\d:\d\d +fence \d+/);
  expect(stdout).toMatch(/SKIP +nightly-report +slot \S+ +held by worker-\d \(fence \d+, slot \d\d:\d\d:\d\d\) for \d/);
  expect(stdout).toMatch(/BUFFER +sync-invoices/);
  expect(stdout).toMatch(/buffered slot \d\d:\d\d:\d\d started \d+ ms after worker-\d released slot/);
  expect(stdout).toMatch(/KILL +worker-\d \(SIGKILL/);
  expect(stdout).toMatch(/TAKEOVER worker-\d ran slot \S+ on time \(\+\d+ ms\), \d+ ms after worker-\d was killed, worker-\d's run recorded as lost/);
  expect(stdout).toMatch(/START worker-4 .* replaces worker-\d/);
  expect(stdout).toMatch(/STOP +worker-\d \(SIGSTOP/);
  expect(stdout).toMatch(/CONT +worker-\d \(SIGCONT\)/);
  expect(stdout).toMatch(/stale write from worker-\d \(fence \d+\) refused: LeaseLostError/);
  expect(stdout).toMatch(/holds_lease\(name, token, \d+\) wrote 0 rows/);
  expect(stdout).toContain('leasehold.run_history');
  expect(stdout).toContain('OK: the story happened as it should');
  expect(stdout).not.toContain('FAILED');

  // Its database (leasehold_demo_<pid>_…) is gone, and so are its workers.
  const admin = new pg.Client({ connectionString: serverUrl });
  await admin.connect();
  try {
    const { rows } = await admin.query<{ n: number }>("select count(*)::int as n from pg_database where datname like $1", [
      `leasehold_demo_${demo.pid}_%`,
    ]);
    expect(rows[0]?.n).toBe(0);
  } finally {
    await admin.end();
  }
  const pids = [...stdout.matchAll(/ready \(pid (\d+)\)/g)].map((m) => Number(m[1]));
  expect(pids.length).toBeGreaterThanOrEqual(4);
  for (const pid of pids) expect(alive(pid), `worker pid ${pid} is still running`).toBe(false);
});

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
