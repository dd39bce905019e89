// Run now and backfill (JobControl.runNow, .backfill, .request, .waitForRequest, and the CLI's
// run-now and backfill commands): each act is
// one call of leasehold.run_now (sql/baseline/4_control.sql; with slots, a backfill), which
// checks its input again, records the act (leasehold.actions) and leaves a request that the
// workers with a handler for the job take (src/worker/requests.ts). Backfill slots are computed
// here, from the job's stored schedule, with the same code the workers use.
import type { Queryable } from '../db/handle.js';
import { InvalidArgumentError } from '../errors.js';
import { BACKFILL_DEFAULTS, REQUEST_WAIT_DEFAULTS } from '../lease/defaults.js';
import { storedSchedule } from '../schedule/schedule-text.js';
import { slotsBetween } from '../schedule/schedule.js';
import type { Duration } from '../validate/duration.js';
import { checkHolder, checkLeaseName } from '../validate/names.js';
import { checkOptionKeys, optionKeys } from '../validate/options.js';
import { durationSetting, integerSetting } from '../validate/settings.js';
import type { RunOutcome } from '../job/run-outcomes.js';

export interface RunNowOptions {
  /** Who asks (a person or a program: 'alice', 'billing-api'): recorded with the request and in leasehold.actions. 1–200 characters. */
  by: string;
}

export interface BackfillOptions {
  /** Start of the range, exclusive: a Date or an ISO 8601 string. */
  from: Date | string;
  /** End of the range, inclusive; not after the database's now. */
  to: Date | string;
  /** Who asks: recorded with each request and in leasehold.actions. */
  by: string;
  /** Most slots the range may hold (the hard maximum is 1000); more is an InvalidArgumentError. @default 100 */
  max?: number | undefined;
  /** Compute the slots and request nothing. @default false */
  dryRun?: boolean | undefined;
}

export interface BackfillResult {
  job: string;
  /** The job's slots in (from, to], oldest first. */
  slots: Date[];
  /** The slots this call requested, with their request ids (empty for a dry run). */
  requested: Array<{ id: string; slot: Date }>;
  /** Slots of the range some earlier or concurrent backfill had requested already: not requested again. */
  alreadyRequested: number;
}

/** A run-now or backfill request and what became of it (leasehold.run_request_status). */
export interface RunRequest {
  id: string;
  job: string;
  kind: 'manual' | 'backfill';
  /** The backfilled slot, or when the run now was asked for. */
  slot: Date;
  requestedBy: string;
  requestedAt: Date;
  /** pending: no worker took it yet (or it waits for the lease); claimed: its run is running; done: its run ended; skipped: it did not run. */
  state: 'pending' | 'claimed' | 'done' | 'skipped';
  /** The worker that decided it. */
  decidedBy: string | null;
  fence: number | null;
  /** The run's outcome once it ran ('running' while it runs). */
  outcome: RunOutcome | null;
  startedAt: Date | null;
  finishedAt: Date | null;
  error: string | null;
  /** For a skipped request: the holder of the lease that made it skip. */
  skippedFor: { holder: string | null; fence: number | null } | null;
}

export interface WaitForRequestOptions {
  /** Longest to wait for the request to end (done or skipped). @default '5m' */
  timeout?: Duration | undefined;
}

const RUN_NOW_KEYS = optionKeys<RunNowOptions>({ by: true });
const BACKFILL_KEYS = optionKeys<BackfillOptions>({ from: true, to: true, by: true, max: true, dryRun: true });
const WAIT_KEYS = optionKeys<WaitForRequestOptions>({ timeout: true });
const WAIT_POLL_MS = 200;

function query<R extends Record<string, unknown>>(db: Queryable, text: string, values: unknown[]) {
  return db.query<R>(text, values);
}

function checkBy(by: unknown): string {
  try {
    return checkHolder(by);
  } catch (error) {
    throw new InvalidArgumentError('by', `by (who asks) ${(error as Error).message.replace(/^holder /, '')}`);
  }
}

function checkOptions<T>(options: T | undefined, keys: readonly string[], where: string): T {
  if (options === null || typeof options !== 'object') throw new InvalidArgumentError('options', `${where} needs an options object with at least { by }.`);
  checkOptionKeys(options, keys, where);
  return options;
}

/** Asks for one extra run of `job` now; resolves to the request id. */
export async function runNow(db: Queryable, job: string, options: RunNowOptions): Promise<string> {
  const name = checkLeaseName(job);
  const by = checkBy(checkOptions(options, RUN_NOW_KEYS, 'runNow()').by);
  const { rows } = await query<{ id: string }>(db, 'select request_id::text as id from leasehold.run_now($1, $2)', [name, by]).catch(unknownJob(name));
  return rows[0]!.id;
}

