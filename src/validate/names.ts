// Lease names and holder identities. The same rules are enforced in SQL (leasehold.check_name,
// leasehold.check_characters), so a client in another language gets the same answer; checking
// here first gives a clearer message and saves a round trip. Lengths and positions count code
// points, as PostgreSQL's char_length does: a name of 200 emoji is 200 characters everywhere.
import { InvalidArgumentError } from '../errors.js';

export const MAX_NAME_LENGTH = 200;
export const MAX_HOLDER_LENGTH = 200;

// Characters that hide or disguise text in logs, terminals and pages: C0/C1 controls and line
// separators, bidirectional controls, and invisible format characters (zero-width space and
// joiners, BOM, fillers, tags). Keep in step with leasehold.bad_characters in sql/baseline/1_leases.sql.
const UNSAFE =
  /[\u0000-\u001f\u007f-\u009f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufeff\uffa0\ufff9-\ufffb\u{e0000}-\u{e007f}]/u;
const BIDI = /[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/u;
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u2028\u2029]/u;

/** Describes the first unsafe character of `value` ("U+202E, a bidirectional control, at position 7"), or null. */
export function unsafeCharacter(value: string): string | null {
  const match = UNSAFE.exec(value);
  if (!match) return null;
  const char = match[0];
  const code = (char.codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, '0');
  const kind = BIDI.test(char) ? 'a bidirectional control' : CONTROL.test(char) ? 'a control character' : 'an invisible character';
  return `U+${code}, ${kind}, at position ${codePoints(value.slice(0, match.index))}`;
}

/** Length in code points (not UTF-16 units), as for…of counts them (a lone surrogate is one). */
export function codePoints(value: string): number {
  // by index, not for…of: a string iterator per call is garbage when 10,000 jobs are defined
  let n = value.length;
  for (let i = 0; i < value.length - 1; i++) {
    const unit = value.charCodeAt(i);
    if (unit >= 0xd800 && unit <= 0xdbff) {
      const next = value.charCodeAt(i + 1);
      if (next >= 0xdc00 && next <= 0xdfff) {
        n--;
        i++;
      }
    }
  }
  return n;
}

function checkText(value: unknown, what: string, maxLength: number): string {
  if (typeof value !== 'string') {
    throw new InvalidArgumentError(what, `${what} must be a string (got ${value === null ? 'null' : typeof value}).`);
  }
  if (value.length === 0) {
    throw new InvalidArgumentError(what, `${what} must not be empty: give the job a name such as 'nightly-report'.`);
  }
  const length = codePoints(value);
  if (length > maxLength) {
    throw new InvalidArgumentError(
      what,
      `${what} must be 1–${maxLength} characters (got ${length}): shorten it, e.g. '${[...value].slice(0, 24).join('')}…'.`,
    );
  }
  const bad = unsafeCharacter(value);
  if (bad) {
    throw new InvalidArgumentError(what, `${what} must not contain control, bidirectional or invisible characters (found ${bad}).`);
  }
  return value;
}

export function checkLeaseName(name: unknown): string {
  return checkText(name, 'lease name', MAX_NAME_LENGTH);
}

export function checkHolder(holder: unknown): string {
  return checkText(holder, 'holder', MAX_HOLDER_LENGTH);
}

/** Who does an operator's act (forceRelease's `by`): checked as a holder is, and named as `what`. */
export function checkActor(actor: unknown, what: string): string {
  if (actor === '') throw new InvalidArgumentError(what, `${what} must not be empty: name who does it, e.g. 'alice'.`);
  return checkText(actor, what, MAX_HOLDER_LENGTH);
}

// Unicode White_Space that checkText lets through (the rest are controls it refuses). Keep in
// step with leasehold.define_schedule in sql/baseline/4_control.sql.
const EDGE_SPACE = /^[\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]|[\u0020\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000]$/u;

/**
 * A schedule defined as data: a lease name without whitespace at either end, which lists and
 * logs do not show (' nightly' would pass for 'nightly'; '   ' for no name). Other lease names
 * keep the rules above: workers already run code jobs and leases under such names.
 */
export function checkScheduleName(name: unknown): string {
  const checked = checkLeaseName(name);
  if (EDGE_SPACE.test(checked)) {
    throw new InvalidArgumentError('lease name', `lease name must not begin or end with whitespace (got ${JSON.stringify(checked)}): trim it.`);
  }
  return checked;
}
