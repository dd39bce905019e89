// Unknown option keys are refused, not ignored: `tz: 'Europe/Berlin'` silently meaning UTC, or
// `overlapp: 'allow'` silently meaning 'skip', is worse than an error. One checker for every
// options object the library takes (jobs, createLeasehold, acquire, run, startWorker).
import { InvalidArgumentError } from '../errors.js';

/** Misspellings a Levenshtein distance does not catch: other libraries' names for the same thing. */
const ALIASES: Record<string, string> = {
  tz: 'timezone',
  timeZone: 'timezone',
  zone: 'timezone',
  schedule: 'cron',
  interval: 'every',
  run: 'handler',
  fn: 'handler',
  grace: 'shutdownGrace',
  url: 'connectionString',
  databaseUrl: 'connectionString',
  connection: 'connectionString',
};

/**
 * The keys a typed options object must have: listing them as a Record makes the compiler
 * complain when an option is added to the interface but not here.
 */
export function optionKeys<T extends object>(keys: Record<keyof T, true>): readonly string[] {
  return Object.keys(keys);
}

/** True when `options` has a key that is not in `valid` (checkOptionKeys then throws). */
export function hasUnknownKey(options: object, valid: readonly string[]): boolean {
  for (const key in options) {
    if (Object.hasOwn(options, key) && !valid.includes(key)) return true;
  }
  return false;
}

/** Throws InvalidArgumentError naming the first unknown key of `options`, the closest valid one and all valid ones. */
export function checkOptionKeys(options: unknown, valid: readonly string[], where: string): void {
  if (options === null || typeof options !== 'object') return;
  for (const key of Object.keys(options)) {
    if (valid.includes(key)) continue;
    const suggestion = closest(key, valid);
    throw new InvalidArgumentError(
      key,
      `${where}: unknown option '${key}'${suggestion ? ` (did you mean '${suggestion}'?)` : ''}; valid options are ${valid.join(', ')}.`,
    );
  }
}

function closest(key: string, valid: readonly string[]): string | null {
  const alias = ALIASES[key];
  if (alias && valid.includes(alias)) return alias;
  const lower = key.toLowerCase();
  let best: { name: string; distance: number } | null = null;
  for (const name of valid) {
    const distance = name.toLowerCase() === lower ? 0 : levenshtein(lower, name.toLowerCase());
    if (!best || distance < best.distance) best = { name, distance };
  }
  // close enough to be a typo: at most 2 edits, and fewer than half the word
  return best && best.distance <= Math.min(2, Math.floor(key.length / 2)) ? best.name : null;
}

function levenshtein(a: string, b: string): number {
  let previous = Array.from({ length: b.length + 1 }, (_, i) => i);
  for (let i = 1; i <= a.length; i++) {
    const current = [i];
    for (let j = 1; j <= b.length; j++) {
      current[j] = Math.min((previous[j] ?? 0) + 1, (current[j - 1] ?? 0) + 1, (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
}
