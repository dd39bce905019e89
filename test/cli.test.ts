// The `leasehold` command, end to end with real processes.
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../src/db/embedded.js';
import { client, freshDatabase, rawPool, waitFor } from './support/db.js';
import { cli, startCli } from './support/cli.js';
import { seedHistory } from './support/seed.js';

let url: string;
let env: Record<string, string>;
const leaseState = async (name: string) =>
  (await rawPool(url, 2).query<{ state: string; holder: string; fence: string }>('select state, holder, fence from leasehold.lease_status where name = $1', [name])).rows[0];

beforeAll(async () => {
  url = await freshDatabase();
  env = { DATABASE_URL: url };
  await (await client(url, { liveness: false })).close();
});

describe('leasehold exec', () => {
  it('runs the command while holding the lease; a second exec skips with 75 and names the holder', async () => {
    // the first command runs until the test lets it finish (a file appears)
    const flag = join(await mkdtemp(join(tmpdir(), 'leasehold-cli-')), 'done');
    const first = startCli(
      ['exec', '--name', 'guarded', '--holder', 'cron@host-a', '--ttl', '5s', '--', 'sh', '-c', 'echo started; while [ ! -e "$0" ]; do sleep 0.05; done', flag],
      env,
    );
    await waitFor(() => first.output().stdout.includes('started'), 20_000, 20);
    const second = await cli(['exec', '--name', 'guarded', '--holder', 'cron@host-b', '--', 'echo', 'should not run'], env);
    expect(second.code).toBe(75);
    expect(second.stdout).not.toContain('should not run');
    expect(second.stderr).toMatch(/skipped "guarded": held by cron@host-a \(fence 1\)/);
    await writeFile(flag, '');
    expect((await first.done).code).toBe(0);
    expect(await leaseState('guarded')).toMatchObject({ state: 'free' });
    const { rows } = await rawPool(url, 1).query(`select kind, outcome, holder from leasehold.run_history where job = 'guarded' order by at`);
    expect(rows).toEqual([
      { kind: 'run', outcome: 'succeeded', holder: 'cron@host-a' },
      { kind: 'skip', outcome: 'skipped', holder: 'cron@host-a' },
    ]);
  });

  it('passes the exit code through and gives the command its fence and token', async () => {
    const result = await cli(['exec', '-n', 'codes', '--', 'sh', '-c', 'echo "$LEASEHOLD_NAME $LEASEHOLD_FENCE $LEASEHOLD_IDEMPOTENCY_KEY"; exit 7'], env);
    expect(result.code).toBe(7);
    expect(result.stdout.trim()).toBe('codes 1 codes#1');
    expect((await rawPool(url, 1).query(`select outcome, error from leasehold.runs where job = 'codes'`)).rows[0]).toEqual({ outcome: 'failed', error: 'exit code 7' });
    expect((await cli(['exec', '--skipped-exit-code', '0', '-n', 'codes', '--', 'true'], env)).code).toBe(0);
  });

  it('stops a command that outlives a forced release (SIGTERM, then SIGKILL after the grace period)', async () => {
    const run = startCli(['exec', '-n', 'stubborn', '--ttl', '3s', '--grace', '500ms', '--', 'sh', '-c', 'trap "" TERM; echo started; sleep 30'], env);
    await waitFor(() => run.output().stdout.includes('started'), 15_000, 20);
    const forced = await cli(['release', 'stubborn', '--force', '--yes'], env);
    expect(forced.code).toBe(0);
    expect(forced.stdout).toMatch(/released "stubborn": was held by .* \(fence 1\); fence is now 2/);
    const started = Date.now();
    const result = await run.done;
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(result.code).toBe(76);
    expect(result.stderr).toMatch(/lease "stubborn" lost/);
    expect(result.stderr).toMatch(/sending SIGKILL/);
    expect((await rawPool(url, 1).query(`select outcome from leasehold.runs where job = 'stubborn'`)).rows[0]).toEqual({ outcome: 'lost' });
  });

  it('passes SIGTERM on to the command and releases the lease', async () => {
    const run = startCli(['exec', '-n', 'terminated', '--', 'sh', '-c', 'trap "echo got-term; exit 3" TERM; echo started; sleep 30 & wait'], env);
    await waitFor(() => run.output().stdout.includes('started'), 15_000, 20);
    await new Promise((resolve) => setTimeout(resolve, 300));
    run.child.kill('SIGTERM');
    const result = await run.done;
    expect(result.stdout, result.stderr).toContain('got-term');
    expect(result.code).toBe(3);
    expect(await leaseState('terminated')).toMatchObject({ state: 'free' });
  });

  it('reports bad usage and an unreachable database with their exit codes', async () => {
    expect((await cli(['exec', '-n', 'x', '--ttl', 'soon', '--', 'true'], env)).stderr).toMatch(/--ttl 'soon' is not a duration/);
    expect((await cli(['exec', '--', 'true'], env)).code).toBe(2);
    const port = await freePort();
    const down = await cli(['exec', '-n', 'x', '--', 'true'], { DATABASE_URL: `postgres://postgres@127.0.0.1:${port}/x` });
    expect(down.code).toBe(69);
    expect(down.stderr).toMatch(/Could not reach PostgreSQL at 127\.0\.0\.1:\d+\/x/);
  });
});

