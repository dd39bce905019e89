// Schedules defined as data: validated here with the same rules as code jobs (defineJob, croner
// for cron and timezone), plus what only a stored definition needs (a timezone PostgreSQL and
// Intl read alike, a name without edge spaces, a payload of bounded size and depth), then stored
// by leasehold.define_schedule, which checks them again for callers that bypass the client.
// Removing leaves a tombstone the workers read.
import { InvalidArgumentError } from '../errors.js';
import type { Queryable } from '../db/handle.js';
import type { Duration } from '../validate/duration.js';
import { checkHolder, checkLeaseName, checkScheduleName } from '../validate/names.js';
import { checkOptionKeys, optionKeys } from '../validate/options.js';
import { checkZoneName } from '../validate/timezone.js';
import { defineJob, describeCatchUp, type CatchUpPolicy, type JobDefinition, type OverlapPolicy } from '../job/job.js';
import { CONTROL_DEFAULTS } from './defaults.js';
import { scheduleSettings, type StoredJobRow } from './job-row.js';
import { payloadJson } from './payload.js';
import { sqlError } from './sql-errors.js';

/** A job defined as data: run by every worker that has a handler of that name. */
export interface ScheduleOptions {
  /** Unique job name (also its lease name), 1–200 characters without whitespace at either end; not the name of a code job. */
  name: string;
  /** The name of the handler the workers registered (`startWorker({ handlers: { [name]: fn } })`). */
  handler: string;
  /** Who defines it (an application or person), recorded in leasehold.actions. 1–200 characters. */
  by: string;
  /** Cron pattern (5 fields, or 6 with seconds first). Exactly one of cron and every. */
  cron?: string | undefined;
  /** IANA timezone for `cron`: 'UTC' or an Area/Location name such as 'Europe/Berlin' or 'Etc/GMT+5' (not EST, CET or GMT). @default UTC */
  timezone?: string | undefined;
  /** Fixed interval, aligned to the epoch: '90s', '5m', or milliseconds (at least 1 s). */
  every?: Duration | undefined;
  /** Any JSON value, at most 64 KiB as JSON text and 32 levels of arrays and objects deep; the handler gets it as `ctx.payload`. @default {} */
  payload?: unknown;
  /** Lease TTL. @default '30s' */
  ttl?: Duration | undefined;
  /** As the job option `overlap`. @default 'skip' */
  overlap?: OverlapPolicy | undefined;
  /** Most slots `buffer-all` keeps waiting. @default 10 */
  bufferLimit?: number | undefined;
  /** As the job option `catchUp`. @default 'latest' */
  catchUp?: CatchUpPolicy | undefined;
  /** How late a slot may start and still run. @default the schedule's interval, at most 1h */
  startingDeadline?: Duration | undefined;
  /** Per-run timeout, as the job option `timeout` (null: none). */
  timeout?: Duration | null | undefined;
  /** Spread after each slot, as the job option `jitter` (null: none). */
  jitter?: Duration | null | undefined;
}

/** A stored schedule (leasehold.jobs), as list() and get() return it. */
export interface ScheduleInfo {
  name: string;
  /** 'data' for schedules defined at run time, 'code' for jobs a worker registered from code. */
  source: 'code' | 'data';
  handler: string | null;
  schedule: string;
  timezone: string | null;
  intervalMs: number | null;
  ttlMs: number;
  overlap: string;
  catchUp: string;
  bufferLimit: number | null;
  startingDeadlineMs: number | null;
  timeoutMs: number | null;
  jitterMs: number | null;
  payload: unknown;
  definedBy: string | null;
  revision: number;
  paused: { at: Date; by: string | null; reason: string | null } | null;
}

export interface DefineResult {
  name: string;
  revision: number;
  /** True when the name was new (or defined again after its removal). */
  created: boolean;
  /** False when the definition equals the stored one: nothing was written. */
  changed: boolean;
  /**
   * How many live workers have registered the handler now. 0: no worker runs the schedule until
   * one with the handler starts; meanwhile its slots are recorded missed, naming the handler.
   */
  liveWorkers: number;
}

const SCHEDULE_OPTION_KEYS = optionKeys<ScheduleOptions>({
  name: true,
  handler: true,
  by: true,
  cron: true,
  timezone: true,
  every: true,
  payload: true,
  ttl: true,
  overlap: true,
  bufferLimit: true,
  catchUp: true,
  startingDeadline: true,
  timeout: true,
  jitter: true,
});

/** The validated arguments of leasehold.define_schedule. */
export interface CheckedSchedule {
  job: JobDefinition;
  handler: string;
  by: string;
  payloadJson: string;
  timeoutMs: number | null;
  jitterMs: number | null;
}

/** Validates a definition as defineJob does a code job, plus handler, by, payload, timeout and jitter. */
export function checkSchedule(options: ScheduleOptions): CheckedSchedule {
  if (!options || typeof options !== 'object') throw new InvalidArgumentError('schedule', 'define() needs an options object.');
  const where = typeof options.name === 'string' ? `schedule "${options.name}"` : 'schedule';
  checkOptionKeys(options, SCHEDULE_OPTION_KEYS, where);
  const { handler, by, payload, timeout, jitter, ...jobOptions } = options;
  // before the worker's rules, which take any name Intl knows ('EST'); see validate/timezone.ts
  checkZoneName(options.timezone, where);
  // the worker's own rules, timeout and jitter included: what define() accepts, every worker runs
  // (null, like leaving them out, means none)
  const job = defineJob({ ...jobOptions, ...(timeout != null ? { timeout } : {}), ...(jitter != null ? { jitter } : {}), handler: noHandler });
  checkScheduleName(job.name);
  const handlerName = checkText(handler, 'handler', `${where}: handler`);
  const byName = checkHolder(by);
  const json = payloadJson(payload, where);
  return { job, handler: handlerName, by: byName, payloadJson: json, timeoutMs: job.timeoutMs, jitterMs: job.jitterMs > 0 ? job.jitterMs : null };
}

