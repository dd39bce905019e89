// Lease names and holder identities. The same rules are enforced in SQL (leasehold.check_name),
// so a client in another language gets the same answer; checking here first gives a clearer
// message and saves a round trip.
import { InvalidArgumentError } from '../errors.js';

export const MAX_NAME_LENGTH = 200;
export const MAX_HOLDER_LENGTH = 200;

// C0 and C1 control characters, and DEL: invisible in logs and terminals.
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

function checkText(value: unknown, what: string, maxLength: number): string {
  if (typeof value !== 'string') {
    throw new InvalidArgumentError(what, `${what} must be a string (got ${value === null ? 'null' : typeof value}).`);
  }
  if (value.length === 0) {
    throw new InvalidArgumentError(what, `${what} must not be empty: give the job a name such as 'nightly-report'.`);
  }
  if (value.length > maxLength) {
    throw new InvalidArgumentError(
      what,
      `${what} must be 1–${maxLength} characters (got ${value.length}): shorten it, e.g. '${value.slice(0, 24)}…'.`,
    );
  }
  const control = CONTROL.exec(value);
  if (control) {
    const code = control[0].charCodeAt(0).toString(16).padStart(4, '0');
    throw new InvalidArgumentError(
      what,
      `${what} must not contain control characters (found U+${code} at position ${control.index}).`,
    );
  }
  return value;
}

export function checkLeaseName(name: unknown): string {
  return checkText(name, 'lease name', MAX_NAME_LENGTH);
}

export function checkHolder(holder: unknown): string {
  return checkText(holder, 'holder', MAX_HOLDER_LENGTH);
}
