// Sign-ins of dashboard-issued credentials: a random session id in an HttpOnly SameSite=Strict
// cookie, the session itself in this process's memory (a restart signs everyone out), with an
// absolute expiry and a cap on how many are kept.
import { randomBytes } from 'node:crypto';
import type http from 'node:http';
import { DASHBOARD_ACTION_LIMITS } from './defaults.js';

export const SESSION_COOKIE = 'leasehold_session';
const ID = /^[A-Za-z0-9_-]{43}$/;

export interface Session {
  readonly id: string;
  readonly user: string;
  readonly expiresAt: number;
}

export class SessionStore {
  // insertion order is creation order: the first entry is the oldest
  readonly #sessions = new Map<string, Session>();

  constructor(
    private readonly ttlMs: number,
    private readonly max: number = DASHBOARD_ACTION_LIMITS.sessions,
  ) {}

  /** A new session for `user` (a new id on every sign-in: no session fixation). */
  create(user: string): Session {
    this.#sweep();
    while (this.#sessions.size >= this.max) this.#sessions.delete(this.#sessions.keys().next().value as string);
    const session = { id: randomBytes(32).toString('base64url'), user, expiresAt: Date.now() + this.ttlMs };
    this.#sessions.set(session.id, session);
    return session;
  }

  /** The live session of the request's cookie, or null. */
  fromRequest(req: http.IncomingMessage): Session | null {
    const id = cookieValue(req.headers.cookie, SESSION_COOKIE);
    if (!id || !ID.test(id)) return null;
    const session = this.#sessions.get(id);
    if (!session) return null;
    if (session.expiresAt <= Date.now()) {
      this.#sessions.delete(id);
      return null;
    }
    return session;
  }

  delete(id: string): void {
    this.#sessions.delete(id);
  }

  #sweep(): void {
    const now = Date.now();
    for (const [id, session] of this.#sessions) if (session.expiresAt <= now) this.#sessions.delete(id);
  }
}

/**
 * The Set-Cookie value. No Path: the cookie's path is the directory of the sign-in URL, so a
 * dashboard served under a proxy's prefix (/jobs/) does not send it to the rest of the host.
 */
export function sessionCookie(session: Session | null, options: { secure: boolean; ttlMs: number }): string {
  const value = session ? session.id : '';
  const maxAge = session ? Math.floor(options.ttlMs / 1000) : 0;
  return `${SESSION_COOKIE}=${value}; Max-Age=${maxAge}; HttpOnly; SameSite=Strict${options.secure ? '; Secure' : ''}`;
}

function cookieValue(header: string | undefined, name: string): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const eq = part.indexOf('=');
    if (eq > 0 && part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return undefined;
}
