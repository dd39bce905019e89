// The dashboard's actions over HTTP, with real login roles (docs/dashboard.md "Actions"): who
// the dashboard knows (a trusted proxy's header, ignored from any other peer; a signed-in
// session, throttled sign-ins), the CSRF defences on every POST, each act's input, the operator
// level it needs and checks at start, and the namespace of its role.
// dashboard-actions-options.test.ts: its options and the CLI's flags.
import http from 'node:http';
import type pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDashboard, type Dashboard, type DashboardOptions } from '../../src/dashboard/server.js';
import { DASHBOARD_ACTIONS } from '../../src/dashboard/actions.js';
import { hashPassword } from '../../src/dashboard/passwords.js';
import { PermissionDeniedError } from '../../src/errors.js';
import { cli } from '../support/cli.js';
import { act, origin, PAGE, request, session, signIn as signInAs } from '../support/dashboard-http.js';
import { outcome, pool, ROLE, urlAs, usePrivilegeFixture } from '../support/privileges.js';

let url = '';
let owner: pg.Pool;
usePrivilegeFixture((fixture) => ({ url, owner } = fixture));

const PASSWORD = 'correct horse battery';
let users: Array<{ name: string; passwordHash: string }>;
const dashboards: Dashboard[] = [];

beforeAll(async () => {
  users = [{ name: 'alice', passwordHash: await hashPassword(PASSWORD) }];
  await owner.query(`select leasehold.register_jobs(array['h-pause', 'h-run', 'h-tick', 'billing:report'], array['1h', '1h', '*/10 * * * *', '1h'],
                       array[null, null, null, null]::text[], array[3600000, 3600000, 600000, 3600000]::bigint[], array[30000, 30000, 30000, 30000]::bigint[],
                       array['skip', 'skip', 'skip', 'skip'], array['none', 'none', 'none', 'none'], 'setup')`);
}, 60_000);
afterAll(async () => {
  await Promise.allSettled(dashboards.map((d) => d.close()));
});

async function dashboard(role: string, options: Partial<DashboardOptions> = {}): Promise<Dashboard> {
  const d = await startDashboard({ pool: pool(url, role), port: 0, ...options });
  dashboards.push(d);
  return d;
}

const signIn = (d: Dashboard) => signInAs(d, 'alice', PASSWORD);

async function audit(job: string): Promise<Array<{ action: string; actor: string; db_role: string }>> {
  const { rows } = await owner.query<{ action: string; actor: string; db_role: string }>(`select action, actor, db_role from leasehold.actions where job = $1 order by id`, [job]);
  return rows;
}

