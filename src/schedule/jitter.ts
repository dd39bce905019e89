// Jitter: a fixed per-job delay between a slot and the moment the worker claims it, so that
// thousands of jobs on one cron do not all fire at the same millisecond. The slot itself (its
// identity: ctx.slot, the idempotency key, history, skips, missed slots) stays the nominal time;
// only the fire time moves.
//
// The offset is a pure function of the job's name and its jitter, the same on every worker,
// process and version (it is part of the documented behaviour, docs/scheduler.md "Jitter"):
//
//   fraction(name) = first 6 bytes of SHA-256(UTF-8 name), big-endian, divided by 2^48
//   offset(name, jitter) = floor(fraction(name) * jitter)      (milliseconds, in [0, jitter))
//
// computed exactly with integers (no floating-point rounding differs between platforms).
// In SQL: ('x' || left(encode(sha256(convert_to(name, 'UTF8')), 'hex'), 12))::bit(48)::bigint
// * jitter_ms / 2^48, floored.
import { createHash } from 'node:crypto';

const SPACE = 2n ** 48n;

/** The job's place in [0, 2^48): the first 48 bits of SHA-256 of its name. */
export function jitterKey(name: string): bigint {
  return BigInt(`0x${createHash('sha256').update(name, 'utf8').digest('hex').slice(0, 12)}`);
}

/** The job's offset in whole milliseconds, in [0, jitterMs); 0 when jitterMs is 0. */
export function jitterOffsetMs(name: string, jitterMs: number): number {
  // no BigInt for the usual jitter of 0
  if (Math.floor(jitterMs) <= 0) return 0;
  const span = BigInt(Math.floor(jitterMs));
  return Number((jitterKey(name) * span) / SPACE);
}

/** When a job with this offset claims `slot`. */
export function fireTime(slot: Date, offsetMs: number): Date {
  return offsetMs === 0 ? slot : new Date(slot.getTime() + offsetMs);
}

/**
 * The clock a job with this offset reads: `now` minus the offset. Its slots come due on it at
 * their fire times, and its lateness (startingDeadline) counts from the fire time.
 */
export function jobClock(now: Date, offsetMs: number): Date {
  return offsetMs === 0 ? now : new Date(now.getTime() - offsetMs);
}
