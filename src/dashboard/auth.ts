// Who is asking: the person a trusted reverse proxy names in its user header (ignored from any
// other peer), or the person signed in with a dashboard-issued password (a session cookie).
// Sign-ins are throttled per name and per client address, and password checks are capped.
import type http from 'node:http';
import { checkHolder } from '../validate/names.js';
import type { ResolvedActions } from './action-options.js';
import { DASHBOARD_ACTION_LIMITS } from './defaults.js';
import { HttpError } from './guard.js';
import { hashPassword, parsePasswordHash, verifyPassword } from './passwords.js';
import { SessionStore, type Session } from './sessions.js';

export interface Person {
  /** Recorded as the actor of each act. */
  readonly name: string;
  /** What the CSRF token is bound to: the session id, or the proxy-named person. */
  readonly sessionKey: string;
  /** Whether this person may act (a proxy's allowedUsers); everyone signed in with a password may. */
  readonly mayAct: boolean;
  readonly session: Session | null;
}

export interface Identity {
  person: Person | null;
  /** Why a request names nobody although it tried (a bad header from the proxy), for the page. */
  problem: string | null;
}

/** The peer's address, IPv4-mapped IPv6 (::ffff:10.0.0.5) as IPv4. */
export function peerAddress(req: http.IncomingMessage): { address: string; type: 'ipv4' | 'ipv6' } | null {
  const raw = req.socket.remoteAddress;
  if (!raw) return null;
  const mapped = /^::ffff:(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(raw);
  if (mapped) return { address: mapped[1]!, type: 'ipv4' };
  return { address: raw, type: raw.includes(':') ? 'ipv6' : 'ipv4' };
}

export class Authenticator {
  readonly sessions: SessionStore | null;
  readonly #throttle = new FailureThrottle();
  #checking = 0;
  #decoy: Promise<ReturnType<typeof parsePasswordHash>> | undefined;

  constructor(private readonly config: ResolvedActions) {
    this.sessions = config.mode === 'password' ? new SessionStore(config.sessionTtlMs) : null;
  }

  identify(req: http.IncomingMessage): Identity {
    const config = this.config;
    if (config.mode === 'password') {
      const session = this.sessions!.fromRequest(req);
      return { person: session ? { name: session.user, sessionKey: `session:${session.id}`, mayAct: config.users.has(session.user), session } : null, problem: null };
    }
    const values = req.headersDistinct[config.userHeader];
    if (!values) return { person: null, problem: null };
    const peer = peerAddress(req);
    // the header is believed only from a listed proxy: from anyone else it names nobody
    if (!peer || !config.trusted.check(peer.address, peer.type)) return { person: null, problem: null };
    if (values.length !== 1) return { person: null, problem: `the proxy sent ${config.userHeader} ${values.length} times` };
    let name: string;
    try {
      name = checkHolder(values[0]!.trim());
    } catch (error) {
      return { person: null, problem: `the proxy's ${config.userHeader} is not a usable name: ${(error as Error).message.replace(/^holder /, '')}` };
    }
    return { person: { name, sessionKey: `proxy:${name}`, mayAct: config.allowedUsers === null || config.allowedUsers.has(name), session: null }, problem: null };
  }

  /** Checks a name and password; a new session, or an HttpError (401 for either wrong, 429 when throttled, 503 when busy). */
  async signIn(req: http.IncomingMessage, name: string, password: string): Promise<Session> {
    const config = this.config;
    if (config.mode !== 'password') throw new HttpError(404, 'this dashboard has no sign-in: people are named by its proxy');
    const peer = peerAddress(req)?.address ?? 'unknown';
    const keys = [`name:${name}`, `peer:${peer}`];
    const wait = this.#throttle.blockedFor(keys);
    if (wait > 0) throw new HttpError(429, `too many failed sign-ins: try again in ${Math.ceil(wait / 60_000)} min`, { 'Retry-After': String(Math.ceil(wait / 1000)) });
    if (this.#checking >= DASHBOARD_ACTION_LIMITS.passwordChecks) throw new HttpError(503, 'the dashboard is busy checking passwords: try again in a moment', { 'Retry-After': '1' });
    this.#checking++;
    let ok: boolean;
    try {
      const stored = config.users.get(name);
      // an unknown name costs the same as a wrong password: the answer's timing does not tell names
      ok = await verifyPassword(password, stored ?? (await this.#decoyHash()));
      ok &&= stored !== undefined;
    } finally {
      this.#checking--;
    }
    if (!ok) {
      this.#throttle.fail(keys);
      throw new HttpError(401, 'wrong name or password');
    }
    this.#throttle.clear(`name:${name}`);
    return this.sessions!.create(name);
  }

  signOut(person: Person): void {
    if (person.session) this.sessions?.delete(person.session.id);
  }

  #decoyHash(): Promise<ReturnType<typeof parsePasswordHash>> {
    this.#decoy ??= hashPassword('not the password of anyone').then((hash) => parsePasswordHash(hash, 'decoy'));
    return this.#decoy;
  }
}

/** Failed sign-ins per key within a window; a key with too many is refused until the oldest ages out. */
class FailureThrottle {
  readonly #failures = new Map<string, number[]>();

  blockedFor(keys: string[]): number {
    const now = Date.now();
    let wait = 0;
    for (const key of keys) {
      const times = this.#recent(key, now);
      if (times.length >= DASHBOARD_ACTION_LIMITS.failures) wait = Math.max(wait, times[0]! + DASHBOARD_ACTION_LIMITS.failureWindowMs - now);
    }
    return wait;
  }

  fail(keys: string[]): void {
    const now = Date.now();
    for (const key of keys) {
      const times = this.#recent(key, now);
      times.push(now);
      this.#failures.delete(key);
      this.#failures.set(key, times);
    }
    // bounded: the keys failed longest ago go first
    while (this.#failures.size > DASHBOARD_ACTION_LIMITS.sessions) this.#failures.delete(this.#failures.keys().next().value as string);
  }

  clear(key: string): void {
    this.#failures.delete(key);
  }

  #recent(key: string, now: number): number[] {
    return (this.#failures.get(key) ?? []).filter((t) => t > now - DASHBOARD_ACTION_LIMITS.failureWindowMs);
  }
}
