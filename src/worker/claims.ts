// The scheduler's statements: register jobs, claim many slots in one call, finish a run,
// queue catch-up slots, record missed slots, prune history. Each is one round trip.
import { numberArrayLiteral, textArrayLiteral, timestampArrayLiteral } from '../db/array-literal.js';
import { timedQuery } from '../db/connection.js';
import type { LeaseRuntime } from '../lease/runtime.js';
import { claimMode, describeCatchUp, type JobDefinition } from '../job/job.js';
import type { RunOutcome } from '../job/run-outcomes.js';
import type { LeaseholdEvents } from '../observe/events.js';
import { lastSlotOf, type LastSlot } from './catch-up.js';
import type { LivePeer } from './shares.js';

export interface ClaimRequest {
  job: JobDefinition;
  slot: Date;
}

export interface ClaimRow {
  job: string;
  slot: Date;
  claimed: boolean;
  reason: 'claimed' | 'held' | 'held-ahead' | 'holder-committing' | 'slot-taken' | 'slot-skipped' | 'slot-not-due' | 'unknown-job' | 'paused' | 'removed';
  token: string | null;
  fence: string | null;
  expires_at: Date | null;
  previous_slot: Date | null;
  holder: string | null;
  holder_fence: string | null;
  holder_slot: Date | null;
  holder_since: Date | null;
  skip_recorded: boolean;
  buffered: boolean;
  database_time: Date;
  took_over: boolean;
  /** Set on runs of run-now and backfill requests (requests.ts); absent for scheduled slots. */
  trigger?: 'manual' | 'backfill';
  request_id?: string;
}

/** The 'slot:skipped' event of a row declined because another holder had the lease. */
export function skippedEvent(job: string, row: ClaimRow): LeaseholdEvents['slot:skipped'][0] {
  const heldMs = row.holder_since ? row.database_time.getTime() - row.holder_since.getTime() : null;
  return { job, slot: row.slot, holder: row.holder, holderFence: Number(row.holder_fence), holderSlot: row.holder_slot, heldMs, buffered: row.buffered };
}

/** A row of leasehold.unhandled_schedules(). */
export type UnhandledRow = {
  job: string;
  handler: string;
  schedule: string;
  timezone: string | null;
  interval_ms: number | null;
  since: Date;
  database_time: Date;
};

export class SchedulerStore {
  constructor(private readonly runtime: LeaseRuntime) {}

  private query<R extends Record<string, unknown>>(text: string, values: unknown[], timeoutMs = this.runtime.queryTimeoutMs) {
    return timedQuery<R>(this.runtime.controlPool, text, values, timeoutMs, this.runtime.where);
  }

  /** A statement whose rows come back as arrays of their columns, in the order selected. */
  private async arrayQuery(text: string, values: unknown[], timeoutMs: number): Promise<unknown[][]> {
    const { rows } = await timedQuery<Record<string, unknown>>(this.runtime.controlPool, text, values, timeoutMs, this.runtime.where, { rowMode: 'array' });
    return rows as unknown as unknown[][];
  }

  /** Upserts the definitions; returns the last claimed slot of each job that has one (get() ?? null for the others). */
  async register(jobs: readonly JobDefinition[], holder: string): Promise<Map<string, LastSlot | null>> {
    // sent as array literals, built flat (array-literal.ts): 10,000 jobs are one statement
    const { rows } = await this.query<{ name: string; last_slot: Date | null; last_slot_unstarted: boolean }>(
      // only the jobs with a last slot: a row per job would be 10,000 rows to parse for new jobs
      'select name, last_slot, last_slot_unstarted from leasehold.register_jobs($1, $2, $3, $4, $5, $6, $7, $8, $9) where last_slot is not null',
      [
        textArrayLiteral(jobs.map((j) => j.name)),
        textArrayLiteral(jobs.map((j) => j.schedule.expression)),
        textArrayLiteral(jobs.map((j) => j.schedule.timezone)),
        numberArrayLiteral(jobs.map((j) => j.schedule.nominalIntervalMs)),
        numberArrayLiteral(jobs.map((j) => j.ttlMs)),
        textArrayLiteral(jobs.map((j) => j.overlap)),
        textArrayLiteral(jobs.map((j) => describeCatchUp(j.catchUp))),
        holder,
        numberArrayLiteral(jobs.map((j) => j.timeoutMs)),
      ],
      batchTimeout(this.runtime.queryTimeoutMs, jobs.length),
    );
    return new Map(rows.map((r) => [r.name, lastSlotOf(r)]));
  }

