// One measured tick of the scheduler benchmark: what the database recorded for its slot (every
// job exactly once?) and what the workers' records say (claim wall time, statements, start
// latency).
import { max, min, percentileOfSorted, round, sleep, sortedCopy } from './stats.js';
import type { Session } from './session.js';
import { STATEMENT_KINDS, type ClaimRecord, type StatementKind, type WorkerDump } from './tick-protocol.js';

/** A tick's statements: from this long before its slot to this long before the next slot. */
export const WINDOW_LEAD_MS = 1_000;
/** The benchmark's job names are `${TICK_PREFIX}-00000`, ... */
export const TICK_PREFIX = 'tick';

export interface TickVerification {
  /** Jobs with exactly one run for the slot (must equal the job count). */
  exactlyOnce: number;
  /** Jobs with no run for the slot (must be 0). */
  missing: number;
  /** Of those, jobs with a skip recorded for the slot: their previous run still held the lease. */
  missingSkipped: number;
  /** Jobs with more than one run for the slot (must be 0). */
  doubled: number;
  runs: number;
  succeeded: number;
  /** leasehold.skips rows for the slot: the job's previous run still held the lease. */
  skips: number;
  missed: number;
  /** Runs per worker (holders bench-tick-0, ...): how the jobs were shared. */
  runsPerWorker: number[];
}

export type StatementCounts = Record<StatementKind | 'total', number[]>;

export interface TickResult {
  slot: string;
  /** Slot -> the last claim statement that claimed at least one slot returned (any worker); negative: before the slot (claimed ahead). */
  wallMs: number;
  /** Slot -> the last claim statement for this slot returned, including retries that claimed nothing. */
  lastClaimStatementMs: number;
  /** Slot -> the first claim statement was sent (timer margin + building the batch); negative: claimed ahead. */
  firstClaimSentMs: number;
  /** Per worker: duration of its first claim statement of the tick (the full batch), client side. */
  batchMs: number[];
  /** Per worker: its first claim statement's rows back (parsed), or the slot if they were back before it (a claim ahead) -> the last of its handlers of the slot started: starting the runs. */
  startSpanMs: number[];
  /** Per worker: garbage collection from the slot to the last handler start of the tick (any worker's), ms. */
  gcMs: number[];
  /** Per worker: claim statements for this tick (the batch plus retries). */
  claimStatementsPerWorker: number[];
  /** Per worker: jobs in each of its claim statements, in order (e.g. "10000+7500"). */
  claimBatches: string[];
  /** Per worker: slots it claimed. */
  claimedPerWorker: number[];
  /** Why rows were not claimed, summed over all claim statements of the tick. */
  reasons: Record<string, number>;
  /** Per worker: statements sent in the tick's window, by leasehold function. */
  statementsPerWorker: StatementCounts;
  /** Handler start minus slot, every run of the tick. */
  startLatencyMs: { count: number; p50: number; p99: number; max: number };
  /** |the history's started_at - the handler's real start|, every run of the tick (what `runs` says against what happened). */
  recordedStartErrorMs?: { count: number; p50: number; p99: number; max: number };
  /** Slot -> the last finish_runs of the tick's window settled (every run recorded, or given up). */
  lastFinishMs: number;
  /** Runs whose finish_runs statement threw (e.g. no pool connection within connectTimeout): those leases stay held until their TTL runs out. */
  finishFailed: number;
  verification: TickVerification;
}

interface VerificationRow {
  missing_skipped: string;
  exactly_once: string;
  doubled: string;
  jobs_run: string;
  runs: string;
  succeeded: string;
  skips: string;
  missed: string;
}

