// Separate processes against one database: killed, paused and clock-skewed holders,
// psql sharing leases with the TypeScript client, and a lost-update fuzz test.
import { execFile, spawn } from 'node:child_process';
import { fakeClockEnv, findLibfaketime } from '../../src/testing/faketime.js';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { client, freshDatabase, rawPool, sleep, waitFor } from '../support/db.js';
import { startFixture, type JsonLinesProcess } from '../support/processes.js';

const run = promisify(execFile);
let url: string;
const started: JsonLinesProcess[] = [];

async function holder(env: Record<string, string> = {}): Promise<JsonLinesProcess> {
  const child = await startFixture(url, env);
  started.push(child);
  return child;
}

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  const pool = rawPool(url, 1);
  await pool.query(`create table fenced_writes (name text, fence bigint, holder text, value text);
                    create table fuzz_counter (id int primary key, value int not null);
                    insert into fuzz_counter values (1, 0);
                    create table fuzz_acquisitions (worker text, fence bigint)`);
});

afterEach(async () => {
  await Promise.all(started.splice(0).map((p) => p.kill()));
});

describe('a killed holder', () => {
  it('is replaced long before its 30 s TTL (its liveness lock goes with it)', async () => {
    const victim = await holder({ HOLDER: 'victim' });
    expect(await victim.send({ cmd: 'acquire', name: 'kill-me', ttl: '30s', heartbeat: true })).toMatchObject({ acquired: true, fence: 1 });
    const heir = await client(url, { holder: 'heir' });
    expect(await heir.acquire('kill-me', { ttl: '30s' })).toMatchObject({ acquired: false, holder: 'victim' });
    const killedAt = performance.now();
    victim.signal('SIGKILL');
    const taken = await waitFor(async () => {
      const r = await heir.acquire('kill-me', { ttl: '30s' });
      return r.acquired ? r : undefined;
    }, 10_000, 2);
    const takeoverMs = performance.now() - killedAt;
    expect(taken.lease.fence).toBe(2);
    expect(takeoverMs).toBeLessThan(5_000); // observed: a few milliseconds; bench reports it precisely
  });
});

describe('a paused holder (SIGSTOP)', () => {
  it('keeps its lease until the TTL, loses it after, and on SIGCONT its signal has fired and its write is refused', async () => {
    const paused = await holder({ HOLDER: 'sleepy' });
    expect(await paused.send({ cmd: 'acquire', name: 'pause-me', ttl: 1500, heartbeat: true })).toMatchObject({ acquired: true });
    const challenger = await client(url, { holder: 'challenger' });
    paused.signal('SIGSTOP');
    // A paused process keeps its connections open, so liveness cannot tell: only the TTL frees it.
    let lastUntil = 0;
    const result = await waitFor(async () => {
      const r = await challenger.acquire('pause-me', { ttl: '30s' });
      if (!r.acquired) {
        expect(r.holder).toBe('sleepy');
        lastUntil = Math.max(lastUntil, r.until!.getTime());
        return undefined;
      }
      return r;
    }, 10_000, 25);
    expect(lastUntil).toBeGreaterThan(0);
    // the takeover happened by the database clock, not before the paused holder's expiry
    expect(result.lease.acquiredAt.getTime()).toBeGreaterThanOrEqual(lastUntil);
    await result.lease.transaction(async (c) => c.query(`insert into fenced_writes values ('pause-me', $1, 'challenger', 'fresh')`, [result.lease.fence]));

    paused.signal('SIGCONT');
    await paused.waitFor((line) => line.event === 'lost' && line.name === 'pause-me', 10_000);
    const write = await paused.send({ cmd: 'write', name: 'pause-me', value: 'stale' });
    expect(write).toMatchObject({ written: false, code: 'LEASE_LOST', signalAborted: true });
    const { rows } = await rawPool(url, 1).query(`select holder from fenced_writes where name = 'pause-me'`);
    expect(rows).toEqual([{ holder: 'challenger' }]);
  });

  it('is refused by the database when it resumes inside the window its own clock still trusts', async () => {
    // No heartbeat, and the write is attempted the moment it resumes: the fence check in the
    // database, not the local deadline, is what refuses it.
    const paused = await holder({ HOLDER: 'zombie', LIVENESS: 'off' });
    expect(await paused.send({ cmd: 'acquire', name: 'zombie', ttl: 300 })).toMatchObject({ acquired: true, fence: 1 });
    const challenger = await client(url);
    const writing = paused.send({ cmd: 'write', name: 'zombie', value: 'late', holdMs: 0 });
    paused.signal('SIGSTOP');
    await sleep(400);
    const taken = await waitFor(async () => {
      const r = await challenger.acquire('zombie', { ttl: '30s' });
      return r.acquired ? r : undefined;
    }, 5_000);
    expect(taken.lease.fence).toBe(2);
    paused.signal('SIGCONT');
    const answer = await writing;
    // Either the write had committed before the pause (then fence 1 wrote before fence 2
    // was granted, which is allowed) or it is refused now; it never lands after the takeover.
    const { rows } = await rawPool(url, 1).query(`select fence from fenced_writes where name = 'zombie'`);
    if (answer.written) expect(rows).toEqual([{ fence: '1' }]);
    else expect(rows).toEqual([]);
  });
});

