// PostgreSQL array literals ('{"a","b",NULL}') for statements that send thousands of values at
// once. pg encodes a JS array by appending element after element to one string; the chain of
// partial strings stays alive until it is sent, so 10,000 job names (register_jobs takes seven
// such arrays) left about 17 MiB of garbage in the old generation. A join builds each literal
// flat. The quoting is pg's own (lib/utils.js arrayString): every element in double quotes,
// backslash and double quote escaped with a backslash, null as an unquoted NULL.

const NEEDS_ESCAPE = /["\\]/;

/** The literal of a text[] value. */
export function textArrayLiteral(values: ReadonlyArray<string | null>): string {
  // usual case, no element to escape and no null: one join, no string per element
  if (values.every((value) => value !== null && !NEEDS_ESCAPE.test(value))) return values.length === 0 ? '{}' : `{"${values.join('","')}"}`;
  return `{${values.map((value) => (value === null ? 'NULL' : `"${NEEDS_ESCAPE.test(value) ? value.replace(/[\\"]/g, '\\$&') : value}"`)).join(',')}}`;
}

/** The literal of an integer[] or bigint[] value (whole numbers, as pg writes them). */
export function numberArrayLiteral(values: ReadonlyArray<number | null>): string {
  if (!values.includes(null)) return `{${values.join(',')}}`;
  return `{${values.map((value) => (value === null ? 'NULL' : String(value))).join(',')}}`;
}

/**
 * The literal of a timestamptz[] value: ISO 8601 in UTC, which the server reads whatever its
 * TimeZone. The slots of one tick are mostly the same instant, so each distinct instant is
 * formatted once. A year outside 1–9999 (toISOString writes it as "+010000" or "-000001", which
 * the server does not read) returns the Dates themselves, for pg to encode as it always has.
 */
export function timestampArrayLiteral(values: readonly Date[]): string | readonly Date[] {
  const parts: string[] = new Array<string>(values.length);
  let lastMs = Number.NaN;
  let last = '';
  for (let i = 0; i < values.length; i++) {
    const ms = (values[i] as Date).getTime();
    if (ms !== lastMs) {
      if (!(ms >= MIN_ISO_MS && ms <= MAX_ISO_MS)) return values; // also NaN: pg's own error
      lastMs = ms;
      last = (values[i] as Date).toISOString();
    }
    parts[i] = last;
  }
  return `{${parts.join(',')}}`;
}

const MIN_ISO_MS = Date.parse('0001-01-01T00:00:00.000Z');
const MAX_ISO_MS = Date.parse('9999-12-31T23:59:59.999Z');
