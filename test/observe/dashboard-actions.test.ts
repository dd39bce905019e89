// The dashboard's actions in headless Chromium (docs/dashboard.md "Actions"), with real login
// roles: each act by an authorised person from the page (pause with a reason, resume, run now,
// backfill after a dry run, force-release), recorded in leasehold.actions with the person and
// the dashboard's database role; nothing offered and everything refused for a person not
// signed in, a spoofed proxy header from an untrusted peer, a person outside the allow-list and
// a page on another origin; and a read-only dashboard that offers no acts at all.
import { mkdirSync } from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import type pg from 'pg';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDashboard, type Dashboard, type DashboardOptions } from '../../src/dashboard/server.js';
import { hashPassword } from '../../src/dashboard/passwords.js';
import { haveChromium, launchChromium, NO_CHROMIUM } from '../support/browser.js';
import { pool, ROLE, usePrivilegeFixture } from '../support/privileges.js';

const ARTIFACTS = fileURLToPath(new URL('../../test-artifacts/', import.meta.url));
const PASSWORD = 'on-call-password';

let url = '';
let owner: pg.Pool;
usePrivilegeFixture((fixture) => ({ url, owner } = fixture));

let users: Array<{ name: string; passwordHash: string }>;
let browser: Browser | undefined;
const dashboards: Dashboard[] = [];

beforeAll(async () => {
  users = [{ name: 'alice', passwordHash: await hashPassword(PASSWORD) }];
  await owner.query(`select leasehold.register_jobs(array['b-pause', 'b-run', 'b-tick', 'b-held'], array['1h', '1h', '*/10 * * * *', '1h'],
                       array[null, null, null, null]::text[], array[3600000, 3600000, 600000, 3600000]::bigint[], array[30000, 30000, 30000, 30000]::bigint[],
                       array['skip', 'skip', 'skip', 'skip'], array['none', 'none', 'none', 'none'], 'setup')`);
  // a stuck holder, for force-release
  await owner.query(`select * from leasehold.acquire('b-held', '1 hour', 'stuck-worker')`);
  if (haveChromium) browser = await launchChromium();
}, 60_000);
afterAll(async () => {
  await browser?.close();
  await Promise.allSettled(dashboards.map((d) => d.close()));
});

async function dashboard(options: Partial<DashboardOptions> = {}, role = ROLE.operator): Promise<Dashboard> {
  const d = await startDashboard({ pool: pool(url, role), port: 0, ...options });
  dashboards.push(d);
  return d;
}

async function audit(job: string): Promise<Array<{ action: string; actor: string; db_role: string; detail: Record<string, unknown> }>> {
  const { rows } = await owner.query<{ action: string; actor: string; db_role: string; detail: Record<string, unknown> }>(
    `select action, actor, db_role, detail from leasehold.actions where job = $1 order by id`,
    [job],
  );
  return rows;
}

/** A page that records script errors and CSP violations (failed 4xx loads are expected here). */
async function open(context: BrowserContext, target: string): Promise<{ page: Page; problems: string[] }> {
  const page = await context.newPage();
  const problems: string[] = [];
  page.on('pageerror', (error) => problems.push(`pageerror: ${error.message}`));
  page.on('console', (message) => {
    if (/Content Security Policy|Refused to/.test(message.text())) problems.push(message.text());
  });
  await page.goto(target, { waitUntil: 'domcontentloaded', timeout: 10_000 });
  await page.locator('#jobs-body tr[data-job="b-run"]').waitFor({ timeout: 10_000 });
  return { page, problems };
}

/** Selects a job's row and waits for its runs card. */
async function select(page: Page, job: string): Promise<void> {
  await page.locator(`#jobs-body tr[data-job="${job}"]`).click();
  await page.locator('#runs-title', { hasText: `Runs of ${job}` }).waitFor({ timeout: 10_000 });
  await page.locator('#runs-card').waitFor({ state: 'visible' });
}

/** Waits for the result line of an act, and returns its text. */
async function result(page: Page, state: 'ok' | 'error', text: RegExp): Promise<string> {
  const line = page.getByTestId('action-result');
  await expect.poll(async () => `${await line.getAttribute('data-state')} ${await line.innerText()}`, { timeout: 10_000 }).toMatch(new RegExp(`^${state} ${text.source}`));
  return line.innerText();
}

/** A POST from inside the page, as a script of the page could make it. */
function postFromPage(page: Page, path: string, headers: Record<string, string>, body: unknown): Promise<{ status: number; error: string }> {
  return page.evaluate(
    async ([p, h, b]) => {
      const res = await fetch(p, { method: 'POST', headers: h, body: JSON.stringify(b) });
      const data = (await res.json().catch(() => ({}))) as { error?: string };
      return { status: res.status, error: data.error ?? '' };
    },
    [path, headers, body] as const,
  );
}

