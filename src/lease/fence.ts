// Fences as JavaScript numbers. PostgreSQL returns bigint as a string; the fork bases of
// leasehold.next_fence (milliseconds since 2020 times 1024) stay below 2^53 until 2298, so a number is exact.
// Past that a fence is refused loudly rather than rounded (a rounded fence could name, or
// collide with, another acquisition's idempotency key).
import { FenceRangeError } from '../errors.js';

/** A fence from PostgreSQL (int8 text) as an exact number. */
export function parseFence(value: string | number | bigint): number {
  const fence = typeof value === 'number' ? value : Number(value);
  if (!Number.isSafeInteger(fence)) {
    throw new FenceRangeError(String(value));
  }
  return fence;
}
