// A data job's payload: JSON text of bounded size and nesting. The depth bound keeps every
// reader able to handle it: JSON.stringify recurses once per level and overflowed the stack of
// `leasehold schedule list --json` at a few thousand levels, and PostgreSQL's jsonb parser
// fails (54001) beyond some 12,000. leasehold.define_schedule checks both bounds again.
import { InvalidArgumentError } from '../errors.js';
import { CONTROL_DEFAULTS } from './defaults.js';

/** The payload as the JSON text to store; `where` names the schedule in messages. */
export function payloadJson(payload: unknown, where: string): string {
  const maxDepth = CONTROL_DEFAULTS.payloadMaxDepth;
  let json: string;
  try {
    // before JSON.stringify, which would overflow the stack on a deep value
    if (nestedDeeper(payload, '', maxDepth, [])) {
      throw new InvalidArgumentError(
        'payload',
        `${where}: payload nests arrays and objects more than ${maxDepth} levels deep; at most ${maxDepth} (flatten it, or store the data elsewhere and put its key in the payload).`,
      );
    }
    json = JSON.stringify(payload === undefined ? {} : payload) as string | undefined ?? '';
  } catch (error) {
    // a toJSON or getter that throws, a cycle, a BigInt
    if (error instanceof InvalidArgumentError) throw error;
    throw new InvalidArgumentError('payload', `${where}: payload must be JSON-serialisable (${String(error)}).`);
  }
  if (json === '') throw new InvalidArgumentError('payload', `${where}: payload must be a JSON value (got ${typeof payload}).`);
  const bytes = Buffer.byteLength(json, 'utf8');
  if (bytes > CONTROL_DEFAULTS.payloadMaxBytes) {
    throw new InvalidArgumentError('payload', `${where}: payload is ${bytes} bytes as JSON; at most ${CONTROL_DEFAULTS.payloadMaxBytes} (store large data elsewhere and put its key in the payload).`);
  }
  return json;
}

/**
 * Whether `value`, as JSON.stringify writes it (toJSON applied, boxed primitives as values),
 * has an array or object more than `levels` deep. Recurses at most `levels` + 1 frames, so a
 * value nested 100,000 deep costs no stack; a cycle is left to JSON.stringify to name.
 */
function nestedDeeper(value: unknown, key: string, levels: number, path: object[]): boolean {
  let v = value;
  if ((typeof v === 'object' && v !== null) || typeof v === 'bigint') {
    const toJSON = (v as { toJSON?: unknown }).toJSON;
    if (typeof toJSON === 'function') v = toJSON.call(v, key) as unknown;
  }
  if (typeof v !== 'object' || v === null) return false;
  if (v instanceof Number || v instanceof String || v instanceof Boolean) return false;
  if (path.includes(v)) return false;
  if (levels === 0) return true;
  path.push(v);
  try {
    if (Array.isArray(v)) {
      for (let i = 0; i < v.length; i++) if (nestedDeeper(v[i], String(i), levels - 1, path)) return true;
      return false;
    }
    const record = v as Record<string, unknown>;
    for (const k of Object.keys(record)) if (nestedDeeper(record[k], k, levels - 1, path)) return true;
    return false;
  } finally {
    path.pop();
  }
}
