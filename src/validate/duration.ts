// Durations are accepted as milliseconds (a number) or as a string such as '500ms', '30s',
// '5m', '1h30m' or '1d'. One format everywhere: options, the CLI and the docs. A duration is a
// whole number of milliseconds (the database takes bigint milliseconds): a fraction of one is
// refused, but '4.1m', 245999.99999999997 in floating point, is the 246,000 ms it says.
import { InvalidArgumentError } from '../errors.js';

export type Duration = number | string;

const UNIT_MS: Record<string, number> = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 };
const PART = /(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)/gy;

/** Parses a duration; throws InvalidArgumentError naming `what` when it cannot. */
export function parseDuration(value: Duration, what: string): number {
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) {
      throw new InvalidArgumentError(what, `${what} must be a finite number of milliseconds (got ${value}).`);
    }
    if (!Number.isInteger(value)) throw new InvalidArgumentError(what, `${what} must be a whole number of milliseconds (got ${value}).`);
    return value;
  }
  if (typeof value !== 'string') {
    throw new InvalidArgumentError(what, `${what} must be milliseconds or a string such as '30s' or '5m' (got ${typeof value}).`);
  }
  const text = value.trim();
  let total = 0;
  let consumed = 0;
  PART.lastIndex = 0;
  for (let match = PART.exec(text); match; match = PART.exec(text)) {
    total += Number(match[1]) * (UNIT_MS[match[2] as string] as number);
    consumed = PART.lastIndex;
  }
  // A bare number in a string ('60000', a CLI flag) is refused rather than guessed: ms or s?
  if (/^\d+(?:\.\d+)?$/.test(text)) {
    throw new InvalidArgumentError(what, `${what} '${value}' is not a duration: it has no unit; write '${text}ms', or the same in s, m, h or d.`);
  }
  if (text === '' || consumed !== text.length) {
    throw new InvalidArgumentError(
      what,
      `${what} '${value}' is not a duration: use milliseconds or a string such as '500ms', '30s', '5m', '1h30m' or '1d'.`,
    );
  }
  // decimal units in binary floating point: accept what is a whole millisecond up to rounding
  const ms = Math.round(total);
  if (Math.abs(total - ms) > 1e-6) {
    throw new InvalidArgumentError(what, `${what} '${value}' is not a whole number of milliseconds (${Number(total.toFixed(6))} ms).`);
  }
  return ms;
}

/** Parses and checks a duration against inclusive bounds, with a message that says what to do. 0 passes only where minMs is 0. */
export function parseBoundedDuration(value: Duration, what: string, minMs: number, maxMs: number): number {
  const ms = parseDuration(value, what);
  if (ms <= 0 && minMs > 0) {
    throw new InvalidArgumentError(what, `${what} must be positive (got ${formatDuration(ms)}).`);
  }
  if (ms < minMs || ms > maxMs) {
    throw new InvalidArgumentError(
      what,
      `${what} must be between ${formatDuration(minMs)} and ${formatDuration(maxMs)} (got ${formatDuration(ms)}).`,
    );
  }
  return ms;
}

/** Formats milliseconds the way people write them: 1500 -> '1.5s', 90000 -> '1m30s'. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return String(ms);
  if (ms < 0) return `-${formatDuration(-ms)}`;
  if (ms < 1_000) return `${Math.round(ms * 1000) / 1000}ms`;
  if (ms < 60_000) return `${Math.round(ms) / 1000}s`;
  const parts: string[] = [];
  let rest = Math.round(ms);
  for (const [unit, size] of [['d', 86_400_000], ['h', 3_600_000], ['m', 60_000], ['s', 1_000]] as const) {
    const count = Math.floor(rest / size);
    if (count > 0) parts.push(`${count}${unit}`);
    rest -= count * size;
  }
  if (rest > 0) parts.push(`${rest}ms`);
  return parts.join('');
}