  /** The live workers' keys, each with its login role when it registered handlers (shares.ts: the hash shares, one recorder per role). */
  async liveKeys(): Promise<LivePeer[]> {
    const { rows } = await this.query<{ key: string; role: string | null }>(
      'select k.key::text as key, w.role from leasehold.liveness_locks() k left join leasehold.worker_handlers w on w.worker_key = k.key where k.worker',
      [],
    );
    return rows;
  }

  /**
   * One statement for any number of jobs (leasehold.claim). The worker's tick asks for the rows
   * it must act on only, with times as epoch milliseconds (numbers to parse, not timestamps).
   * `every`: one row per request with its reason, for callers that report each outcome.
   */
  async claim(requests: readonly ClaimRequest[], holder: string, holderKey: string | null, every = false): Promise<ClaimRow[]> {
    const { names, slots, ttls, modes, caps } = requestArrays(requests);
    // The plain arrays go as literals built flat (src/db/array-literal.ts), the ttls as whole
    // milliseconds (durations are, src/validate/duration.ts).
    const values = [textArrayLiteral(names), timestampArrayLiteral(slots), numberArrayLiteral(ttls), textArrayLiteral(modes), numberArrayLiteral(caps), holder, holderKey];
    const timeoutMs = batchTimeout(this.runtime.queryTimeoutMs, requests.length);
    if (every) {
      const { rows } = await this.query<ClaimRow & Record<string, unknown>>(
        'select * from leasehold.claim($1::text[], $2::timestamptz[], $3::bigint[], $4::text[], $5::integer[], $6, $7::bigint, true)',
        values,
        timeoutMs,
      );
      return rows;
    }
    const rows = await this.arrayQuery(`select ${TICK_COLUMNS} from leasehold.claim($1::text[], $2::timestamptz[], $3::bigint[], $4::text[], $5::integer[], $6, $7::bigint)`, values, timeoutMs);
    return tickRows(rows, requests);
  }

  /**
   * Claims, ahead of their slots, the requests whose slot is due within `aheadMs` and whose
   * lease is free (leasehold.claim with ahead_ms); `starts`: when each run will start (its slot plus the
   * job's jitter). Returns the claimed rows only; the others are claimed at their slots.
   */
  async claimAhead(requests: readonly ClaimRequest[], starts: readonly Date[], holder: string, holderKey: string | null, aheadMs: number): Promise<ClaimRow[]> {
    const { names, slots, ttls, modes, caps } = requestArrays(requests);
    // only claimed rows come back from a claim ahead
    const rows = await this.arrayQuery(
      `select ${TICK_COLUMNS} from leasehold.claim($1::text[], $2::timestamptz[], $3::bigint[], $4::text[], $5::integer[], $6, $7::bigint, false, $8::bigint, $9::timestamptz[])`,
      [textArrayLiteral(names), timestampArrayLiteral(slots), numberArrayLiteral(ttls), textArrayLiteral(modes), numberArrayLiteral(caps), holder, holderKey, Math.ceil(aheadMs), timestampArrayLiteral(starts)],
      batchTimeout(this.runtime.queryTimeoutMs, requests.length),
    );
    return tickRows(rows, requests);
  }