function checkText(value: unknown, argument: string, what: string): string {
  try {
    return checkHolder(value);
  } catch (error) {
    if (error instanceof InvalidArgumentError) throw new InvalidArgumentError(argument, error.message.replace(/^holder/, what));
    throw error;
  }
}

async function noHandler(): Promise<void> {
  // a data job's handler is looked up by name on each worker
}


export async function defineSchedule(db: Queryable, options: ScheduleOptions): Promise<DefineResult> {
  const checked = checkSchedule(options);
  const { job } = checked;
  const isCron = /\s/.test(job.schedule.expression);
  const defaultDeadline = options.startingDeadline === undefined;
  const { rows } = await run(() =>
    // durations go as milliseconds times an interval: '2592000000 milliseconds' as interval text overflows before PostgreSQL 15
    db.query<{ name: string; revision: string; created: boolean; changed: boolean; live_workers: number }>(`select * from leasehold.define_schedule(p_name => $1, p_handler => $2, p_by => $3, p_cron => $4, p_every => $5::float8 * interval '1 millisecond',
         p_timezone => $6, p_payload => $7::jsonb, p_ttl => $8::float8 * interval '1 millisecond', p_overlap => $9, p_catch_up => $10,
         p_buffer_limit => $11, p_starting_deadline => $12::float8 * interval '1 millisecond', p_timeout => $13::float8 * interval '1 millisecond',
         p_jitter => $14::float8 * interval '1 millisecond')`,
      [
        job.name,
        checked.handler,
        checked.by,
        isCron ? job.schedule.expression : null,
        isCron ? null : job.schedule.nominalIntervalMs,
        job.schedule.timezone,
        checked.payloadJson,
        job.ttlMs,
        job.overlap,
        describeCatchUp(job.catchUp),
        job.bufferLimit,
        defaultDeadline ? null : job.startingDeadlineMs,
        checked.timeoutMs,
        checked.jitterMs,
      ]),
  );
  const row = rows[0];
  if (!row) throw new Error('leasehold.define_schedule returned no row');
  return { name: row.name, revision: Number(row.revision), created: row.created, changed: row.changed, liveWorkers: row.live_workers };
}

export async function removeSchedule(db: Queryable, name: string, options: { by: string }): Promise<boolean> {
  checkLeaseName(name);
  if (!options || typeof options !== 'object') throw new InvalidArgumentError('by', 'remove(name, { by }) needs an options object naming who removes.');
  checkOptionKeys(options, ['by'], 'remove()');
  const by = checkHolder(options.by);
  const { rows } = await run(() =>
    db.query<{ removed: boolean }>('select leasehold.remove_schedule($1, $2) as removed', [name, by]),
  );
  return rows[0]?.removed ?? false;
}

interface JobRow extends StoredJobRow {
  defined_by: string | null;
}

const num = (value: string | null): number | null => (value === null ? null : Number(value));

function toInfo(row: JobRow): ScheduleInfo {
  return {
    name: row.name,
    source: row.source,
    handler: row.handler,
    ...scheduleSettings(row),
    bufferLimit: row.buffer_limit,
    startingDeadlineMs: num(row.starting_deadline_ms),
    timeoutMs: num(row.timeout_ms),
    jitterMs: num(row.jitter_ms),
    payload: row.payload,
    definedBy: row.defined_by,
    revision: Number(row.revision),
    paused: row.paused_at ? { at: row.paused_at, by: row.paused_by, reason: row.pause_reason } : null,
  };
}

const COLUMNS = `name, source, handler, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, buffer_limit,
  starting_deadline_ms, timeout_ms, jitter_ms, payload, defined_by, revision, paused_at, paused_by, pause_reason`;

/** Every job not removed (code and data), by name, read in pages (a reader's grant suffices). */
export async function listSchedules(db: Queryable, filter: { source?: 'code' | 'data' } = {}): Promise<ScheduleInfo[]> {
  const all: ScheduleInfo[] = [];
  let after = '';
  for (;;) {
    const { rows } = await run(() =>
      db.query<JobRow>(`select ${COLUMNS} from leasehold.jobs
          where removed_at is null and name > $1 and ($2::text is null or source = $2)
          order by name limit $3`,
        [after, filter.source ?? null, CONTROL_DEFAULTS.listPage]),
    );
    all.push(...rows.map(toInfo));
    if (rows.length < CONTROL_DEFAULTS.listPage) return all;
    after = rows[rows.length - 1]?.name ?? after;
  }
}

export async function getSchedule(db: Queryable, name: string): Promise<ScheduleInfo | null> {
  const { rows } = await run(() =>
    db.query<JobRow>(`select ${COLUMNS} from leasehold.jobs where name = $1 and removed_at is null`, [name]),
  );
  return rows[0] ? toInfo(rows[0]) : null;
}

/** Where the control statements go: a client's control pool, or the CLI's handle. */

/** Runs a statement; the protocol's own refusals (LH00x) become typed errors. */
export async function run<T>(statement: () => Promise<T>): Promise<T> {
  try {
    return await statement();
  } catch (error) {
    throw sqlError(error) ?? error;
  }
}