describe('who the dashboard knows', () => {
  it('believes the user header only from a listed proxy: from any other peer it names nobody, and the act is refused', async () => {
    const d = await dashboard(ROLE.operator, { actions: { proxy: { trustedProxies: ['127.0.0.2'] } } });
    const headers = { 'x-forwarded-user': 'mallory' };
    // from 127.0.0.1 (not the proxy): a spoofed header
    const spoofed = await session(d, headers, '127.0.0.1');
    expect(spoofed).toMatchObject({ actions: true, mode: 'proxy', user: null, csrf: null, role: ROLE.operator });
    const refused = await act(d, 'run-now', { job: 'h-run' }, headers, '127.0.0.1');
    expect(refused.status).toBe(401);
    expect(refused.json.error).toMatch(/not signed in: the dashboard acts only for a person its trusted proxy names/);
    // from the proxy's address the same header names the person, who acts with the session's token
    const known = await session(d, headers, '127.0.0.2');
    expect(known).toMatchObject({ user: 'mallory', mayAct: true });
    const ok = await act(d, 'run-now', { job: 'h-run' }, { ...headers, 'x-leasehold-csrf': String(known.csrf) }, '127.0.0.2');
    expect(ok.status, ok.body).toBe(200);
    expect(ok.json).toMatchObject({ action: 'run-now', by: 'mallory', role: ROLE.operator });
    expect(await audit('h-run')).toEqual([{ action: 'run-now', actor: 'mallory', db_role: ROLE.operator }]);
    // the header twice, or with a name the protocol refuses, names nobody
    const twice = await new Promise<Record<string, unknown>>((resolve, reject) => {
      const headers = ['host', new URL(d.url).host, 'x-leasehold-dashboard', '1', 'x-forwarded-user', 'a', 'x-forwarded-user', 'b'];
      const req = http.request(`${d.url}api/session`, { localAddress: '127.0.0.2', headers }, (res) => {
        let body = '';
        res.on('data', (c: Buffer) => (body += c.toString()));
        res.on('end', () => {
          try {
            resolve(JSON.parse(body) as Record<string, unknown>);
          } catch (error) {
            reject(new Error(`${res.statusCode}: ${body}`, { cause: error }));
          }
        });
      });
      req.on('error', reject);
      req.end();
    });
    expect(twice).toMatchObject({ user: null, problem: 'the proxy sent x-forwarded-user 2 times' });
    expect(await session(d, { 'x-forwarded-user': 'bad\u0085name' }, '127.0.0.2')).toMatchObject({ user: null, problem: expect.stringMatching(/not a usable name/) as string });
  });

  it('lets only the allowed users act; others named by the proxy may look', async () => {
    const d = await dashboard(ROLE.operator, { actions: { proxy: { trustedProxies: ['127.0.0.0/8'], userHeader: 'X-Auth-Request-User', allowedUsers: ['carol'] } } });
    const bob = await session(d, { 'x-auth-request-user': 'bob' });
    expect(bob).toMatchObject({ user: 'bob', mayAct: false, problem: expect.stringMatching(/bob may look but not act/) as string });
    const refused = await act(d, 'pause', { job: 'h-pause', reason: 'x' }, { 'x-auth-request-user': 'bob', 'x-leasehold-csrf': String(bob.csrf) });
    expect(refused.status).toBe(403);
    expect(refused.json.error).toMatch(/bob may not act on jobs from this dashboard/);
    expect(await audit('h-pause')).toEqual([]);
  });

  it('signs people in with a password (a session cookie, HttpOnly, SameSite=Strict) and out again; wrong passwords are throttled', async () => {
    const d = await dashboard(ROLE.operator, { actions: { users, sessionTtl: '1h' } });
    expect(await session(d)).toMatchObject({ actions: true, mode: 'users', user: null, csrf: null });
    const form = await request(d, 'login');
    expect(form.status).toBe(200);
    expect(form.headers['content-security-policy']).toMatch(/form-action 'self'/);
    const wrong = await request(d, 'login', { method: 'POST', headers: { origin: origin(d), 'content-type': 'application/x-www-form-urlencoded' }, body: 'name=alice&password=guess-guess' });
    expect(wrong.status).toBe(401);
    expect(wrong.body).toContain('wrong name or password');
    const unknown = await request(d, 'login', { method: 'POST', headers: { origin: origin(d), 'content-type': 'application/x-www-form-urlencoded' }, body: 'name=nobody&password=guess-guess' });
    expect(unknown.status).toBe(401);
    // a sign-in from another site is refused before the password is looked at
    const foreign = await request(d, 'login', { method: 'POST', headers: { origin: 'http://evil.example', 'content-type': 'application/x-www-form-urlencoded' }, body: `name=alice&password=${PASSWORD}` });
    expect(foreign.status).toBe(403);

    const res = await request(d, 'login', { method: 'POST', headers: { origin: origin(d), 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ name: 'alice', password: PASSWORD }).toString() });
    expect(res.status).toBe(303);
    expect(res.headers.location).toBe('./');
    expect(res.headers['set-cookie']?.[0]).toMatch(/^leasehold_session=[A-Za-z0-9_-]{43}; Max-Age=3600; HttpOnly; SameSite=Strict$/);
    const cookie = res.headers['set-cookie']![0]!.split(';')[0]!;
    const signed = await session(d, { cookie });
    expect(signed).toMatchObject({ user: 'alice', mayAct: true });
    const paused = await act(d, 'pause', { job: 'h-pause', reason: 'vendor outage' }, { cookie, 'x-leasehold-csrf': String(signed.csrf) });
    expect(paused.status, paused.body).toBe(200);
    expect(paused.json.message).toBe('paused "h-pause"');
    const resumed = await act(d, 'resume', { job: 'h-pause' }, { cookie, 'x-leasehold-csrf': String(signed.csrf) });
    expect(resumed.json.message).toBe('resumed "h-pause" (paused by alice)');
    expect(await audit('h-pause')).toEqual([
      { action: 'paused', actor: 'alice', db_role: ROLE.operator },
      { action: 'resumed', actor: 'alice', db_role: ROLE.operator },
    ]);

    const out = await request(d, 'logout', { method: 'POST', headers: { ...PAGE, cookie, origin: origin(d), 'content-type': 'application/json', 'x-leasehold-csrf': String(signed.csrf) }, body: '{}' });
    expect(out.status).toBe(200);
    expect(out.headers['set-cookie']?.[0]).toMatch(/^leasehold_session=; Max-Age=0/);
    const after = await act(d, 'run-now', { job: 'h-run' }, { cookie, 'x-leasehold-csrf': String(signed.csrf) });
    expect(after.status).toBe(401);

    // ten failures from one address: the next attempt is refused without a check, even with the right password
    for (let i = 0; i < 8; i++) await request(d, 'login', { method: 'POST', headers: { origin: origin(d), 'content-type': 'application/x-www-form-urlencoded' }, body: 'name=alice&password=guess-guess' });
    const throttled = await request(d, 'login', { method: 'POST', headers: { origin: origin(d), 'content-type': 'application/x-www-form-urlencoded' }, body: `name=alice&password=${encodeURIComponent(PASSWORD)}` });
    expect(throttled.status).toBe(429);
    expect(throttled.headers['retry-after']).toMatch(/^\d+$/);
  });

  it('throttles a name that failed ten times, from whichever addresses', async () => {
    const d = await dashboard(ROLE.operator, { actions: { users } });
    const attempt = (address: string, password: string) =>
      request(d, 'login', { method: 'POST', localAddress: address, headers: { origin: origin(d), 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ name: 'alice', password }).toString() });
    for (let i = 2; i < 12; i++) expect((await attempt(`127.0.0.${i}`, 'guess-guess')).status).toBe(401);
    expect((await attempt('127.0.0.12', PASSWORD)).status).toBe(429);
  });

  it('costs an unknown name the same password check as a wrong password; marks the cookie Secure when asked', async () => {
    const d = await dashboard(ROLE.operator, { actions: { users, secureCookie: true } });
    const attempt = async (name: string) => {
      const started = performance.now();
      const res = await request(d, 'login', { method: 'POST', headers: { origin: origin(d), 'content-type': 'application/x-www-form-urlencoded' }, body: `name=${name}&password=guess-guess` });
      expect(res.status).toBe(401);
      return performance.now() - started;
    };
    await attempt('nobody'); // the decoy hash is made once, on the first unknown name
    const wrong = Math.min(await attempt('alice'), await attempt('alice'), await attempt('alice'));
    const unknown = Math.min(await attempt('nobody'), await attempt('nobody'), await attempt('nobody'));
    expect(unknown).toBeGreaterThan(wrong / 2);
    const res = await request(d, 'login', { method: 'POST', headers: { origin: origin(d), 'content-type': 'application/x-www-form-urlencoded' }, body: new URLSearchParams({ name: 'alice', password: PASSWORD }).toString() });
    expect(res.headers['set-cookie']?.[0]).toMatch(/; HttpOnly; SameSite=Strict; Secure$/);
  });
});