  /**
   * Marks that this worker starts the runs it claimed ahead under `holderKey` and planned to
   * start until `through` (leasehold.start_tick): from then on no peer claims them again. False:
   * a peer claimed some of them again before the mark; each lease is to be checked first.
   */
  async startTick(holderKey: string, through: Date): Promise<boolean> {
    const { rows } = await this.query<{ untouched: boolean }>('select leasehold.start_tick($1::bigint, $2) as untouched', [holderKey, through]);
    return rows[0]?.untouched === true;
  }

  /** Reports that every slot of this worker's share of a tick is decided (share-reports.ts). */
  async reportShare(holderKey: string, digest: { jobs: number; sumA: number; sumB: number }): Promise<void> {
    await this.query('select leasehold.report_share($1::bigint, $2, $3::bigint, $4::bigint)', [holderKey, digest.jobs, digest.sumA, digest.sumB]);
  }

  /** Which of the peers' keys reported exactly the share digest given for it (share-reports.ts). */
  async reportedShares(shares: ReadonlyArray<{ key: string; digest: { jobs: number; sumA: number; sumB: number } }>): Promise<Set<string>> {
    const { rows } = await this.query<{ key: string }>(
      'select k.holder_key::text as key from leasehold.reported_shares($1::bigint[], $2::integer[], $3::bigint[], $4::bigint[]) k',
      [
        textArrayLiteral(shares.map((s) => s.key)), // keys as text: a bigint's digits, read as bigint[]
        numberArrayLiteral(shares.map((s) => s.digest.jobs)),
        numberArrayLiteral(shares.map((s) => s.digest.sumA)),
        numberArrayLiteral(shares.map((s) => s.digest.sumB)),
      ],
    );
    return new Set(rows.map((r) => r.key));
  }

  async finish(
    job: string,
    fence: number,
    token: string | null,
    outcome: RunOutcome,
    error: string | null,
    attempts: number,
  ): Promise<{ recorded: boolean; released: boolean; nextBufferedSlot: Date | null }> {
    const { rows } = await this.query<{ recorded: boolean; released: boolean; next_buffered_slot: Date | null }>(
      'select recorded, released, next_buffered_slot from leasehold.finish_runs(array[$1], array[$2::bigint], array[$3::uuid], array[$4], array[$5], array[$6::integer])',
      [job, fence, token, outcome, error, attempts],
    );
    const row = rows[0];
    return { recorded: row?.recorded ?? false, released: row?.released ?? false, nextBufferedSlot: row?.next_buffered_slot ?? null };
  }

  /** finish() for many runs in one statement. */
  async finishMany(
    runs: ReadonlyArray<{ job: string; fence: number; token: string | null; outcome: string; error: string | null; attempts: number; startedMs: number | null }>,
  ): Promise<Array<{ job: string; fence: number; recorded: boolean; released: boolean; nextBufferedSlot: Date | null }>> {
    const rows = await this.arrayQuery(
      'select job, fence, recorded, released, next_buffered_slot from leasehold.finish_runs($1::text[], $2::bigint[], $3::uuid[], $4::text[], $5::text[], $6::integer[], $7::float8[])',
      [
        textArrayLiteral(runs.map((r) => r.job)),
        numberArrayLiteral(runs.map((r) => r.fence)),
        textArrayLiteral(runs.map((r) => r.token)),
        textArrayLiteral(runs.map((r) => r.outcome)),
        textArrayLiteral(runs.map((r) => r.error)),
        numberArrayLiteral(runs.map((r) => r.attempts)),
        numberArrayLiteral(runs.map((r) => r.startedMs)),
      ],
      batchTimeout(this.runtime.queryTimeoutMs, runs.length),
    );
    return rows.map((r) => {
      const [job, fence, recorded, released, nextBufferedSlot] = r as [string, string, boolean, boolean, Date | null];
      return { job, fence: Number(fence), recorded, released, nextBufferedSlot };
    });
  }

