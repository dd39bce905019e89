// The dashboard's routes that know people: who the page is for (/api/session), signing in and
// out (/login, /logout, with dashboard-issued credentials) and the acts (/api/actions/NAME).
// Without the `actions` option only /api/session answers, saying so: the page offers nothing.
//
//   GET  /api/session          { actions: false } | { actions: true, mode, user, mayAct, csrf, role, namespaces, … }
//   GET  /login                the sign-in form (users mode)
//   POST /login                name and password (a form post): 303 to the page with the session cookie
//   POST /logout               ends the session
//   POST /api/actions/NAME     pause, resume, run-now, backfill, force-release (JSON body)
//
// Every POST: Origin of this dashboard and Sec-Fetch-Site same-origin (csrf.ts); an act also
// needs the page's header, a JSON body, a known person allowed to act and the session's token.
import type http from 'node:http';
import { PermissionDeniedError } from '../errors.js';
import type { Queryable } from '../db/handle.js';
import type { ResolvedActions } from './action-options.js';
import { DASHBOARD_ACTIONS, isActionName, takeAction } from './actions.js';
import { Authenticator, type Person } from './auth.js';
import { checkPostOrigin, CsrfTokens } from './csrf.js';
import { DASHBOARD_ACTION_LIMITS } from './defaults.js';
import { checkSameOrigin, HttpError } from './guard.js';
import { loginPage } from './login-page.js';
import { sessionCookie } from './sessions.js';

export interface Reply {
  status: number;
  contentType: string;
  body: string;
  headers?: Record<string, string>;
}

export interface ActionRoutes {
  /** Checks the database role can take every act (at start); rejects with PermissionDeniedError when it cannot. */
  prepare(): Promise<void>;
  /** The reply when the request is one of these routes, else undefined. */
  route(req: http.IncomingMessage, url: URL): Promise<Reply | undefined>;
}

interface Deps {
  db: Queryable;
  /** Runs database work under the dashboard's limiter and timeout. */
  timed: <T>(work: () => Promise<T>) => Promise<T>;
}

const json = (status: number, value: unknown, headers: Record<string, string> = {}): Reply => ({ status, contentType: 'application/json; charset=utf-8', body: JSON.stringify(value), headers });
const READ_ONLY: ActionRoutes = {
  prepare: async () => undefined,
  route: async (req, url) => (url.pathname === '/api/session' && (req.method === 'GET' || req.method === 'HEAD') ? (checkSameOrigin(req), json(200, { actions: false })) : undefined),
};

/** The routes for `config`; read-only (only /api/session) when it is null. */
export function actionRoutes(config: ResolvedActions | null, deps: Deps): ActionRoutes {
  return config ? peopleRoutes(config, deps) : READ_ONLY;
}