export async function verifySlot(session: Session, slot: Date, jobs: number, holders: readonly string[]): Promise<TickVerification> {
  const like = `${TICK_PREFIX}-%`;
  const rows = await session.query<VerificationRow>(
    `with per_job as (
       select job, count(*) as n, count(*) filter (where outcome = 'succeeded') as ok
         from leasehold.runs where slot = $1 and job like $2 group by job
     )
     select count(*)::text as jobs_run,
            count(*) filter (where n = 1)::text as exactly_once,
            count(*) filter (where n > 1)::text as doubled,
            coalesce(sum(n), 0)::text as runs,
            coalesce(sum(ok), 0)::text as succeeded,
            (select count(*) from leasehold.skips where slot = $1 and job like $2)::text as skips,
            (select count(*) from leasehold.missed where slot = $1 and job like $2)::text as missed,
            (select count(*) from leasehold.skips k where k.slot = $1 and k.job like $2
                and not exists (select 1 from per_job p where p.job = k.job))::text as missing_skipped
       from per_job`,
    [slot, like],
  );
  const row = rows[0];
  if (!row) throw new Error('verification returned no row');
  const perHolder = await session.query<{ holder: string; n: string }>(
    'select holder, count(*)::text as n from leasehold.runs where slot = $1 and job like $2 group by holder',
    [slot, like],
  );
  const byHolder = new Map(perHolder.map((r) => [r.holder, Number(r.n)]));
  return {
    exactlyOnce: Number(row.exactly_once),
    missing: jobs - Number(row.jobs_run),
    missingSkipped: Number(row.missing_skipped),
    doubled: Number(row.doubled),
    runs: Number(row.runs),
    succeeded: Number(row.succeeded),
    skips: Number(row.skips),
    missed: Number(row.missed),
    runsPerWorker: holders.map((holder) => byHolder.get(holder) ?? 0),
  };
}

/** Each job's recorded start of `slot` (database epoch ms), by job index. */
export async function recordedStarts(session: Session, slot: Date): Promise<Map<number, number>> {
  const rows = await session.query<{ job: string; started_ms: string }>(
    `select job, (extract(epoch from started_at) * 1000)::text as started_ms from leasehold.runs where slot = $1 and job like $2`,
    [slot, `${TICK_PREFIX}-%`],
  );
  return new Map(rows.map((r) => [Number(r.job.slice(TICK_PREFIX.length + 1)), Number(r.started_ms)]));
}

/** Waits until every job has a finished run for every slot, or `deadline` (performance.now()) passes. */
export async function waitForRuns(session: Session, slots: readonly Date[], jobs: number, deadline: number): Promise<boolean> {
  for (;;) {
    const rows = await session.query<{ done: string }>(
      `select count(*)::text as done from leasehold.runs where slot = any($1::timestamptz[]) and job like $2 and outcome <> 'running'`,
      [slots, `${TICK_PREFIX}-%`],
    );
    if (Number(rows[0]?.done) >= jobs * slots.length) return true;
    if (performance.now() >= deadline) return false;
    await sleep(200);
  }
}

