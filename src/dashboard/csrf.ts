// What keeps another web page from acting through an operator's browser: every POST must come
// from the dashboard's own origin (Origin names its host, Sec-Fetch-Site, when sent, says
// same-origin) and, once signed in, carry the session's token in a header. The token is an
// HMAC of the session under a key drawn at start: the page reads it from /api/session (a
// same-origin JSON read no other site can make), and it dies with the session or the process.
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type http from 'node:http';
import { HttpError } from './guard.js';

export const CSRF_HEADER = 'x-leasehold-csrf';

export class CsrfTokens {
  readonly #key = randomBytes(32);

  /** The token of one session (a signed-in session id, or a proxy-named person). */
  token(sessionKey: string): string {
    return this.#mac('csrf', sessionKey);
  }

  /** Refuses (403) a request without the session's token. */
  check(req: http.IncomingMessage, sessionKey: string): void {
    const sent = req.headers[CSRF_HEADER];
    if (typeof sent !== 'string' || !equal(sent, this.token(sessionKey))) {
      throw new HttpError(403, `refused: the request lacks this session's ${CSRF_HEADER} token (reload the page; another site cannot act through it)`);
    }
  }

  /** A signature of `parts` for this session: binds a confirmation (a backfill's dry run) to what was shown. */
  sign(sessionKey: string, ...parts: string[]): string {
    return this.#mac('confirm', sessionKey, ...parts);
  }

  verify(signature: unknown, sessionKey: string, ...parts: string[]): boolean {
    return typeof signature === 'string' && equal(signature, this.sign(sessionKey, ...parts));
  }

  #mac(purpose: string, ...parts: string[]): string {
    const mac = createHmac('sha256', this.#key).update(purpose);
    // length-prefixed, so that no two lists of parts sign the same bytes
    for (const part of parts) mac.update(`\0${Buffer.byteLength(part)}:${part}`);
    return mac.digest('base64url');
  }
}

function equal(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/**
 * Refuses (403) a POST that does not come from the dashboard's own page: its Origin must be
 * present and name the request's Host (or one of `origins`), and Sec-Fetch-Site, which browsers
 * send and pages cannot forge, must say same-origin when present.
 */
export function checkPostOrigin(req: http.IncomingMessage, origins: ReadonlySet<string>): void {
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin') {
    throw new HttpError(403, `cross-site request refused (Sec-Fetch-Site: ${String(site).slice(0, 40)}): actions are taken from the dashboard's own page`);
  }
  const origin = req.headers.origin;
  if (typeof origin !== 'string' || origin === 'null') {
    throw new HttpError(403, 'refused: a POST to the dashboard must carry an Origin header naming the dashboard (browsers send it)');
  }
  let url: URL | undefined;
  try {
    url = new URL(origin);
  } catch {
    url = undefined;
  }
  const host = req.headers.host?.toLowerCase();
  if (!url || !((host !== undefined && url.host === host && (url.protocol === 'http:' || url.protocol === 'https:')) || origins.has(url.origin))) {
    throw new HttpError(403, `cross-site request refused: Origin ${JSON.stringify(origin.slice(0, 100))} is not this dashboard's${origins.size ? '' : ' (a proxy that rewrites Host needs the page\'s origin in actions.origins)'}`);
  }
}