  async enqueue(job: string, slots: Date[]): Promise<number> {
    const { rows } = await this.query<{ n: number }>('select leasehold.enqueue_slots($1, $2) as n', [job, slots]);
    return rows[0]?.n ?? 0;
  }

  /** The data jobs whose handler no live worker registered (leasehold.unhandled_schedules). */
  async unhandledSchedules(): Promise<UnhandledRow[]> {
    const { rows } = await this.query<UnhandledRow>(
      'select job, handler, schedule, timezone, interval_ms::float8 as interval_ms, since, database_time from leasehold.unhandled_schedules()',
      [],
    );
    return rows;
  }

  /** recordMissed() for many jobs in one statement; returns the slots recorded, by job. */
  async recordMissedMany(missed: ReadonlyArray<{ job: string; slots: readonly Date[] }>, reason: string, holder: string): Promise<Map<string, Date[]>> {
    const jobs: string[] = [];
    const slots: Date[] = [];
    for (const entry of missed) for (const slot of entry.slots) (jobs.push(entry.job), slots.push(slot));
    const recorded = new Map<string, Date[]>();
    if (jobs.length === 0) return recorded;
    const { rows } = await this.query<{ job: string; slot: Date }>(
      'select job, slot from leasehold.record_missed_slots($1::text[], $2::timestamptz[], $3, $4) order by job, slot',
      [textArrayLiteral(jobs), timestampArrayLiteral(slots), reason, holder],
      batchTimeout(this.runtime.queryTimeoutMs, jobs.length),
    );
    for (const row of rows) {
      const list = recorded.get(row.job);
      if (list) list.push(row.slot);
      else recorded.set(row.job, [row.slot]);
    }
    return recorded;
  }

  async recordMissed(job: string, slots: Date[], reason: string, holder: string): Promise<number> {
    if (slots.length === 0) return 0;
    const { rows } = await this.query<{ n: number }>(
      'select count(*)::int as n from leasehold.record_missed_slots(array_fill($1::text, array[cardinality($2::timestamptz[])]), $2, $3, $4)',
      [job, slots, reason, holder],
    );
    return rows[0]?.n ?? 0;
  }

  /** Stores the window a forward database clock step jumped over (merged with overlapping ones). */
  async recordClockStep(from: Date, to: Date, holder: string): Promise<void> {
    await this.query('select leasehold.record_clock_step($1, $2, $3)', [from, to, holder]);
  }

  /**
   * Deletes history older than keepMs, one batch per statement (each its own transaction). The
   * duration goes as milliseconds times an interval: 30 days as '2592000000 milliseconds'
   * overflows the interval parser before PostgreSQL 15.
   */
  async prune(keepMs: number, batch = PRUNE_BATCH): Promise<number> {
    let total = 0;
    for (;;) {
      const { rows } = await this.query<{ n: string }>("select leasehold.prune_history($1::float8 * interval '1 millisecond', $2)::text as n", [keepMs, batch]);
      const deleted = Number(rows[0]?.n ?? 0);
      total += deleted;
      // fewer than one batch in all: every kind is below its batch, nothing prunable is left
      if (deleted < batch) return total;
    }
  }
}

/**
 * The timeout of a statement over `rows` rows: a big batch takes longer than one row (at least
 * a millisecond a row, at most a minute: 100,000 jobs registered by four workers at once
 * took longer than the 5 s default).
 */
function batchTimeout(timeoutMs: number, rows: number): number {
  return Math.max(timeoutMs, Math.min(60_000, rows));
}

/** Rows of each kind prune_history deletes per statement: short transactions, bounded WAL bursts. */
const PRUNE_BATCH = 5_000;

