// Order statistics for latency samples and repeated measurements.

/** Nearest-rank percentile (p in 0..100) of an ascending-sorted array; NaN when empty. */
export function percentileOfSorted(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  const index = Math.min(sorted.length - 1, Math.max(0, rank - 1));
  return sorted[index] as number;
}

/** Sorts a copy of the samples (as a Float64Array: numeric order, compact). */
export function sortedCopy(samples: readonly number[] | Float64Array): Float64Array {
  const copy = Float64Array.from(samples);
  copy.sort();
  return copy;
}

export function median(values: readonly number[]): number {
  return percentileOfSorted(sortedCopy(values), 50);
}

export function max(values: readonly number[]): number {
  return values.length === 0 ? Number.NaN : Math.max(...values);
}

export function min(values: readonly number[]): number {
  return values.length === 0 ? Number.NaN : Math.min(...values);
}

/** Rounds to `digits` decimals, keeping the JSON readable. */
export function round(value: number, digits = 2): number {
  if (!Number.isFinite(value)) return value;
  const factor = 10 ** digits;
  return Math.round(value * factor) / factor;
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));