export function analyseTick(
  slotDb: number,
  offsetMs: number,
  intervalMs: number,
  dumps: readonly WorkerDump[],
  verification: TickVerification,
  recorded?: ReadonlyMap<number, number>,
): TickResult {
  const slotLocal = slotDb + offsetMs;
  const windowStart = slotLocal - WINDOW_LEAD_MS;
  const windowEnd = windowStart + intervalMs;
  const forSlot = (claim: ClaimRecord) => claim.slotMin <= slotDb && claim.slotMax >= slotDb;
  const perWorkerClaims = dumps.map((d) => d.claims.filter(forSlot).sort((a, b) => a.start - b.start));
  const all = perWorkerClaims.flat();
  const claiming = all.filter((c) => c.claimed > 0);
  const reasons: Record<string, number> = {};
  for (const claim of all) {
    for (const [reason, n] of Object.entries(claim.reasons)) if (reason !== 'claimed') reasons[reason] = (reasons[reason] ?? 0) + n;
    if (claim.error) reasons[`error: ${claim.error}`] = (reasons[`error: ${claim.error}`] ?? 0) + 1;
  }
  const statementsPerWorker = Object.fromEntries([...STATEMENT_KINDS, 'total'].map((kind) => [kind, [] as number[]])) as StatementCounts;
  let lastFinish = Number.NaN;
  let finishFailed = 0;
  for (const d of dumps) {
    for (let i = 0; i + 1 < d.finishes.length; i += 2) {
      const at = d.finishes[i] as number;
      if (at < windowStart || at >= windowEnd) continue;
      if (!(at <= lastFinish)) lastFinish = at;
      if (d.finishes[i + 1] === 0) finishFailed++;
    }
    const counts = new Map<StatementKind, number>();
    let total = 0;
    for (let i = 0; i + 1 < d.statements.length; i += 2) {
      const at = d.statements[i] as number;
      if (at < windowStart || at >= windowEnd) continue;
      const kind = STATEMENT_KINDS[d.statements[i + 1] as number] ?? 'other';
      counts.set(kind, (counts.get(kind) ?? 0) + 1);
      total++;
    }
    for (const kind of STATEMENT_KINDS) statementsPerWorker[kind].push(counts.get(kind) ?? 0);
    statementsPerWorker.total.push(total);
  }
  const latencies: number[] = [];
  const recordErrors: number[] = [];
  for (const d of dumps) {
    for (let i = 0; i + 1 < d.starts.length; i += 2) {
      if (d.starts[i] !== slotDb) continue;
      latencies.push((d.starts[i + 1] as number) - slotLocal);
      const at = recorded?.get(d.startJobs?.[i / 2] ?? -1);
      if (at !== undefined) recordErrors.push(Math.abs(at + offsetMs - (d.starts[i + 1] as number)));
    }
  }
  const errorsSorted = sortedCopy(recordErrors);
  const startSpanMs = dumps.map((d, w) => {
    const first = perWorkerClaims[w]?.[0];
    let last = Number.NaN;
    for (let i = 0; i + 1 < d.starts.length; i += 2) if (d.starts[i] === slotDb && !((d.starts[i + 1] as number) <= last)) last = d.starts[i + 1] as number;
    return first && Number.isFinite(last) ? round(last - Math.max(first.end, slotLocal), 1) : Number.NaN;
  });
  const sorted = sortedCopy(latencies);
  const lastStart = slotLocal + (sorted[sorted.length - 1] ?? 0);
  const gcMs = dumps.map((d) => {
    let ms = 0;
    const gcs = d.gcs ?? [];
    for (let i = 0; i + 1 < gcs.length; i += 2) if ((gcs[i] as number) >= slotLocal && (gcs[i] as number) < lastStart) ms += gcs[i + 1] as number;
    return round(ms, 1);
  });
  return {
    slot: new Date(slotDb).toISOString(),
    wallMs: round(max(claiming.map((c) => c.end)) - slotLocal, 1),
    lastClaimStatementMs: round(max(all.map((c) => c.end)) - slotLocal, 1),
    firstClaimSentMs: round(min(all.map((c) => c.start)) - slotLocal, 1),
    batchMs: perWorkerClaims.map((claims) => (claims[0] ? round(claims[0].end - claims[0].start, 1) : Number.NaN)),
    startSpanMs,
    gcMs,
    claimStatementsPerWorker: perWorkerClaims.map((claims) => claims.length),
    claimBatches: perWorkerClaims.map((claims) => claims.map((c) => String(c.jobs)).join('+')),
    claimedPerWorker: perWorkerClaims.map((claims) => claims.reduce((n, c) => n + c.claimed, 0)),
    reasons,
    statementsPerWorker,
    startLatencyMs: {
      count: latencies.length,
      p50: round(percentileOfSorted(sorted, 50), 1),
      p99: round(percentileOfSorted(sorted, 99), 1),
      max: round(percentileOfSorted(sorted, 100), 1),
    },
    ...(recordErrors.length
      ? {
          recordedStartErrorMs: {
            count: recordErrors.length,
            p50: round(percentileOfSorted(errorsSorted, 50), 1),
            p99: round(percentileOfSorted(errorsSorted, 99), 1),
            max: round(percentileOfSorted(errorsSorted, 100), 1),
          },
        }
      : {}),
    lastFinishMs: round(lastFinish - slotLocal, 1),
    finishFailed,
    verification,
  };
}