/** A claim's requests as the parallel arrays the claim functions take. */
function requestArrays(requests: readonly ClaimRequest[]): { names: string[]; slots: Date[]; ttls: number[]; modes: string[]; caps: number[] } {
  const names: string[] = new Array<string>(requests.length);
  const slots: Date[] = new Array<Date>(requests.length);
  const ttls: number[] = new Array<number>(requests.length);
  const modes: string[] = new Array<string>(requests.length);
  const caps: number[] = new Array<number>(requests.length);
  for (let i = 0; i < requests.length; i++) {
    const { job, slot } = requests[i] as ClaimRequest;
    const mode = claimMode(job);
    names[i] = job.name;
    slots[i] = slot;
    ttls[i] = job.ttlMs;
    modes[i] = mode.mode;
    caps[i] = mode.bufferCap;
  }
  return { names, slots, ttls, modes, caps };
}

// A time of claim()'s rows as epoch milliseconds: a number to parse, not a timestamp (a tick of
// 10,000 jobs is 10,000 rows).
const ms = (column: string): string => `(extract(epoch from ${column}) * 1000)::float8`;

/** claim()'s columns, in the order tickRows() reads them, times as epoch milliseconds. */
const TICK_COLUMNS = [
  'job', ms('slot'), 'claimed', 'reason', 'token', 'fence', ms('expires_at'), ms('previous_slot'), 'holder', 'holder_fence',
  ms('holder_slot'), ms('holder_since'), 'skip_recorded', 'buffered', ms('database_time'), 'took_over',
].join(', ');

/**
 * ClaimRows from claim()'s rows (arrays of TICK_COLUMNS): a claimed slot that is the one asked for reuses the request's Date (jobs due at
 * one instant share it), and rows with the same database time, or the same expiry (one
 * statement's now() plus the same ttl), share one Date.
 */
function tickRows(rows: unknown[][], requests: readonly ClaimRequest[]): ClaimRow[] {
  const asked = new Map<number, Date>();
  for (const request of requests) {
    const t = request.slot.getTime();
    if (!asked.has(t)) asked.set(t, request.slot);
  }
  const out: ClaimRow[] = new Array<ClaimRow>(rows.length);
  const databaseTime = new SharedDates();
  const expiries = new SharedDates();
  const previous = new SharedDates();
  for (let i = 0; i < rows.length; i++) {
    const row = rows[i] as TickRow;
    const slotMs = Math.round(row[1]);
    out[i] = {
      job: row[0],
      slot: asked.get(slotMs) ?? new Date(slotMs),
      claimed: row[2],
      reason: row[3],
      token: row[4],
      fence: row[5],
      expires_at: expiries.of(row[6]),
      previous_slot: previous.of(row[7]),
      holder: row[8],
      holder_fence: row[9],
      holder_slot: toDate(row[10]),
      holder_since: toDate(row[11]),
      skip_recorded: row[12],
      buffered: row[13],
      database_time: databaseTime.of(row[14]) as Date,
      took_over: row[15],
    };
  }
  return out;
}

/** A row of claim(), as an array of TICK_COLUMNS: a ClaimRow's values with times as epoch milliseconds. */
type TickRow = [
  job: string,
  slot: number,
  claimed: boolean,
  reason: ClaimRow['reason'],
  token: string | null,
  fence: string | null,
  expires_at: number | null,
  previous_slot: number | null,
  holder: string | null,
  holder_fence: string | null,
  holder_slot: number | null,
  holder_since: number | null,
  skip_recorded: boolean,
  buffered: boolean,
  database_time: number,
  took_over: boolean,
];

/** Dates of epoch milliseconds, the same Date for a run of equal values (rows of one statement mostly share them). */
class SharedDates {
  private ms = Number.NaN;
  private date: Date | null = null;

  of(ms: number | null): Date | null {
    if (ms === null) return null;
    if (ms !== this.ms) {
      this.ms = ms;
      this.date = toDate(ms);
    }
    return this.date;
  }
}

/** Epoch milliseconds (with the microseconds as a fraction) to a Date, as pg parses a timestamptz: to the millisecond. */
function toDate(ms: number | null): Date | null {
  return ms === null ? null : new Date(Math.floor(ms));
}