describe('a holder with a skewed clock', () => {
  const libfaketime = findLibfaketime();

  // libfaketime comes from Debian's faketime package, which .ci/run installs.
  it.skipIf(!libfaketime)('gets the same expiry decisions: the database clock rules (uses libfaketime)', async () => {
    const skew = (offset: string) => fakeClockEnv(libfaketime!, offset);
    const fast = await holder({ HOLDER: 'fast', ...skew('+5m') });
    const slow = await holder({ HOLDER: 'slow', ...skew('-5m') });
    const fastNow = Number((await fast.send({ cmd: 'now' })).now);
    const slowNow = Number((await slow.send({ cmd: 'now' })).now);
    expect(fastNow - Date.now()).toBeGreaterThan(290_000); // the skew is real
    expect(Date.now() - slowNow).toBeGreaterThan(290_000);

    const acquired = await fast.send({ cmd: 'acquire', name: 'skewed', ttl: 1000 });
    expect(acquired).toMatchObject({ acquired: true, fence: 1 });
    // expiry is the database's now() + ttl, not the fast clock's
    expect(Math.abs(new Date(String(acquired.expiresAt)).getTime() - 1000 - Date.now())).toBeLessThan(2_000);
    // a clock 5 minutes ahead does not make the holder think its lease is over ...
    expect(await fast.send({ cmd: 'renew', name: 'skewed' })).toMatchObject({ renewed: true });
    // ... and a clock 5 minutes behind does not let a challenger in early or keep it out late
    expect(await slow.send({ cmd: 'acquire', name: 'skewed', ttl: 1000 })).toMatchObject({ acquired: false, reason: 'held', holder: 'fast' });
    await sleep(1_200);
    expect(await slow.send({ cmd: 'acquire', name: 'skewed', ttl: 1000 })).toMatchObject({ acquired: true, fence: 2 });
  });
});

describe('psql and the TypeScript client share one protocol', () => {
  const psql = async (sql: string) => (await run('psql', [url, '-X', '-At', '-v', 'ON_ERROR_STOP=1', '-c', sql])).stdout.trim();

  it('acquire in psql, skip in TypeScript, release in psql, acquire in TypeScript, stale psql write refused', async () => {
    const row = await psql(`select token || '|' || fence from leasehold.acquire('shared', '30 seconds', 'psql-cron')`);
    const [token, fence] = row.split('|');
    expect(fence).toBe('1');
    const ts = await client(url, { holder: 'node-service' });
    expect(await ts.acquire('shared', { ttl: '30s' })).toMatchObject({ acquired: false, reason: 'held', holder: 'psql-cron', fence: 1 });
    expect(await psql(`select leasehold.release('shared', '${token}')`)).toBe('t');
    const result = await ts.acquire('shared', { ttl: '30s' });
    if (!result.acquired) throw new Error('expected to acquire');
    expect(result.lease.fence).toBe(2);
    expect(await psql(`select state || ' ' || holder from leasehold.lease_status where name = 'shared'`)).toBe('held node-service');
    const refused = await psql(
      `begin; select leasehold.assert_lease('shared', '${token}', 1); insert into fenced_writes values ('shared', 1, 'psql', 'stale'); commit;`,
    ).catch((error: { stderr: string }) => error.stderr);
    expect(refused).toMatch(/lease "shared" \(fence 1\) is no longer held/);
    expect(await psql(`select count(*) from fenced_writes where name = 'shared'`)).toBe('0');
    expect(await psql(`select leasehold.release('shared', '${token}')`)).toBe('f'); // late release: no-op
    expect(await result.lease.renew()).toBeInstanceOf(Date);
  });
});

describe('lost-update fuzz test', () => {
  const worker = fileURLToPath(new URL('../fixtures/fuzz-worker.ts', import.meta.url));
  const tsx = fileURLToPath(new URL('../../node_modules/tsx/dist/esm/index.mjs', import.meta.url));
  const fuzz = async (count: number, env: Record<string, string>) => {
    const outputs = await Promise.all(
      Array.from({ length: count }, (_, i) =>
        new Promise<number>((resolve, reject) => {
          const child = spawn(process.execPath, ['--import', tsx, worker], {
            env: { ...process.env, DATABASE_URL: url, WORKER: `w${i}`, ...env },
            stdio: ['ignore', 'pipe', 'inherit'],
          });
          let out = '';
          child.stdout.on('data', (d: Buffer) => (out += d.toString()));
          child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out).wins as number) : reject(new Error(`fuzz worker exited ${code}`))));
        }),
      ),
    );
    return outputs.reduce((a, b) => a + b, 0);
  };

  it('loses no increment across 4 processes: the counter equals the number of acquisitions', async () => {
    const pool = rawPool(url, 1);
    await pool.query('update fuzz_counter set value = 0; truncate fuzz_acquisitions');
    const wins = await fuzz(4, { DURATION_MS: '3000' });
    const counter = (await pool.query('select value from fuzz_counter')).rows[0].value;
    const acquisitions = (await pool.query('select count(*)::int as n, count(distinct fence)::int as fences from fuzz_acquisitions')).rows[0];
    expect(wins).toBeGreaterThan(50);
    expect(counter).toBe(wins);
    expect(acquisitions).toEqual({ n: wins, fences: wins });
  });

  it('does lose increments without the lease (the fuzz test can fail)', async () => {
    const pool = rawPool(url, 1);
    await pool.query('update fuzz_counter set value = 0; truncate fuzz_acquisitions');
    const increments = await fuzz(4, { DURATION_MS: '1500', LEASE: 'off' });
    const counter = (await pool.query('select value from fuzz_counter')).rows[0].value;
    expect(counter).toBeLessThan(increments);
  });
});
