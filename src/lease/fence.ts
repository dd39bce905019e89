// Fences as JavaScript numbers. PostgreSQL returns bigint as a string; the epoch layout of
// leasehold.next_fence keeps fences below 2^53 up to WAL timeline 8192, so a number is exact.
// Past that a fence is refused loudly rather than rounded (a rounded fence could name, or
// collide with, another acquisition's idempotency key).
import { LeaseholdError } from '../errors.js';

/** A fence from PostgreSQL (int8 text) as an exact number. */
export function parseFence(value: string | number | bigint): number {
  const fence = typeof value === 'number' ? value : Number(value);
  if (!Number.isSafeInteger(fence)) {
    throw new FenceRangeError(String(value));
  }
  return fence;
}

/** A fence too large to be an exact JavaScript number (beyond WAL timeline 8192). */
export class FenceRangeError extends LeaseholdError {
  readonly fence: string;
  constructor(fence: string) {
    super(
      'FENCE_RANGE',
      `Fence ${fence} is beyond 2^53 and cannot be an exact JavaScript number; fences get there only after ` +
        'more than 8192 promotions (WAL timelines) of the database (docs/high-availability.md).',
    );
    this.fence = fence;
  }
}
