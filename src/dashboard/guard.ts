// What keeps other web pages and bad input from turning the dashboard into a load generator:
// a same-origin signal on /api/*, strict query parameters (400 with a plain message, never a
// database message), and a cap on database work in flight (503 with Retry-After beyond it).
import type http from 'node:http';

export class HttpError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
  }
}

/** The header the page sends with every API request. */
export const API_HEADER = 'x-leasehold-dashboard';

/**
 * A cross-site page can make the browser send simple GETs (img, no-cors fetch) but not custom
 * headers without a CORS preflight, which this server never grants. Sec-Fetch-Site, when the
 * browser sends it, must also say the request comes from the dashboard's own origin.
 */
export function checkSameOrigin(req: http.IncomingMessage): void {
  const site = req.headers['sec-fetch-site'];
  if (site !== undefined && site !== 'same-origin' && site !== 'none') {
    throw new HttpError(403, `cross-site request refused (Sec-Fetch-Site: ${String(site).slice(0, 40)}): the API answers only the dashboard's own page`);
  }
  if (req.headers[API_HEADER] !== '1') {
    throw new HttpError(403, `the API answers only the dashboard's own page: send the header "${API_HEADER}: 1"`);
  }
}

const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;
const MAX_NAME_CODE_POINTS = 200;

/** A job name from the query string: the same limits as lease names, checked before any query. */
export function jobParam(params: URLSearchParams, key: string): string | undefined {
  const value = single(params, key);
  return value === undefined || value === '' ? undefined : checkJobName(value, key);
}

/** Every value of a repeatable job parameter, at most `max` of them. */
export function jobListParam(params: URLSearchParams, key: string, max: number): string[] {
  const values = params.getAll(key);
  if (values.length > max) throw new HttpError(400, `at most ${max} ${key} parameters`);
  return [...new Set(values.map((value) => checkJobName(value, key)))];
}

function checkJobName(value: string, key: string): string {
  if (value.length > MAX_NAME_CODE_POINTS * 2 || [...value].length > MAX_NAME_CODE_POINTS) {
    throw new HttpError(400, `${key} must be a job name of at most ${MAX_NAME_CODE_POINTS} characters`);
  }
  if (CONTROL.test(value)) throw new HttpError(400, `${key} must not contain control characters`);
  return value;
}

/** A number parameter within [min, max]; `integer` refuses fractions. */
export function numberParam(params: URLSearchParams, key: string, fallback: number, min: number, max: number, integer = false): number {
  const raw = single(params, key);
  if (raw === undefined || raw === '') return fallback;
  const value = /^\s*[+-]?(\d+\.?\d*|\.\d+)\s*$/.test(raw) ? Number(raw) : NaN;
  if (!(Number.isFinite(value) && value >= min && value <= max) || (integer && !Number.isInteger(value))) {
    throw new HttpError(400, `${key} must be ${integer ? 'an integer' : 'a number'} from ${min} to ${max} (got ${JSON.stringify(raw.slice(0, 40))})`);
  }
  return value;
}

/** One of `allowed`, or the fallback when absent. */
export function choiceParam<T extends string>(params: URLSearchParams, key: string, allowed: readonly T[], fallback: T): T {
  const raw = single(params, key);
  if (raw === undefined || raw === '') return fallback;
  if (!(allowed as readonly string[]).includes(raw)) throw new HttpError(400, `${key} must be one of ${allowed.join(', ')}`);
  return raw as T;
}

/** A free-text search term: printable, short. */
export function searchParam(params: URLSearchParams, key: string): string | undefined {
  const raw = single(params, key);
  if (raw === undefined || raw === '') return undefined;
  if ([...raw].length > 100 || raw.length > 200) throw new HttpError(400, `${key} must be at most 100 characters`);
  if (CONTROL.test(raw)) throw new HttpError(400, `${key} must not contain control characters`);
  return raw;
}

/** Refuses parameters the endpoint does not know, and repeated ones. */
export function onlyParams(params: URLSearchParams, known: readonly string[]): void {
  for (const key of params.keys()) {
    if (!known.includes(key)) throw new HttpError(400, `unknown parameter ${JSON.stringify(key.slice(0, 40))}: this endpoint takes ${known.join(', ') || 'none'}`);
  }
}

function single(params: URLSearchParams, key: string): string | undefined {
  const all = params.getAll(key);
  if (all.length > 1) throw new HttpError(400, `${key} given ${all.length} times`);
  return all[0];
}

/**
 * At most `max` database-backed requests at once; the rest are answered 503 at once rather
 * than queued, so a burst cannot pile up connections or hold sockets open.
 */
export class Limiter {
  private active = 0;
  constructor(private readonly max: number) {}

  async run<T>(work: () => Promise<T>): Promise<T> {
    if (this.active >= this.max) throw new HttpError(503, 'the dashboard is busy: try again in a moment', { 'Retry-After': '1' });
    this.active++;
    try {
      return await work();
    } finally {
      this.active--;
    }
  }
}
