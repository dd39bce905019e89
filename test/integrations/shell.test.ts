// examples/shell/with-lease.sh (docs/shell.md): takes the lease, runs a command with
// heartbeats, releases; skips with exit 75 while the TypeScript client holds the lease.
import { execFile, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { LeaseLostError } from '../../src/index.js';
import { client, freshDatabase, rawPool, waitFor } from '../support/db.js';

const WITH_LEASE = fileURLToPath(new URL('../../examples/shell/with-lease.sh', import.meta.url));
const NIGHTLY_REPORT = fileURLToPath(new URL('../../examples/shell/nightly-report.sh', import.meta.url));
const NIGHTLY_REPORT_PSQL = fileURLToPath(new URL('../../examples/shell/nightly-report.psql', import.meta.url));
const DOC = fileURLToPath(new URL('../../docs/shell.md', import.meta.url));

let url: string;

interface Outcome {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a script with bash (as cron would run it) against this file's database. */
function sh(args: string[], env: Record<string, string> = {}): Promise<Outcome> {
  return new Promise((resolve) => {
    execFile('bash', args, { env: { ...process.env, DATABASE_URL: url, ...env }, timeout: 30_000 }, (error, stdout, stderr) => {
      const code = error ? (typeof error.code === 'number' ? error.code : null) : 0;
      resolve({ code, stdout, stderr });
    });
  });
}

async function leaseRow(name: string): Promise<{ state: string; holder: string | null; fence: string } | undefined> {
  const { rows } = await rawPool(url, 2).query<{ state: string; holder: string | null; fence: string }>(
    'select state, holder, fence from leasehold.lease_status where name = $1',
    [name],
  );
  return rows[0];
}

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  await rawPool(url, 1).query('create table reports (day date, body text, fence bigint)');
});

describe('docs/shell.md', () => {
  it('shows the example scripts verbatim, so the documented code is the tested code', () => {
    const doc = readFileSync(DOC, 'utf8');
    const blocks = [...doc.matchAll(/```(?:sql|bash)\n([\s\S]*?)```/g)].map((m) => m[1]);
    expect(blocks).toContain(readFileSync(NIGHTLY_REPORT_PSQL, 'utf8'));
    expect(blocks).toContain(readFileSync(NIGHTLY_REPORT, 'utf8'));
  });
});

describe('nightly-report.psql', () => {
  const psql = () =>
    new Promise<Outcome>((resolve) => {
      execFile('psql', [url, '-X', '-q', '-At', '-v', 'ON_ERROR_STOP=1', '-f', NIGHTLY_REPORT_PSQL], (error, stdout, stderr) => {
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : null) : 0, stdout, stderr });
      });
    });

  it('acquires, renews, writes fenced and releases; skips naming the TypeScript holder', async () => {
    const pool = rawPool(url, 1);
    expect(await psql()).toEqual({ code: 0, stdout: 't|renewed\n1\nt\n', stderr: '' }); // renew row, assert_lease's fence, release
    const ts = await client(url, { holder: 'node-report' });
    const held = await ts.acquire('nightly-report', { ttl: '30s' });
    if (!held.acquired) throw new Error('expected to acquire');
    expect(await psql()).toEqual({ code: 0, stdout: 'skipped (held): held by node-report\n', stderr: '' });
    await held.lease.release();
    const { rows } = await pool.query(`select body, fence from reports where body = 'built by psql'`);
    expect(rows).toEqual([{ body: 'built by psql', fence: '1' }]);
    await pool.query('truncate reports');
  });
});

