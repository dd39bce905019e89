// The `actions` option of startDashboard(): who the dashboard knows (a trusted reverse proxy's
// user header, or its own users with passwords), checked once at start with typed errors.
// Without it the dashboard is read-only, as it always was.
import { BlockList, isIP } from 'node:net';
import { InvalidArgumentError } from '../errors.js';
import type { Duration } from '../validate/duration.js';
import { checkOptionKeys, optionKeys } from '../validate/options.js';
import { durationSetting } from '../validate/settings.js';
import { DASHBOARD_ACTION_DEFAULTS, DASHBOARD_ACTION_LIMITS } from './defaults.js';
import { checkUserName, parsePasswordHash, type DashboardUser } from './passwords.js';

/** People named by a reverse proxy in front of the dashboard (oauth2-proxy, nginx with auth_request, …). */
export interface DashboardProxyOptions {
  /**
   * Addresses (`10.0.0.5`, `::1`) or CIDR ranges (`10.0.0.0/24`) of the proxies whose user header
   * is believed. From any other peer the header is ignored (that request is nobody's).
   */
  trustedProxies: string[];
  /** The request header that names the person. @default 'x-forwarded-user' */
  userHeader?: string | undefined;
  /** When given, only these names may act; others the proxy names may only look. @default every name the proxy passes */
  allowedUsers?: string[] | undefined;
}

/** Who may act on jobs from the dashboard; exactly one of `proxy` and `users`. */
export interface DashboardActionsOptions {
  /** People named by a trusted reverse proxy's header. */
  proxy?: DashboardProxyOptions | undefined;
  /** People who sign in to the dashboard with a password (`leasehold dashboard --users-file`). */
  users?: DashboardUser[] | undefined;
  /** How long a sign-in lasts (with `users`): milliseconds or a string such as '8h' (1 min to 7 d). @default '8h' */
  sessionTtl?: Duration | undefined;
  /** Mark the session cookie `Secure`: set it when the browser reaches the dashboard over HTTPS. @default false */
  secureCookie?: boolean | undefined;
  /**
   * Origins the page is served from when a proxy rewrites the Host header, such as
   * 'https://jobs.example.com'. A POST's Origin must name the request's own host or one of these.
   */
  origins?: string[] | undefined;
}

export type ResolvedActions =
  | { mode: 'proxy'; trusted: BlockList; userHeader: string; allowedUsers: ReadonlySet<string> | null; origins: ReadonlySet<string> }
  | { mode: 'password'; users: ReadonlyMap<string, ReturnType<typeof parsePasswordHash>>; sessionTtlMs: number; secureCookie: boolean; origins: ReadonlySet<string> };