describe('cross-site requests', () => {
  it('refuses a POST without this session\'s token, from another origin, without Origin, or not as JSON; nothing is recorded', async () => {
    const d = await dashboard(ROLE.operator, { actions: { users } });
    const { cookie, csrf } = await signIn(d);
    const cases: Array<[string, Record<string, string>, number, RegExp]> = [
      ['no token', { cookie }, 403, /lacks this session's x-leasehold-csrf token/],
      ['a wrong token', { cookie, 'x-leasehold-csrf': `${csrf.slice(0, -2)}AA` }, 403, /lacks this session's/],
      ['another session\'s token', { cookie, 'x-leasehold-csrf': (await signIn(d)).csrf }, 403, /lacks this session's/],
      ['a foreign Origin', { cookie, 'x-leasehold-csrf': csrf, origin: 'http://127.0.0.1:1' }, 403, /Origin "http:\/\/127.0.0.1:1" is not this dashboard's/],
      ['Sec-Fetch-Site same-site', { cookie, 'x-leasehold-csrf': csrf, 'sec-fetch-site': 'same-site' }, 403, /cross-site request refused/],
      ['no page header', { cookie, 'x-leasehold-csrf': csrf, 'x-leasehold-dashboard': '' }, 403, /dashboard's own page/],
      ['a form body', { cookie, 'x-leasehold-csrf': csrf, 'content-type': 'text/plain' }, 415, /JSON body/],
    ];
    for (const [what, headers, status, message] of cases) {
      const res = await act(d, 'run-now', { job: 'h-run' }, headers);
      expect(res.status, what).toBe(status);
      expect(res.json.error, what).toMatch(message);
    }
    // a proxy that rewrites Host: the page's origin is accepted once it is listed
    const proxied = await dashboard(ROLE.operator, { actions: { users, origins: ['https://jobs.example.com'] } });
    const viaProxy = await signIn(proxied);
    const rewritten = { cookie: viaProxy.cookie, 'x-leasehold-csrf': viaProxy.csrf, origin: 'https://jobs.example.com' };
    expect((await act(proxied, 'run-now', { job: 'no-such-job' }, rewritten)).status).toBe(404); // past every check, to the database
    expect((await act(proxied, 'run-now', { job: 'no-such-job' }, { ...rewritten, origin: 'https://jobs.example.org' })).status).toBe(403);
    const noOrigin = await request(d, 'api/actions/run-now', { method: 'POST', headers: { ...PAGE, cookie, 'x-leasehold-csrf': csrf, 'content-type': 'application/json' }, body: '{"job":"h-run"}' });
    expect(noOrigin.status).toBe(403);
    expect(noOrigin.json.error).toMatch(/must carry an Origin header/);
    // no state changes on GET, and a preflight is never granted
    expect((await request(d, 'api/actions/run-now?job=h-run', { headers: { ...PAGE, cookie } })).status).toBe(405);
    expect((await request(d, 'api/actions/run-now', { method: 'OPTIONS', headers: { origin: 'http://evil.example', 'access-control-request-method': 'POST' } })).status).toBe(405);
    expect(await audit('h-run')).toEqual([{ action: 'run-now', actor: 'mallory', db_role: ROLE.operator }]); // the first test's only
  });

  it('checks each act\'s input: unknown fields, an unknown job, a backfill without its dry run or with another range', async () => {
    const d = await dashboard(ROLE.operator, { actions: { users } });
    const { cookie, csrf } = await signIn(d);
    const headers = { cookie, 'x-leasehold-csrf': csrf };
    const unknownField = await act(d, 'run-now', { job: 'h-run', by: 'someone-else' }, headers);
    expect([unknownField.status, unknownField.json.error]).toEqual([400, 'run-now: unknown field "by"; it takes job']);
    const noJob = await act(d, 'pause', { job: 'no-such-job', reason: 'x' }, headers);
    expect([noJob.status, noJob.json.error]).toEqual([404, 'no job named "no-such-job"']);
    expect((await act(d, 'run-now', { job: 'no-such-job' }, headers)).status).toBe(404);
    expect((await act(d, 'force-release', { job: 'no-such-lease' }, headers)).status).toBe(404);
    expect((await act(d, 'pause', { job: 'h-pause' }, headers)).json.error).toMatch(/pause: say why/);
    expect((await act(d, 'run-now', { job: 'x\u202e' }, headers)).json.error).toMatch(/must not contain control, bidirectional or invisible characters/);
    expect((await act(d, 'launch', {}, headers)).status).toBe(404);
    const big = await act(d, 'run-now', { job: 'h-run', pad: 'x'.repeat(20_000) }, headers);
    expect(big.status).toBe(413);

    const to = new Date(Math.floor(Date.now() / 600_000) * 600_000);
    const range = { job: 'h-tick', from: new Date(to.getTime() - 30 * 60_000).toISOString(), to: to.toISOString() };
    const unseen = await act(d, 'backfill', range, headers);
    expect([unseen.status, unseen.json.error]).toEqual([400, 'backfill: run a dry run first (dryRun: true), then confirm its slots (confirm)']);
    const dry = await act(d, 'backfill', { ...range, dryRun: true }, headers);
    expect(dry.json).toMatchObject({ dryRun: true, slots: [new Date(to.getTime() - 20 * 60_000).toISOString(), new Date(to.getTime() - 10 * 60_000).toISOString(), to.toISOString()] });
    const other = await act(d, 'backfill', { ...range, from: new Date(to.getTime() - 60 * 60_000).toISOString(), confirm: dry.json.confirm }, headers);
    expect(other.status).toBe(409);
    const elsewhere = await signIn(d);
    const stolen = await act(d, 'backfill', { ...range, confirm: dry.json.confirm }, { cookie: elsewhere.cookie, 'x-leasehold-csrf': elsewhere.csrf });
    expect(stolen.status).toBe(409);
    expect(await audit('h-tick')).toEqual([]);
    const done = await act(d, 'backfill', { ...range, confirm: dry.json.confirm }, headers);
    expect(done.json).toMatchObject({ message: 'requested 3 slots of "h-tick"', alreadyRequested: 0 });
    expect((done.json.requested as Array<{ slot: string }>).map((r) => r.slot)).toEqual(dry.json.slots);
    expect(await audit('h-tick')).toEqual([{ action: 'backfill', actor: 'alice', db_role: ROLE.operator }]);
  });
});

describe('the database level and namespace', () => {
  it('maps each act to the operator level of leasehold.access', async () => {
    const { rows } = await owner.query<{ object: string; level: string }>(`select object, level from leasehold.access where object = any($1)`, [Object.values(DASHBOARD_ACTIONS).map((a) => a.fn)]);
    expect(Object.fromEntries(rows.map((r) => [r.object, r.level]))).toEqual(Object.fromEntries(Object.values(DASHBOARD_ACTIONS).map((a) => [a.fn, a.level])));
  });

  it('refuses to start with actions for a role without the operator grant (a reader), naming the grant; read-only it starts', async () => {
    const refused = await dashboard(ROLE.reader, { actions: { users } }).then(() => null, (e: unknown) => e);
    expect(refused).toBeInstanceOf(PermissionDeniedError);
    expect((refused as PermissionDeniedError).level).toBe('operator');
    expect((refused as Error).message).toContain(`may not execute leasehold.force_release, leasehold.pause_job, leasehold.resume_job, leasehold.run_now. Have the schema owner run: leasehold grant ${ROLE.reader} --as operator`);
    const readOnly = await dashboard(ROLE.reader);
    expect((await session(readOnly)).actions).toBe(false);
    const result = await cli(['dashboard', '--port', '0', '--trusted-proxy', '127.0.0.1'], { DATABASE_URL: urlAs(url, ROLE.reader) });
    expect(result.code).toBe(77);
    expect(result.stderr).toMatch(/actions need the operator level/);
  });

  it('acts only within the namespace of its role: another name is refused with a clear 403 and not recorded', async () => {
    await owner.query(`select leasehold.grant_access($1, 'operator', 'billing:')`, [ROLE.app2]);
    const d = await dashboard(ROLE.app2, { actions: { users } });
    const { cookie, csrf } = await signIn(d);
    expect(await session(d, { cookie })).toMatchObject({ role: ROLE.app2, namespaces: ['billing:'] });
    const inside = await act(d, 'run-now', { job: 'billing:report' }, { cookie, 'x-leasehold-csrf': csrf });
    expect(inside.status, inside.body).toBe(200);
    for (const [action, body] of [['pause', { job: 'h-run', reason: 'x' }], ['run-now', { job: 'h-run' }], ['force-release', { job: 'h-run' }]] as const) {
      const outside = await act(d, action, body, { cookie, 'x-leasehold-csrf': csrf });
      expect(outside.status, action).toBe(403);
      expect(outside.json.error, action).toMatch(new RegExp(`role "${ROLE.app2}" may not act on "h-run": it is bound to the namespace billing:`));
    }
    expect(await audit('billing:report')).toEqual([{ action: 'run-now', actor: 'alice', db_role: ROLE.app2 }]);
    expect((await audit('h-run')).filter((r) => r.db_role === ROLE.app2)).toEqual([]);
    expect(await outcome(owner, 'select 1')).toBe('ok');
  });
});
