// The shape of the defaults-and-limits tables (src/lease/defaults.ts, src/job/defaults.ts,
// src/worker/defaults.ts, src/dashboard/defaults.ts, src/cli/defaults.ts): each setting's default next to its bounds, so
// the code that applies them, the CLI's help and the JSDoc `@default`s read one value.
import { InvalidArgumentError } from '../errors.js';
import { parseBoundedDuration, type Duration } from './duration.js';

/** A duration setting: its default (as written in docs) and inclusive bounds in milliseconds. */
export interface DurationSetting {
  readonly default: string;
  readonly minMs: number;
  readonly maxMs: number;
}

/** An integer setting: its default and inclusive bounds. */
export interface IntegerSetting {
  readonly default: number;
  readonly min: number;
  readonly max: number;
}

/** `value` (the setting's default when undefined), parsed and checked against the setting's bounds. */
export function durationSetting(value: Duration | undefined, setting: DurationSetting, what: string): number {
  return parseBoundedDuration(value ?? setting.default, what, setting.minMs, setting.maxMs);
}

/** `value` (the setting's default when undefined), checked to be an integer within the setting's bounds. */
export function integerSetting(value: number | undefined, setting: IntegerSetting, argument: string, what = argument): number {
  const n = value ?? setting.default;
  if (!Number.isInteger(n) || n < setting.min || n > setting.max) {
    throw new InvalidArgumentError(argument, `${what} must be an integer from ${setting.min} to ${setting.max} (got ${String(n)}).`);
  }
  return n;
}