const ACTION_KEYS = optionKeys<DashboardActionsOptions>({ proxy: true, users: true, sessionTtl: true, secureCookie: true, origins: true });
const PROXY_KEYS = optionKeys<DashboardProxyOptions>({ trustedProxies: true, userHeader: true, allowedUsers: true });
const USER_KEYS = optionKeys<DashboardUser>({ name: true, passwordHash: true });
const HEADER = /^[a-z0-9!#$%&'*+.^_`|~-]{1,100}$/;
// headers a proxy never uses to name a person, and which would make anyone someone
const NOT_A_USER_HEADER = new Set(['host', 'cookie', 'origin', 'referer', 'user-agent', 'content-type', 'x-leasehold-dashboard', 'x-leasehold-csrf']);

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function stringList(value: unknown, what: string): string[] {
  if (!Array.isArray(value) || value.some((v) => typeof v !== 'string')) throw new InvalidArgumentError(what, `startDashboard(): ${what} must be an array of strings.`);
  return value as string[];
}

/** Adds an address or CIDR range to the list, or throws naming it. */
function addProxy(list: BlockList, entry: string): void {
  const [address = '', bits, extra] = entry.trim().split('/');
  const family = isIP(address);
  const max = family === 4 ? 32 : 128;
  const prefix = bits === undefined ? max : /^\d{1,3}$/.test(bits) ? Number(bits) : NaN;
  if (family === 0 || extra !== undefined || !(prefix >= 0 && prefix <= max)) {
    throw new InvalidArgumentError('trustedProxies', `startDashboard(): trustedProxies: ${JSON.stringify(entry)} is not an IP address or CIDR range (such as '10.0.0.5' or '10.0.0.0/24').`);
  }
  if (prefix === 0) throw new InvalidArgumentError('trustedProxies', `startDashboard(): trustedProxies: ${JSON.stringify(entry)} trusts every address; name the proxies.`);
  const type = family === 4 ? 'ipv4' : 'ipv6';
  if (prefix === max) list.addAddress(address, type);
  else list.addSubnet(address, prefix, type);
}

function origins(value: unknown): Set<string> {
  if (value === undefined) return new Set();
  return new Set(
    stringList(value, 'origins').map((text) => {
      let url: URL | undefined;
      try {
        url = new URL(text);
      } catch {
        url = undefined;
      }
      if (!url || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.origin !== text.replace(/\/$/, '').toLowerCase()) {
        throw new InvalidArgumentError('origins', `startDashboard(): origins: ${JSON.stringify(text)} is not an origin such as 'https://jobs.example.com' (scheme, host and port only).`);
      }
      return url.origin;
    }),
  );
}

function resolveProxy(proxy: unknown, shared: { origins: Set<string> }): ResolvedActions {
  if (!isObject(proxy)) throw new InvalidArgumentError('proxy', 'startDashboard(): actions.proxy must be an object with trustedProxies.');
  checkOptionKeys(proxy, PROXY_KEYS, 'startDashboard() actions.proxy');
  const entries = stringList(proxy.trustedProxies ?? [], 'trustedProxies');
  if (entries.length === 0) throw new InvalidArgumentError('trustedProxies', 'startDashboard(): actions.proxy needs trustedProxies: the addresses of the proxies whose user header is believed.');
  const trusted = new BlockList();
  for (const entry of entries) addProxy(trusted, entry);
  const header = proxy.userHeader ?? DASHBOARD_ACTION_DEFAULTS.userHeader.default;
  if (typeof header !== 'string' || !HEADER.test(header.toLowerCase()) || NOT_A_USER_HEADER.has(header.toLowerCase())) {
    throw new InvalidArgumentError('userHeader', `startDashboard(): userHeader must be a request header name such as 'x-forwarded-user' (got ${JSON.stringify(header)}).`);
  }
  const allowed = proxy.allowedUsers === undefined ? null : new Set(stringList(proxy.allowedUsers, 'allowedUsers').map((name) => checkUserName(name, 'startDashboard(): allowedUsers')));
  return { mode: 'proxy', trusted, userHeader: header.toLowerCase(), allowedUsers: allowed, origins: shared.origins };
}

function resolveUsers(list: unknown, options: Record<string, unknown>, shared: { origins: Set<string> }): ResolvedActions {
  if (!Array.isArray(list) || list.length === 0) throw new InvalidArgumentError('users', 'startDashboard(): actions.users must be a non-empty array of { name, passwordHash }.');
  if (list.length > DASHBOARD_ACTION_LIMITS.users) throw new InvalidArgumentError('users', `startDashboard(): at most ${DASHBOARD_ACTION_LIMITS.users} users.`);
  const users = new Map<string, ReturnType<typeof parsePasswordHash>>();
  list.forEach((user: unknown, i) => {
    const where = `startDashboard(): actions.users[${i}]`;
    if (!isObject(user)) throw new InvalidArgumentError('users', `${where} must be { name, passwordHash }.`);
    checkOptionKeys(user, USER_KEYS, where);
    const name = checkUserName(user.name, where);
    if (users.has(name)) throw new InvalidArgumentError('users', `${where}: the user ${JSON.stringify(name)} is listed twice.`);
    users.set(name, parsePasswordHash(user.passwordHash, where));
  });
  const secure = options.secureCookie ?? DASHBOARD_ACTION_DEFAULTS.secureCookie.default;
  if (typeof secure !== 'boolean') throw new InvalidArgumentError('secureCookie', `startDashboard(): secureCookie must be true or false.`);
  return {
    mode: 'password',
    users,
    sessionTtlMs: durationSetting(options.sessionTtl as Duration | undefined, DASHBOARD_ACTION_DEFAULTS.sessionTtl, 'sessionTtl'),
    secureCookie: secure,
    origins: shared.origins,
  };
}

/** The checked `actions` option, or null when the dashboard is read-only. */
export function resolveActions(options: DashboardActionsOptions | undefined): ResolvedActions | null {
  if (options === undefined) return null;
  if (!isObject(options)) throw new InvalidArgumentError('actions', 'startDashboard(): actions must be an object with proxy or users.');
  checkOptionKeys(options, ACTION_KEYS, 'startDashboard() actions');
  const shared = { origins: origins(options.origins) };
  if (options.proxy !== undefined && options.users !== undefined) {
    throw new InvalidArgumentError('actions', 'startDashboard(): actions takes proxy or users, not both: one way of knowing who acts.');
  }
  if (options.proxy !== undefined) {
    for (const key of ['sessionTtl', 'secureCookie'] as const) {
      if (options[key] !== undefined) throw new InvalidArgumentError(key, `startDashboard(): actions.${key} applies to users who sign in (users), not to proxy.`);
    }
    return resolveProxy(options.proxy, shared);
  }
  if (options.users !== undefined) return resolveUsers(options.users, options as Record<string, unknown>, shared);
  throw new InvalidArgumentError('actions', 'startDashboard(): actions needs proxy (a trusted reverse proxy names the person) or users (people sign in with a password).');
}