function peopleRoutes(config: ResolvedActions, { db, timed }: Deps): ActionRoutes {
  const auth = new Authenticator(config);
  const tokens = new CsrfTokens();
  let role = '';
  let namespaces: string[] | null = null;
  const cookie = config.mode === 'password' ? { secure: config.secureCookie, ttlMs: config.sessionTtlMs } : { secure: false, ttlMs: 0 };

  async function prepare(): Promise<void> {
    const functions = [...new Set(Object.values(DASHBOARD_ACTIONS).map((a) => a.fn))];
    // no privilege needed: the catalogs; which of the acts' functions this role may not execute
    const { rows } = await db.query<{ role: string; missing: string[] }>(
      `select session_user::text as role,
              array(select f from unnest($1::text[]) f
                     where not exists (select 1 from pg_proc p
                                        where p.pronamespace = to_regnamespace('leasehold') and p.proname = f
                                          and has_function_privilege(p.oid, 'EXECUTE'))
                     order by f) as missing`,
      [functions],
    );
    role = rows[0]!.role;
    const missing = rows[0]!.missing;
    if (missing.length > 0) {
      throw new PermissionDeniedError(
        role,
        'operator',
        `startDashboard(): the dashboard's actions need the operator level, and the database role "${role}" may not execute ${missing.map((f) => `leasehold.${f}`).join(', ')}. ` +
          `Have the schema owner run: leasehold grant ${role} --as operator (or start the dashboard without actions: it is read-only then; see docs/security.md).`,
      );
    }
    // the name prefixes the role is bound to (null: the whole schema), as leasehold.namespace_prefixes() reads them
    const bound = await db.query<{ prefixes: string[] | null }>(
      `select case when r.rolsuper or r.oid = n.nspowner then null
                   else (select array_agg(distinct s.prefix order by s.prefix) from leasehold.namespaces s
                          where s.role = session_user::text
                             or (to_regrole(quote_ident(s.role)) is not null and pg_has_role(session_user, to_regrole(quote_ident(s.role)), 'member')))
              end as prefixes
         from pg_roles r, pg_namespace n where r.rolname = session_user and n.nspname = 'leasehold'`,
    );
    namespaces = bound.rows[0]?.prefixes ?? null;
  }

  function session(req: http.IncomingMessage): Reply {
    checkSameOrigin(req);
    const { person, problem } = auth.identify(req);
    return json(200, {
      actions: true,
      mode: config.mode === 'proxy' ? 'proxy' : 'users',
      user: person?.name ?? null,
      mayAct: person?.mayAct ?? false,
      csrf: person ? tokens.token(person.sessionKey) : null,
      role,
      namespaces,
      problem: problem ?? (person && !person.mayAct ? `${person.name} may look but not act: the name is not in the dashboard's allowed users` : null),
      actionNames: Object.keys(DASHBOARD_ACTIONS),
    });
  }

  async function signIn(req: http.IncomingMessage): Promise<Reply> {
    checkPostOrigin(req, config.origins);
    if (!/^application\/x-www-form-urlencoded\b/i.test(req.headers['content-type'] ?? '')) throw new HttpError(415, 'sign in with the form: application/x-www-form-urlencoded');
    const form = new URLSearchParams(await readBody(req));
    const name = form.get('name') ?? '';
    const password = form.get('password') ?? '';
    try {
      if (name === '' || password === '' || name.length > 400) throw new HttpError(401, 'wrong name or password');
      const created = await auth.signIn(req, name, password);
      return { status: 303, contentType: 'text/plain; charset=utf-8', body: 'signed in\n', headers: { Location: './', 'Set-Cookie': sessionCookie(created, cookie) } };
    } catch (error) {
      if (!(error instanceof HttpError) || error.status >= 500) throw error;
      const page = loginPage(error.message, name.length <= 200 ? name : '');
      return { status: error.status, contentType: 'text/html; charset=utf-8', body: page.html, headers: { ...page.headers, ...error.headers } };
    }
  }

  /** A known person allowed to act, from the page (header, token), or a 401/403 saying what is missing. */
  function actor(req: http.IncomingMessage): Person {
    checkPostOrigin(req, config.origins);
    checkSameOrigin(req);
    const { person, problem } = auth.identify(req);
    if (!person) {
      throw new HttpError(401, problem ?? (config.mode === 'proxy' ? 'not signed in: the dashboard acts only for a person its trusted proxy names' : 'not signed in: sign in to act (the dashboard is read-only until then)'));
    }
    if (!person.mayAct) throw new HttpError(403, `${person.name} may not act on jobs from this dashboard (not among its allowed users)`);
    tokens.check(req, person.sessionKey);
    return person;
  }

  async function route(req: http.IncomingMessage, url: URL): Promise<Reply | undefined> {
    const path = url.pathname;
    const method = req.method ?? '';
    if (path === '/api/session') return method === 'GET' || method === 'HEAD' ? session(req) : undefined;
    if (config.mode === 'password' && (path === '/login' || path === '/logout')) {
      if (path === '/login' && (method === 'GET' || method === 'HEAD')) {
        const page = loginPage();
        return { status: 200, contentType: 'text/html; charset=utf-8', body: page.html, headers: page.headers };
      }
      if (method !== 'POST') throw new HttpError(405, `${path} takes POST`, { Allow: path === '/login' ? 'GET, HEAD, POST' : 'POST' });
      if (path === '/login') return signIn(req);
      const person = actor(req);
      auth.signOut(person);
      return json(200, { signedOut: true }, { 'Set-Cookie': sessionCookie(null, cookie) });
    }
    if (!path.startsWith('/api/actions/')) return undefined;
    if (method !== 'POST') throw new HttpError(405, 'actions take POST', { Allow: 'POST' });
    const name = path.slice('/api/actions/'.length);
    if (!isActionName(name)) throw new HttpError(404, `no action ${JSON.stringify(name.slice(0, 40))}: the dashboard's actions are ${Object.keys(DASHBOARD_ACTIONS).join(', ')}`);
    const person = actor(req);
    if (!/^application\/json\b/i.test(req.headers['content-type'] ?? '')) throw new HttpError(415, 'an action takes a JSON body (Content-Type: application/json)');
    let body: unknown;
    try {
      body = JSON.parse(await readBody(req));
    } catch (error) {
      throw error instanceof HttpError ? error : new HttpError(400, `${name}: the body is not JSON`);
    }
    const reply = await timed(() =>
      takeAction(name, body, {
        db,
        by: person.name,
        sign: (...parts) => tokens.sign(person.sessionKey, ...parts),
        verify: (signature, ...parts) => tokens.verify(signature, person.sessionKey, ...parts),
      }),
    );
    return json(200, { action: name, by: person.name, role, ...reply });
  }

  return { prepare, route };
}

/** The request body as text, at most DASHBOARD_ACTION_LIMITS.bodyBytes (413 beyond). */
function readBody(req: http.IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    // past the limit the rest is read and dropped, so that the 413 reaches the client
    req.on('data', (chunk: Buffer) => {
      size += chunk.length;
      if (size <= DASHBOARD_ACTION_LIMITS.bodyBytes) chunks.push(chunk);
    });
    req.on('end', () => {
      if (size > DASHBOARD_ACTION_LIMITS.bodyBytes) reject(new HttpError(413, `the request body is over ${DASHBOARD_ACTION_LIMITS.bodyBytes} bytes`));
      else resolve(Buffer.concat(chunks).toString('utf8'));
    });
    req.on('error', reject);
  });
}