describe('status, runs, schedule preview, migrate', () => {
  let seededUrl: string;
  beforeAll(async () => {
    seededUrl = await freshDatabase();
    await (await client(seededUrl, { liveness: false })).close();
    await seedHistory(rawPool(seededUrl, 1));
  });

  it('status prints every job and warns about creep; --json gives the same data', async () => {
    const human = await cli(['status'], { DATABASE_URL: seededUrl });
    expect(human.code).toBe(0);
    const lines = human.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^JOB\s+SCHEDULE\s+STATE\s+HOLDER\s+LEASE AGE\s+LAST RUN\s+OUTCOME\s+P50\s+P95\s+P95\/INTERVAL\s+SKIPS 24H\s+MISSED 24H$/);
    expect(lines.find((l) => l.startsWith('report'))).toMatch(/report\s+1m\s+running\s+worker-a\s+4\d\.\ds\s+\S+\s+running\s+\S+\s+\S+\s+\d+%\s+3\s+0/);
    expect(lines.find((l) => l.startsWith('cleanup'))).toMatch(/cleanup\s+\*\/5 \* \* \* \* \(Europe\/Berlin\)\s+idle/);
    expect(human.stdout).toMatch(/^warning: p95 duration is \d+% of the interval: "report" is creeping toward overlap$/m);
    const json = JSON.parse((await cli(['status', '--json'], { DATABASE_URL: seededUrl })).stdout) as { jobs: Array<{ job: string; skips24h: number; warning: string | null }> };
    expect(json.jobs.map((j) => [j.job, j.skips24h, j.warning !== null])).toEqual([
      ['cleanup', 0, false],
      ['report', 3, true],
    ]);
  });

  it('runs lists runs, skips and missed slots, newest first', async () => {
    const human = await cli(['runs', 'cleanup', '--limit', '5'], { DATABASE_URL: seededUrl });
    expect(human.code).toBe(0);
    const lines = human.stdout.trim().split('\n');
    expect(lines).toHaveLength(7);
    expect(lines[0]).toMatch(/^lease: free \(fence 11\); last held by worker-b, released -$/);
    expect(lines[1]).toMatch(/^SLOT\s+KIND\s+OUTCOME\s+FENCE\s+HOLDER\s+STARTED\s+DURATION\s+DETAIL$/);
    expect(lines.filter((l) => /\smissed\s/.test(l))).toHaveLength(2);
    expect(lines.find((l) => /\srun\s/.test(l))).toMatch(/run\s+succeeded\s+1\s+worker-b\s+\S+\s+2\.0s/);
    const json = JSON.parse((await cli(['runs', 'cleanup', '--limit', '100', '--json'], { DATABASE_URL: seededUrl })).stdout) as Array<{ kind: string; outcome: string }>;
    expect(json.filter((e) => e.kind === 'missed')).toHaveLength(2);
    expect(json.filter((e) => e.outcome === 'lost')).toHaveLength(1);
  });

  it('schedule preview marks the DST gap and repeat of 02:30 Europe/Berlin', async () => {
    const spring = await cli(['schedule', 'preview', '30 2 * * *', '--tz', 'Europe/Berlin', '--from', '2026-03-28T00:00:00Z', '--count', '3']);
    expect(spring.code).toBe(0);
    expect(spring.stdout).toMatch(/2026-03-29T01:00:00.000Z\s+2026-03-29 03:00:00\s+DST gap: clocks jump 60 min forward at 03:00/);
    const fall = JSON.parse((await cli(['schedule', 'preview', '30 2 * * *', '--tz', 'Europe/Berlin', '--from', '2026-10-24T12:00:00Z', '--count', '2', '--json'])).stdout) as {
      slots: Array<{ slot: string; local: string; dst: string | null }>;
    };
    expect(fall.slots[0]).toEqual({ slot: '2026-10-25T00:30:00.000Z', local: '2026-10-25 02:30:00', dst: 'DST repeat: 02:30 happens twice tonight; this slot is the first' });
    expect(fall.slots[1]!.dst).toBeNull();
    const bad = await cli(['schedule', 'preview', '0 25 * * *']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/field 2 \(hour\) has an invalid value '25'/);
  });

  it('migrate --dry-run prints the pending SQL and changes nothing; migrate applies it', async () => {
    const empty = await freshDatabase();
    const dry = await cli(['migrate', '--dry-run'], { DATABASE_URL: empty });
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(/^-- 0001_leases\n/m);
    expect(dry.stdout).toContain('create function leasehold.acquire(');
    expect((await rawPool(empty, 1).query(`select to_regnamespace('leasehold') as s`)).rows[0].s).toBeNull();
    const applied = await cli(['migrate'], { DATABASE_URL: empty });
    expect(applied.stdout).toMatch(/migrated leasehold schema from version 0 to \d+/);
    expect((await cli(['migrate'], { DATABASE_URL: empty })).stdout).toMatch(/up to date/);
    expect((await cli(['status'], { DATABASE_URL: empty })).stdout).toMatch(/No jobs or leases yet/);
  });

  it('release refuses without --force, and without --yes when not on a terminal', async () => {
    expect((await cli(['release', 'report'], { DATABASE_URL: seededUrl })).stderr).toMatch(/pass --force/);
    const noTty = await cli(['release', 'report', '--force'], { DATABASE_URL: seededUrl });
    expect(noTty.code).toBe(2);
    expect(noTty.stderr).toMatch(/pass --yes/);
  });
});