/** Requests the job's slots in (from, to]; each slot at most once, however many backfills ask for it. */
export async function backfill(db: Queryable, job: string, options: BackfillOptions): Promise<BackfillResult> {
  const name = checkLeaseName(job);
  const opts = checkOptions(options, BACKFILL_KEYS, 'backfill()');
  const by = checkBy(opts.by);
  const from = instant(opts.from, 'from');
  const to = instant(opts.to, 'to');
  const max = integerSetting(opts.max, BACKFILL_DEFAULTS.max, 'max', 'backfill max');
  if (opts.dryRun !== undefined && typeof opts.dryRun !== 'boolean') throw new InvalidArgumentError('dryRun', 'dryRun must be true or false.');
  if (from >= to) throw new InvalidArgumentError('from', `backfill: from (${from.toISOString()}) must be before to (${to.toISOString()}).`);
  const { rows } = await query<{ schedule: string; timezone: string | null; now: Date }>(
    db,
    'select j.schedule, j.timezone, now() as now from leasehold.jobs j where j.name = $1',
    [name],
  );
  const row = rows[0];
  if (!row) throw noSuchJob(name);
  if (to > row.now) {
    throw new InvalidArgumentError('to', `backfill: to (${to.toISOString()}) is in the future (the database's time is ${row.now.toISOString()}); a backfill runs past slots only.`);
  }
  const schedule = storedSchedule(row.schedule, row.timezone);
  if (!schedule) throw new InvalidArgumentError('job', `backfill: the stored schedule of "${name}" (${row.schedule}) does not parse.`);
  const slots = slotsBetween(schedule, from, to, max + 1);
  if (slots.length > max) {
    throw new InvalidArgumentError('max', `backfill: the range holds more than ${max} slots of "${name}" (${schedule.description}); narrow it or raise max (at most ${BACKFILL_DEFAULTS.max.max}).`);
  }
  if (slots.length === 0 || opts.dryRun === true) return { job: name, slots, requested: [], alreadyRequested: 0 };
  const created = await query<{ request_id: string; slot: Date }>(
    db,
    'select request_id::text as request_id, slot from leasehold.run_now($1, $2, $3::timestamptz[])',
    [name, by, slots],
  ).catch(unknownJob(name));
  const requested = created.rows.map((r) => ({ id: r.request_id, slot: r.slot }));
  return { job: name, slots, requested, alreadyRequested: slots.length - requested.length };
}

/** The request `id`, or null if there is none (never made, or deleted). */
export async function request(db: Queryable, id: string): Promise<RunRequest | null> {
  if (typeof id !== 'string' || !/^[1-9]\d{0,18}$/.test(id)) throw new InvalidArgumentError('id', `a request id is the positive integer runNow() returned, as a string (got ${JSON.stringify(id)}).`);
  const { rows } = await query<RequestRow>(db, 'select *, id::text as id from leasehold.run_request_status where id = $1::bigint', [id]);
  return rows[0] ? toRequest(rows[0]) : null;
}

/** Polls the request until it is done or skipped; resolves to it. Rejects with InvalidArgumentError for an unknown id. */
export async function waitForRequest(db: Queryable, id: string, options: WaitForRequestOptions = {}): Promise<RunRequest> {
  checkOptionKeys(options, WAIT_KEYS, 'waitForRequest()');
  const timeoutMs = durationSetting(options.timeout, REQUEST_WAIT_DEFAULTS.timeout, 'timeout');
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const current = await request(db, id);
    if (!current) throw new InvalidArgumentError('id', `there is no run request ${id}.`);
    if (current.state === 'done' || current.state === 'skipped' || Date.now() >= deadline) return current;
    await new Promise((resolve) => setTimeout(resolve, Math.min(WAIT_POLL_MS, Math.max(0, deadline - Date.now()))));
  }
}

interface RequestRow extends Record<string, unknown> {
  id: string;
  job: string;
  kind: 'manual' | 'backfill';
  slot: Date;
  requested_by: string;
  requested_at: Date;
  state: RunRequest['state'];
  decided_by: string | null;
  fence: string | null;
  outcome: RunOutcome | null;
  started_at: Date | null;
  finished_at: Date | null;
  error: string | null;
  skip_holder: string | null;
  skip_fence: string | null;
}

function toRequest(row: RequestRow): RunRequest {
  return {
    id: row.id,
    job: row.job,
    kind: row.kind,
    slot: row.slot,
    requestedBy: row.requested_by,
    requestedAt: row.requested_at,
    state: row.state,
    decidedBy: row.decided_by,
    fence: row.fence === null ? null : Number(row.fence),
    outcome: row.outcome,
    startedAt: row.started_at,
    finishedAt: row.finished_at,
    error: row.error,
    skippedFor: row.state === 'skipped' ? { holder: row.skip_holder, fence: row.skip_fence === null ? null : Number(row.skip_fence) } : null,
  };
}

function instant(value: unknown, what: 'from' | 'to'): Date {
  const date = value instanceof Date ? value : typeof value === 'string' && /^\d{4}-\d{2}-\d{2}/.test(value) ? new Date(value) : null;
  if (!date || Number.isNaN(date.getTime())) {
    throw new InvalidArgumentError(what, `backfill: ${what} must be a Date or an ISO 8601 time such as '2026-11-30T00:00:00Z' (got ${JSON.stringify(value)}).`);
  }
  return date;
}

function noSuchJob(name: string): InvalidArgumentError {
  return new InvalidArgumentError('job', `there is no job named "${name}" (a job exists once a worker registered it; leasehold status lists them).`);
}

/** The SQL functions' "no job" (P0002) as the InvalidArgumentError the checks here throw. */
function unknownJob(name: string): (error: unknown) => never {
  return (error) => {
    const code = (error as { code?: unknown; cause?: { code?: unknown } }).code ?? (error as { cause?: { code?: unknown } }).cause?.code;
    if (code === 'P0002') throw noSuchJob(name);
    throw error;
  };
}
