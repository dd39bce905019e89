// Benchmark settings, from environment variables so a quick or a long run needs no code edit.
//   BENCH_SECONDS          seconds per contested cell (default 4)
//   BENCH_ROUNDS           rounds over all cells, alternating which pattern goes first (default 2)
//   BENCH_CLIENTS          comma-separated client counts (default 2,8,32)
//   BENCH_WARMUP_SECONDS   untimed warm-up per pattern before the first round (default 1)
//   BENCH_WAL_ATTEMPTS     declined acquisitions per WAL trial (default 2000)
//   BENCH_WAL_TRIALS       WAL trials per pattern; the median is reported (default 3)
//   BENCH_TAKEOVER_RUNS    SIGKILL takeovers per liveness mode (default 5)
//   DATABASE_URL           use this server instead of an embedded one

export interface BenchConfig {
  cellSeconds: number;
  rounds: number;
  clientCounts: number[];
  warmupSeconds: number;
  walAttempts: number;
  walTrials: number;
  takeoverRuns: number;
  databaseUrl: string | undefined;
}

function positiveNumber(name: string, fallback: number, { integer = false } = {}): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value <= 0 || (integer && !Number.isInteger(value))) {
    throw new Error(`${name} must be a positive ${integer ? 'integer' : 'number'} (got "${raw}").`);
  }
  return value;
}

function nonNegativeNumber(name: string, fallback: number): number {
  const raw = process.env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < 0) throw new Error(`${name} must be a number >= 0 (got "${raw}").`);
  return value;
}

function clientCounts(): number[] {
  const raw = process.env.BENCH_CLIENTS;
  if (raw === undefined || raw.trim() === '') return [2, 8, 32];
  const counts = raw.split(',').map((part) => Number(part.trim()));
  if (counts.length === 0 || counts.some((n) => !Number.isInteger(n) || n < 1 || n > 200)) {
    throw new Error(`BENCH_CLIENTS must be a comma-separated list of integers from 1 to 200 (got "${raw}").`);
  }
  return counts;
}

export function readConfig(): BenchConfig {
  return {
    cellSeconds: positiveNumber('BENCH_SECONDS', 4),
    rounds: positiveNumber('BENCH_ROUNDS', 2, { integer: true }),
    clientCounts: clientCounts(),
    warmupSeconds: nonNegativeNumber('BENCH_WARMUP_SECONDS', 1),
    walAttempts: positiveNumber('BENCH_WAL_ATTEMPTS', 2000, { integer: true }),
    walTrials: positiveNumber('BENCH_WAL_TRIALS', 3, { integer: true }),
    takeoverRuns: positiveNumber('BENCH_TAKEOVER_RUNS', 5, { integer: true }),
    databaseUrl: process.env.DATABASE_URL || undefined,
  };
}