const JSON_HEADERS = { 'content-type': 'application/json', 'x-leasehold-dashboard': '1' };

describe.skipIf(!haveChromium)(haveChromium ? 'dashboard actions in a browser' : NO_CHROMIUM, () => {
  it('signed in with a password, alice pauses with a reason, resumes, runs now, backfills after a dry run and force-releases; each is recorded with her name and the dashboard\'s role', { timeout: 90_000 }, async () => {
    const d = await dashboard({ actions: { users } });
    const context = await browser!.newContext({ viewport: { width: 1280, height: 900 } });
    try {
      const { page, problems } = await open(context, d.url);
      // not signed in: a link to sign in, no acts offered, and the API refuses one
      await page.getByTestId('sign-in').waitFor();
      expect(await page.getByTestId('session').innerText()).toBe('sign in to act');
      await select(page, 'b-run');
      expect(await page.getByTestId('job-actions').count()).toBe(0);
      expect(await postFromPage(page, 'api/actions/run-now', JSON_HEADERS, { job: 'b-run' })).toEqual({ status: 401, error: 'not signed in: sign in to act (the dashboard is read-only until then)' });

      // a wrong password, then the right one
      await page.getByTestId('sign-in').click();
      await page.getByLabel('name').fill('alice');
      await page.getByLabel('password').fill('not-her-password');
      await page.getByRole('button', { name: 'Sign in' }).click();
      expect(await page.getByTestId('login-error').innerText()).toBe('wrong name or password');
      await page.getByLabel('password').fill(PASSWORD);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.locator('#jobs-body tr[data-job="b-run"]').waitFor({ timeout: 10_000 });
      await page.getByTestId('job-actions').waitFor({ state: 'attached' });
      expect(await page.getByTestId('session').innerText()).toMatch(/^signed in as alice · sign out/);
      expect(await page.locator('header .badge').innerText()).toBe(`acts as ${ROLE.operator}`);
      expect((await context.cookies())[0]).toMatchObject({ name: 'leasehold_session', httpOnly: true, sameSite: 'Strict' });

      // pause, with a reason (required) and the keyboard
      await select(page, 'b-pause');
      await page.locator('[data-act="pause"]').focus();
      await page.keyboard.press('Enter');
      await page.getByTestId('pause-reason').fill('vendor outage, INC-42');
      await page.getByTestId('pause-confirm').click();
      await result(page, 'ok', /paused "b-pause"/);
      await page.locator('#jobs-body tr[data-job="b-pause"][data-state="paused"]').waitFor({ timeout: 10_000 });
      await page.locator('[data-act="resume"]').click();
      await result(page, 'ok', /resumed "b-pause" \(paused by alice\)/);

      await select(page, 'b-run');
      await page.locator('[data-act="run-now"]').click();
      const asked = await result(page, 'ok', /asked for a run of "b-run" now \(request \d+\)/);
      const request = /request (\d+)/.exec(asked)![1]!;

      // backfill: the dry run lists the slots; only its confirmation requests them
      const to = new Date(Math.floor(Date.now() / 600_000) * 600_000);
      const from = new Date(to.getTime() - 30 * 60_000);
      await select(page, 'b-tick');
      await page.locator('[data-act="backfill"]').click();
      await page.getByTestId('backfill-from').fill(from.toISOString());
      await page.getByTestId('backfill-to').fill(to.toISOString());
      await page.getByTestId('backfill-dry-run').click();
      await result(page, 'ok', /3 slots of "b-tick" in \(.*\]: confirm to request them/);
      expect(await page.getByTestId('backfill-slots').locator('li').count()).toBe(3);
      expect(await audit('b-tick')).toEqual([]);
      mkdirSync(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: `${ARTIFACTS}dashboard-actions.png`, fullPage: true });
      await page.getByTestId('backfill-confirm').click();
      await result(page, 'ok', /requested 3 slots of "b-tick"/);

      await select(page, 'b-held');
      await page.locator('[data-act="force-release"]').click();
      await page.getByTestId('force-release-confirm').click();
      await result(page, 'ok', /released "b-held": it was held by stuck-worker \(fence \d+\); the fence is now \d+/);

      const recorded = (job: string) => audit(job).then((rows) => rows.map(({ action, actor, db_role }) => ({ action, actor, db_role })));
      const by = { actor: 'alice', db_role: ROLE.operator };
      expect(await recorded('b-pause')).toEqual([{ action: 'paused', ...by }, { action: 'resumed', ...by }]);
      expect((await audit('b-pause'))[0]!.detail).toMatchObject({ reason: 'vendor outage, INC-42', stop_running: false });
      expect(await recorded('b-run')).toEqual([{ action: 'run-now', ...by }]);
      expect((await audit('b-run'))[0]!.detail).toEqual({ request: Number(request) });
      expect(await recorded('b-tick')).toEqual([{ action: 'backfill', ...by }]);
      expect((await audit('b-tick'))[0]!.detail).toMatchObject({ slots: 3, requested: 3 });
      expect(await recorded('b-held')).toEqual([{ action: 'force-released', ...by }]);
      expect((await owner.query(`select state from leasehold.lease_status where name = 'b-held'`)).rows).toEqual([{ state: 'free' }]);

      // an error reads as a message, not a 500
      await select(page, 'b-pause');
      await page.locator('[data-act="pause"]').click();
      await page.getByTestId('pause-confirm').click();
      await result(page, 'error', /pause: say why \(reason\), for whoever reads the job next/);

      // signed out: the acts are gone again
      await page.getByTestId('sign-out').click();
      await page.getByTestId('sign-in').waitFor({ timeout: 10_000 });
      expect(await page.getByTestId('job-actions').count()).toBe(0);
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });

  it('behind a proxy: the person it names acts; a spoofed header from an untrusted peer and a person outside the allow-list are offered nothing and refused', { timeout: 60_000 }, async () => {
    // the browser's requests carry the header as a proxy in front would add it
    const context = await browser!.newContext({ extraHTTPHeaders: { 'X-Forwarded-User': 'bob' } });
    try {
      const trusted = await dashboard({ actions: { proxy: { trustedProxies: ['127.0.0.1'] } } });
      const { page, problems } = await open(context, trusted.url);
      await page.getByTestId('job-actions').waitFor({ state: 'attached', timeout: 10_000 });
      expect(await page.getByTestId('session').innerText()).toBe('signed in as bob');
      await select(page, 'b-run');
      await page.locator('[data-act="run-now"]').click();
      await result(page, 'ok', /asked for a run of "b-run" now/);
      expect((await audit('b-run')).at(-1)).toMatchObject({ action: 'run-now', actor: 'bob', db_role: ROLE.operator });
      expect(problems).toEqual([]);
      const before = (await audit('b-run')).length;

      // the proxy is elsewhere: this peer's header is a spoof, and names nobody
      const elsewhere = await dashboard({ actions: { proxy: { trustedProxies: ['10.1.2.3'] } } });
      const spoofed = (await open(context, elsewhere.url)).page;
      await spoofed.getByTestId('session').waitFor();
      expect(await spoofed.getByTestId('session').innerText()).toBe('not signed in');
      await select(spoofed, 'b-run');
      expect(await spoofed.getByTestId('job-actions').count()).toBe(0);
      const refused = await postFromPage(spoofed, 'api/actions/run-now', { ...JSON_HEADERS, 'x-leasehold-csrf': 'guessed' }, { job: 'b-run' });
      expect(refused).toEqual({ status: 401, error: 'not signed in: the dashboard acts only for a person its trusted proxy names' });

      // the proxy is trusted, but bob is not among the allowed users: he may look, not act
      const allowList = await dashboard({ actions: { proxy: { trustedProxies: ['127.0.0.1'], allowedUsers: ['carol'] } } });
      const looking = (await open(context, allowList.url)).page;
      await looking.getByTestId('session').waitFor();
      expect(await looking.getByTestId('session').innerText()).toMatch(/^signed in as bob · bob may look but not act/);
      expect(await looking.locator('header .badge').innerText()).toBe('read-only');
      await select(looking, 'b-run');
      expect(await looking.getByTestId('job-actions').count()).toBe(0);
      const token = await looking.evaluate(async () => ((await (await fetch('api/session', { headers: { 'x-leasehold-dashboard': '1' } })).json()) as { csrf: string }).csrf);
      const notAllowed = await postFromPage(looking, 'api/actions/run-now', { ...JSON_HEADERS, 'x-leasehold-csrf': token }, { job: 'b-run' });
      expect(notAllowed).toEqual({ status: 403, error: 'bob may not act on jobs from this dashboard (not among its allowed users)' });
      expect(await audit('b-run')).toHaveLength(before);
    } finally {
      await context.close();
    }
  });

  it('refuses cross-site requests: another origin\'s page cannot act through a signed-in browser, nor the page itself without its token', { timeout: 60_000 }, async () => {
    const d = await dashboard({ actions: { users } });
    const dash = d.url.replace(/\/$/, '');
    // another origin on the same host: same-site, so even the SameSite=Strict cookie goes along
    const attacker = http.createServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'text/html' });
      res.end(`<!doctype html><body>
        <iframe name="sink"></iframe>
        <form id="f" method="post" action="${dash}/api/actions/run-now" enctype="text/plain" target="sink"><input name='{"job":"b-run","x":"' value='"}'></form>
        <script>
          window.outcomes = [];
          document.getElementById('f').submit();
          fetch('${dash}/api/actions/run-now', { method: 'POST', mode: 'no-cors', credentials: 'include', body: '{"job":"b-run"}' })
            .catch(() => undefined).then(() => outcomes.push('no-cors done')); // its answer is opaque (or blocked by CORP) either way
          fetch('${dash}/api/actions/run-now', { method: 'POST', credentials: 'include', headers: { 'content-type': 'application/json', 'x-leasehold-dashboard': '1', 'x-leasehold-csrf': 'x' }, body: '{"job":"b-run"}' })
            .then(() => outcomes.push('cors sent'), (e) => outcomes.push('cors blocked'));
        </script></body>`);
    });
    await new Promise<void>((resolve) => attacker.listen(0, '127.0.0.1', resolve));
    const context = await browser!.newContext();
    try {
      const page = await context.newPage();
      await page.goto(`${d.url}login`);
      await page.getByLabel('name').fill('alice');
      await page.getByLabel('password').fill(PASSWORD);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.getByTestId('job-actions').waitFor({ state: 'attached', timeout: 10_000 });
      const before = (await audit('b-run')).length;

      // from the dashboard's own page: without the token, or with a wrong one
      expect(await postFromPage(page, 'api/actions/run-now', JSON_HEADERS, { job: 'b-run' })).toMatchObject({ status: 403, error: expect.stringMatching(/lacks this session's x-leasehold-csrf token/) as string });
      expect(await postFromPage(page, 'api/actions/run-now', { ...JSON_HEADERS, 'x-leasehold-csrf': 'forged' }, { job: 'b-run' })).toMatchObject({ status: 403 });

      // from the other origin
      const statuses: string[] = [];
      context.on('response', (res) => {
        if (res.url().startsWith(`${dash}/api/actions/`)) statuses.push(`${res.request().method()} ${res.status()}`);
      });
      context.on('requestfailed', (req) => {
        if (req.url().startsWith(`${dash}/api/actions/`)) statuses.push(`${req.method()} failed ${req.failure()?.errorText}`);
      });
      const evil = await context.newPage();
      await evil.goto(`http://127.0.0.1:${(attacker.address() as AddressInfo).port}/`);
      await expect.poll(() => evil.evaluate(() => (globalThis as unknown as { outcomes: string[] }).outcomes.length), { timeout: 10_000 }).toBe(2);
      expect((await evil.evaluate(() => (globalThis as unknown as { outcomes: string[] }).outcomes)).sort()).toEqual(['cors blocked', 'no-cors done']);
      await expect.poll(() => statuses.length, { timeout: 10_000 }).toBeGreaterThanOrEqual(4);
      // the form post reached the server and was refused (403; its answer is then kept out of the frame: X-Frame-Options);
      // the no-cors fetch was answered and its answer withheld from the other origin (CORP); the preflight of the
      // fetch with the page's headers was not granted, so its POST never left the browser
      expect(statuses).toEqual(expect.arrayContaining(['POST 403', 'POST failed net::ERR_BLOCKED_BY_RESPONSE.NotSameOrigin', 'POST failed net::ERR_FAILED']));
      expect(statuses.filter((s) => !s.startsWith('POST'))).toEqual([]);
      expect(await audit('b-run')).toHaveLength(before);
    } finally {
      await context.close();
      await new Promise((resolve) => attacker.close(resolve));
    }
  });

  it('read-only (no actions option): no sign-in, no acts, and POSTs are 405', { timeout: 60_000 }, async () => {
    const d = await dashboard();
    const context = await browser!.newContext();
    try {
      const { page, problems } = await open(context, d.url);
      await select(page, 'b-run');
      const session = await page.evaluate(async () => (await fetch('api/session', { headers: { 'x-leasehold-dashboard': '1' } })).json());
      expect(session).toEqual({ actions: false });
      expect(await page.locator('header .badge').innerText()).toBe('read-only');
      expect(await page.getByTestId('session').count()).toBe(0);
      expect(await page.getByTestId('job-actions').count()).toBe(0);
      expect(await page.locator('[data-act]').count()).toBe(0);
      const refused = await postFromPage(page, 'api/actions/run-now', JSON_HEADERS, { job: 'b-run' });
      expect(refused.status).toBe(405);
      expect(refused.error).toMatch(/read-only/);
      expect((await page.goto(`${d.url}login`))?.status()).toBe(404);
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});
