// Requests to a dashboard as its page, a proxy or another site would make them, for the tests
// of its actions (test/observe/dashboard-actions-*.test.ts): raw node:http, since fetch will not
// set Origin, Sec-Fetch-Site or Host, nor pick the local address.
import http from 'node:http';
import { expect } from 'vitest';
import type { Dashboard } from '../../src/dashboard/server.js';

export interface Reply {
  status: number;
  headers: http.IncomingHttpHeaders;
  body: string;
  json: Record<string, unknown>;
}

export function request(d: Dashboard, path: string, options: { method?: string; headers?: Record<string, string>; body?: string; localAddress?: string | undefined } = {}): Promise<Reply> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${d.url}${path}`, { method: options.method ?? 'GET', headers: options.headers, ...(options.localAddress ? { localAddress: options.localAddress } : {}) }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (body += chunk));
      res.on('end', () => {
        let json: Record<string, unknown> = {};
        try {
          json = JSON.parse(body) as Record<string, unknown>;
        } catch {
          json = {};
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body, json });
      });
    });
    req.on('error', reject);
    req.end(options.body);
  });
}

export const origin = (d: Dashboard) => d.url.replace(/\/$/, '');
export const PAGE = { 'x-leasehold-dashboard': '1' };

/** The session as the page reads it (its token), for requests with `headers`. */
export async function session(d: Dashboard, headers: Record<string, string> = {}, localAddress?: string): Promise<Record<string, unknown>> {
  return (await request(d, 'api/session', { headers: { ...PAGE, ...headers }, localAddress })).json;
}

/** A POST as the page makes it: same origin, the page's header, JSON, the token. */
export function act(d: Dashboard, action: string, body: unknown, headers: Record<string, string> = {}, localAddress?: string): Promise<Reply> {
  return request(d, `api/actions/${action}`, {
    method: 'POST',
    headers: { ...PAGE, origin: origin(d), 'sec-fetch-site': 'same-origin', 'content-type': 'application/json', ...headers },
    body: JSON.stringify(body),
    localAddress,
  });
}

export async function signIn(d: Dashboard, name: string, password: string): Promise<{ cookie: string; csrf: string }> {
  const res = await request(d, 'login', {
    method: 'POST',
    headers: { origin: origin(d), 'sec-fetch-site': 'same-origin', 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ name, password }).toString(),
  });
  expect(res.status, res.body).toBe(303);
  const cookie = String(res.headers['set-cookie']?.[0] ?? '').split(';')[0]!;
  const s = await session(d, { cookie });
  return { cookie, csrf: String(s.csrf) };
}
