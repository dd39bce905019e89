// What bench/fixtures/tick-worker.ts reports to the scheduler benchmark over stdout.

// What a worker's statements are for, by the leasehold function they call (tick-worker.ts
// classifies them): the tick's own work (claims, recording the runs, renewing their leases,
// missed slots), registering the jobs, the polls an idle worker also makes (schedule changes,
// run requests, the live workers' list), and anything else.
export const STATEMENT_KINDS = ['other', 'claim', 'finish_runs', 'renew_leases', 'record_missed', 'register_jobs', 'poll'] as const;
export type StatementKind = (typeof STATEMENT_KINDS)[number];

/** One SchedulerStore.claim() call, i.e. one claim statement. Times: local epoch ms. */
export interface ClaimRecord {
  /** Earliest and latest slot asked for (epoch ms, database time). */
  slotMin: number;
  slotMax: number;
  /** Jobs in the statement. */
  jobs: number;
  /** Rows with claimed = true. */
  claimed: number;
  /** Rows per reason ('claimed', 'slot-taken', 'holder-committing', ...). */
  reasons: Record<string, number>;
  /** Just before the call, and when its rows were back in JavaScript. */
  start: number;
  end: number;
  error: string | null;
  /** A claim ahead of the slot (SchedulerStore.claimAhead: leasehold.claim with ahead_ms); absent in earlier builds' records. */
  ahead?: boolean;
}

export interface WorkerDump {
  claims: ClaimRecord[];
  /** Flat pairs: slot (epoch ms, database time), handler start (local epoch ms). */
  starts: number[];
  /** The job's index (`${prefix}-00042`: 42) of each pair of starts. */
  startJobs?: number[];
  /** Flat pairs: sent at (local epoch ms), index into STATEMENT_KINDS. */
  statements: number[];
  /** Flat pairs: SchedulerStore.finish() settled at (local epoch ms), 1 if it succeeded, 0 if it threw. */
  finishes: number[];
  /** Why finish() threw, by message (first sentence, without the address), with counts. */
  finishErrors: Record<string, number>;
  /** Flat pairs: a garbage collection's start (local epoch ms) and duration (ms), from perf_hooks. */
  gcs?: number[];
}

export interface UsageSample {
  at: number;
  rss: number;
  heapUsed: number;
  heapTotal: number;
  external: number;
  cpuUserMicros: number;
  cpuSystemMicros: number;
  /** Statements sent since the last dump. */
  statements: number;
  /** Whether a full garbage collection ran just before this sample (needs node --expose-gc). */
  collected: boolean;
}

export function isWorkerDump(value: unknown): value is WorkerDump {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  return Array.isArray(v.claims) && Array.isArray(v.starts) && Array.isArray(v.statements) && Array.isArray(v.finishes);
}

export function isUsageSample(value: unknown): value is UsageSample {
  if (typeof value !== 'object' || value === null) return false;
  const v = value as Record<string, unknown>;
  return typeof v.rss === 'number' && typeof v.cpuUserMicros === 'number' && typeof v.cpuSystemMicros === 'number' && typeof v.at === 'number';
}