// Timing-sensitive (each renewal forks psql and must land within the TTL): one at a time, with
// TTLs long enough for a loaded machine.
describe('with-lease.sh heartbeats', () => {
  it('renews the lease while a command outlives its TTL, so nobody else gets it', async () => {
    const ts = await client(url, { holder: 'challenger' });
    const running = sh([WITH_LEASE, 'long-job', '4', 'sleep', '5'], { HOLDER: 'long-runner' });
    let finished = false;
    void running.then(() => (finished = true));
    await waitFor(async () => (await leaseRow('long-job'))?.state === 'held', 10_000);
    let heldMs = 0; // how long the script's one acquisition has been held, by the database clock
    while (!finished) {
      const attempt = await ts.acquire('long-job', { ttl: '30s' });
      if (attempt.acquired) {
        await attempt.lease.release(); // free only once the script released it (or lost it: then it exits 70)
        break;
      }
      expect(attempt).toMatchObject({ holder: 'long-runner', fence: 1 });
      heldMs = Math.max(heldMs, attempt.databaseTime.getTime() - (attempt.since?.getTime() ?? Infinity));
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
    expect(await running).toMatchObject({ code: 0 }); // every renewal was confirmed in time
    expect(heldMs).toBeGreaterThan(4_000); // one acquisition outlived its 4 s TTL: renewed
    expect(await leaseRow('long-job')).toMatchObject({ state: 'free' });
  });

  it('stops the command with SIGTERM and exits 70 when the lease is lost while it runs', async () => {
    const ts = await client(url, { holder: 'operator' });
    const started = Date.now();
    const running = sh([WITH_LEASE, 'lost-job', '3', 'sleep', '20']);
    await waitFor(async () => (await leaseRow('lost-job'))?.state === 'held', 5_000);
    expect(await ts.forceRelease('lost-job')).toMatchObject({ released: true, fence: 2 });
    const outcome = await running;
    expect(outcome.code).toBe(70);
    // 'released' is the database's answer; on a starved machine the renewal may not even get one in time
    expect(outcome.stderr).toMatch(/lost lease "lost-job" \(fence 1\): (released|renewal not confirmed in time); stopping the command/);
    expect(Date.now() - started).toBeLessThan(10_000);
    // The script's own release came too late to change anything.
    expect(await leaseRow('lost-job')).toMatchObject({ state: 'free', fence: '2' });
  });
});

// Each test uses its own lease names, so they run side by side.
describe.concurrent('with-lease.sh', () => {
  it('takes the lease, runs the command with the lease in its environment, releases it, exits with its status', async () => {
    const ran = await sh([WITH_LEASE, 'env-job', '30', 'sh', '-c', 'echo "$LEASEHOLD_NAME $LEASEHOLD_FENCE ${#LEASEHOLD_TOKEN}"; exit 3'], {
      HOLDER: 'cron@host-a',
    });
    expect(ran).toMatchObject({ code: 3, stdout: 'env-job 1 36\n' });
    expect(await leaseRow('env-job')).toEqual({ state: 'free', holder: 'cron@host-a', fence: '1' });
    expect((await sh([WITH_LEASE, 'env-job', '30', 'true'])).code).toBe(0);
    expect(await leaseRow('env-job')).toMatchObject({ state: 'free', fence: '2' });
  });

  it('passes its stdin on to the command', async () => {
    const child = spawn('bash', [WITH_LEASE, 'stdin-job', '30', 'cat'], { env: { ...process.env, DATABASE_URL: url } });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stdin.end('from stdin\n');
    const code = await new Promise<number | null>((resolve) => child.on('exit', resolve));
    expect({ code, out }).toEqual({ code: 0, out: 'from stdin\n' });
  });

  it('skips with exit 75 while the TypeScript client holds the lease, naming the holder; the command does not run', async () => {
    const ts = await client(url, { holder: 'node-service' });
    const held = await ts.acquire('shared', { ttl: '30s' });
    if (!held.acquired) throw new Error('expected to acquire');
    const skipped = await sh([WITH_LEASE, 'shared', '30', 'echo', 'ran']);
    expect(skipped.code).toBe(75);
    expect(skipped.stdout).toBe('');
    expect(skipped.stderr).toMatch(/skipped "shared" \(held\): held by node-service \(fence 1\) since /);
    await held.lease.release();
    expect(await sh([WITH_LEASE, 'shared', '30', 'echo', 'ran'])).toMatchObject({ code: 0, stdout: 'ran\n' });
    // ... and the TypeScript client is told who took it in between
    expect(await ts.acquire('shared', { ttl: '30s' })).toMatchObject({ acquired: true });
  });

  it('fences the job: nightly-report.sh commits under its lease, and the same write with a stale lease is refused', async () => {
    const pool = rawPool(url, 2);
    const first = await sh([WITH_LEASE, 'report-job', '30', 'bash', '-c', 'bash "$0" && env | grep ^LEASEHOLD_', NIGHTLY_REPORT]);
    expect(first.code).toBe(0);
    const env = Object.fromEntries(
      first.stdout
        .trim()
        .split('\n')
        .map((line) => line.split('=') as [string, string]),
    );
    expect(env.LEASEHOLD_FENCE).toBe('1');
    const ts = await client(url, { holder: 'node-report' });
    const taken = await ts.acquire('report-job', { ttl: '30s' });
    expect(taken).toMatchObject({ acquired: true });
    const stale = await sh([NIGHTLY_REPORT], env);
    expect(stale.code).toBe(3); // psql: the script failed
    expect(stale.stderr).toMatch(/lease "report-job" \(fence 1\) is no longer held[\s\S]*fence is now 2, held by node-report/);
    expect((await pool.query('select fence from reports order by fence')).rows).toEqual([{ fence: '1' }]);
  });

  it('passes SIGTERM on to the command and still releases the lease', async () => {
    const child = spawn('bash', [WITH_LEASE, 'term-job', '30', 'sleep', '20'], { env: { ...process.env, DATABASE_URL: url } });
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    await waitFor(async () => (await leaseRow('term-job'))?.state === 'held', 5_000);
    child.kill('SIGTERM');
    expect(await exited).toBe(143); // the command's status: killed by SIGTERM
    expect(await leaseRow('term-job')).toMatchObject({ state: 'free' });
  });

  it('exits 69 without running the command when PostgreSQL cannot be reached, and 64 on a usage error', async () => {
    const unreachable = await sh([WITH_LEASE, 'job', '30', 'echo', 'ran'], { DATABASE_URL: 'postgres://postgres@127.0.0.1:1/none', PGCONNECT_TIMEOUT: '2' });
    expect(unreachable).toMatchObject({ code: 69, stdout: '' });
    expect((await sh([WITH_LEASE, 'job', '30s', 'true'])).code).toBe(64);
    expect((await sh([WITH_LEASE, 'job'])).code).toBe(64);
  });

  it('gets LH001 for a bad name from the database, like every other client', async () => {
    const bad = await sh([WITH_LEASE, '', '30', 'true']);
    expect(bad.code).toBe(69);
    expect(bad.stderr).toMatch(/lease name must not be empty/);
  });
});

// The TypeScript side of a shell takeover: a lease the script took over is refused to the old holder.
describe('TypeScript after a shell takeover', () => {
  it("refuses the old holder's fenced transaction", async () => {
    const ts = await client(url, { holder: 'slow-node' });
    const held = await ts.acquire('handover', { ttl: '30s' });
    if (!held.acquired) throw new Error('expected to acquire');
    await rawPool(url, 1).query(`select leasehold.force_release('handover')`); // an operator frees it
    expect((await sh([WITH_LEASE, 'handover', '30', 'true'])).code).toBe(0); // fence 3
    const write = held.lease.transaction(async (c) => c.query('select 1'));
    await expect(write).rejects.toBeInstanceOf(LeaseLostError);
    await expect(write).rejects.toMatchObject({ reason: 'fence-mismatch' });
  });
});
