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
export function integerArrayLiteral(values: ReadonlyArray<number | null>): string {
  if (!values.includes(null)) return `{${values.join(',')}}`;
  return `{${values.map((value) => (value === null ? 'NULL' : String(value))).join(',')}}`;
}
