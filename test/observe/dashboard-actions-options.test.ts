// The dashboard's actions: its options (typed errors naming what is wrong), passwords and users
// files, and the flags of `leasehold dashboard` and `leasehold dashboard-user`.
import { mkdtemp, readFile, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { startDashboard, type Dashboard, type DashboardOptions } from '../../src/dashboard/server.js';
import { hashPassword, parsePasswordHash, parseUsersFile, verifyPassword } from '../../src/dashboard/passwords.js';
import { InvalidArgumentError } from '../../src/errors.js';
import { cli, startCli } from '../support/cli.js';
import { PAGE, request, signIn } from '../support/dashboard-http.js';
import { pool, ROLE, urlAs, usePrivilegeFixture } from '../support/privileges.js';

let url = '';
usePrivilegeFixture((fixture) => ({ url } = fixture));

const PASSWORD = 'correct horse battery';
let users: Array<{ name: string; passwordHash: string }>;
beforeAll(async () => {
  users = [{ name: 'alice', passwordHash: await hashPassword(PASSWORD) }];
});

describe('options and the CLI', () => {
  it('refuses bad options with typed errors naming them', async () => {
    const p = pool(url, ROLE.operator);
    const bad: Array<[unknown, RegExp]> = [
      [{ proxi: {} }, /startDashboard\(\) actions: unknown option 'proxi' \(did you mean 'proxy'\?\)/],
      [{ proxy: { trustedProxy: ['10.0.0.1'] } }, /actions.proxy: unknown option 'trustedProxy'; valid options are trustedProxies, userHeader, allowedUsers/],
      [{}, /actions needs proxy .* or users/],
      [{ proxy: { trustedProxies: ['10.0.0.1'] }, users }, /proxy or users, not both/],
      [{ proxy: { trustedProxies: [] } }, /needs trustedProxies/],
      [{ proxy: { trustedProxies: ['10.0.0.300'] } }, /"10.0.0.300" is not an IP address or CIDR range/],
      [{ proxy: { trustedProxies: ['0.0.0.0/0'] } }, /trusts every address/],
      [{ proxy: { trustedProxies: ['::1'], userHeader: 'cookie' } }, /userHeader must be a request header name/],
      [{ proxy: { trustedProxies: ['::1'] }, sessionTtl: '1h' }, /sessionTtl applies to users who sign in/],
      [{ users: [] }, /non-empty array/],
      [{ users: [{ name: 'bob', passwordHash: 'hunter2' }] }, /users\[0\]: the password hash is not one hashPassword\(\)/],
      [{ users: [{ name: 'a:b', passwordHash: users[0]!.passwordHash }] }, /must not contain ':'/],
      [{ users: [...users, ...users] }, /listed twice/],
      [{ users, sessionTtl: '10s' }, /sessionTtl/],
      [{ users, origins: ['https://jobs.example.com/path'] }, /not an origin/],
    ];
    for (const [actions, message] of bad) {
      const error = await startDashboard({ pool: p, port: 0, actions } as DashboardOptions).then(() => null, (e: unknown) => e);
      expect(error, JSON.stringify(actions)).toBeInstanceOf(InvalidArgumentError);
      expect((error as Error).message, JSON.stringify(actions)).toMatch(message);
    }
  });

  it('hashes passwords (scrypt) for a users file: `leasehold dashboard-user` prints or writes the line; the dashboard reads it', async () => {
    const hash = users[0]!.passwordHash;
    expect(hash).toMatch(/^\$scrypt\$ln=15,r=8,p=1\$[A-Za-z0-9+/]{22}\$[A-Za-z0-9+/]{43}$/);
    expect(await verifyPassword(PASSWORD, parsePasswordHash(hash, 'x'))).toBe(true);
    expect(await verifyPassword('correct horse battery!', parsePasswordHash(hash, 'x'))).toBe(false);
    await expect(hashPassword('short')).rejects.toThrow(/at least 8 characters/);

    const dir = await mkdtemp(join(tmpdir(), 'leasehold-users-'));
    const file = join(dir, 'users');
    const run = startCli(['dashboard-user', 'dora', '--users-file', file]);
    run.child.stdin.end('dora-secret-1\n');
    expect((await run.done).code).toBe(0);
    const again = startCli(['dashboard-user', 'erin']);
    again.child.stdin.end('erin-secret-1');
    const printed = await again.done;
    expect(printed.stdout).toMatch(/^erin:\$scrypt\$/);
    await writeFile(file, `# people on call\n${await readFile(file, 'utf8')}${printed.stdout}`);
    expect(((await stat(file)).mode & 0o777).toString(8)).toBe('600');
    const parsed = parseUsersFile(await readFile(file, 'utf8'), file);
    expect(parsed.map((u) => u.name)).toEqual(['dora', 'erin']);
    expect(await verifyPassword('dora-secret-1', parsePasswordHash(parsed[0]!.passwordHash, 'x'))).toBe(true);
    expect(() => parseUsersFile('dora\n', 'f')).toThrow(/f, line 1: expected name:\$scrypt\$/);
    expect((await cli(['dashboard-user', 'x'], {})).stderr).toMatch(/at least 8 characters/);

    // the dashboard command: read-only, users file, or proxy; flags that do not fit are usage errors
    const missing = await cli(['dashboard', '--port', '0', '--users-file', join(dir, 'nope')], { DATABASE_URL: urlAs(url, ROLE.operator) });
    expect([missing.code, missing.stderr]).toEqual([2, expect.stringMatching(/cannot read the users file .*nope: ENOENT/) as string]);
    const both = await cli(['dashboard', '--users-file', file, '--trusted-proxy', '::1'], { DATABASE_URL: urlAs(url, ROLE.operator) });
    expect([both.code, both.stderr]).toEqual([2, expect.stringMatching(/give one/) as string]);
    const stray = await cli(['dashboard', '--allow-user', 'bob'], { DATABASE_URL: urlAs(url, ROLE.operator) });
    expect([stray.code, stray.stderr]).toEqual([2, expect.stringMatching(/--allow-user applies to --trusted-proxy/) as string]);
    const serving = startCli(['dashboard', '--port', '0', '--users-file', file, '--allowed-host', 'jobs.internal'], { DATABASE_URL: urlAs(url, ROLE.operator) });
    try {
      const deadline = Date.now() + 20_000;
      while (!/dashboard at/.test(serving.output().stderr) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
      const line = serving.output().stderr;
      expect(line).toMatch(/people in .*users sign in at http:\/\/127\.0\.0\.1:\d+\/login to act/);
      const base = /dashboard at (http:\S+\/) /.exec(line)![1]!;
      const d = { url: base } as Dashboard;
      expect((await signIn(d, 'dora', 'dora-secret-1')).csrf).toMatch(/^[A-Za-z0-9_-]{43}$/);
      expect((await request(d, 'api/session', { headers: { ...PAGE, host: 'jobs.internal' } })).status).toBe(200);
      expect((await request(d, 'api/session', { headers: { ...PAGE, host: 'jobs.example' } })).status).toBe(403);
    } finally {
      serving.child.kill('SIGTERM');
      await serving.done;
    }
  });
});
