// Schedules turn into slots: the exact instants a job is due. Pure functions of time, with an
// explicit `after` argument, so they can be tested without waiting and computed on the
// database-corrected clock.
//
// - cron: croner's rules, with an optional seconds field and an IANA timezone. On the
//   spring-forward day a time that does not exist (02:30 Europe/Berlin) runs once at the
//   first valid minute after the gap (03:00); on the fall-back day a time that occurs twice
//   runs once, at its first occurrence. Hourly patterns run in both repeated hours.
// - every: fixed intervals aligned to the Unix epoch, so every worker computes the same slots
//   without talking to the others (every 90s: ..., 00:00:00, 00:01:30, 00:03:00, ...).
import { Cron } from 'croner';
import { InvalidArgumentError } from '../errors.js';
import { formatDuration, parseBoundedDuration, type Duration } from '../validate/duration.js';

export type ScheduleSpec = { cron: string; timezone?: string } | { every: Duration };

export interface Schedule {
  /** 'cron 0 2 * * * (Europe/Berlin)' or 'every 90s' */
  readonly description: string;
  /** The pattern or interval as written ('0 2 * * *', '90s'). */
  readonly expression: string;
  readonly timezone: string | null;
  /** The usual gap between slots, for duration-vs-interval warnings. */
  readonly nominalIntervalMs: number;
  /** The first slot strictly after `after`, or null if there is none. */
  next(after: Date): Date | null;
}

const MIN_INTERVAL_MS = 1_000;
const MAX_INTERVAL_MS = 366 * 24 * 3_600_000;

/** `job` names the job in error messages; without it they speak of the schedule alone. */
export function parseSchedule(spec: ScheduleSpec, job?: string): Schedule {
  if (!spec || typeof spec !== 'object') {
    throw new InvalidArgumentError('schedule', `${prefix(job)}give a schedule as { cron: '*/5 * * * *' } or { every: '90s' }.`);
  }
  const hasCron = 'cron' in spec && spec.cron !== undefined;
  const hasEvery = 'every' in spec && spec.every !== undefined;
  if (hasCron === hasEvery) {
    throw new InvalidArgumentError('schedule', `${prefix(job)}give exactly one of cron or every.`);
  }
  return hasCron ? cronSchedule(spec as { cron: string; timezone?: string }, job) : intervalSchedule((spec as { every: Duration }).every, prefix(job));
}

/** The start of a message about `job`'s schedule ('' without a job). Built only for a message: a cached pattern needs none. */
function prefix(job: string | undefined): string {
  return job === undefined ? '' : `job "${job}": `;
}

function intervalSchedule(every: Duration, where: string): Schedule {
  const ms = parseBoundedDuration(every, `${where}every`, MIN_INTERVAL_MS, MAX_INTERVAL_MS);
  // one next() per interval, as for a cron pattern: the worker's jobs of one interval then
  // share each slot's Date (next-slots.ts) instead of one Date each per tick
  const cached = INTERVAL_CACHE.get(ms);
  if (cached) return { ...cached };
  const schedule: Schedule = {
    description: `every ${formatDuration(ms)}`,
    expression: formatDuration(ms),
    timezone: null,
    nominalIntervalMs: ms,
    next: (after) => new Date((Math.floor(after.getTime() / ms) + 1) * ms),
  };
  INTERVAL_CACHE.set(ms, schedule);
  return { ...schedule };
}

/** Interval schedules by their milliseconds (a handful of distinct intervals in practice). */
const INTERVAL_CACHE = new Map<number, Schedule>();

function cronSchedule(spec: { cron: string; timezone?: string }, job: string | undefined): Schedule {
  const { cron: pattern, timezone } = spec;
  if (typeof pattern !== 'string' || pattern.trim() === '') {
    throw new InvalidArgumentError('cron', `${prefix(job)}cron must be a pattern such as '*/5 * * * *'.`);
  }
  // a cached pattern and timezone were checked when first parsed; checking a timezone builds an
  // Intl.DateTimeFormat, whose ICU memory is not given back (10,000 checks: about 240 MB of RSS)
  const cached = CRON_CACHE.get(timezone ?? '')?.get(pattern.trim());
  if (cached) return { ...cached };
  const where = prefix(job);
  const fields = pattern.trim().split(/\s+/).length;
  if (fields !== 5 && fields !== 6) {
    throw new InvalidArgumentError(
      'cron',
      `${where}invalid cron '${pattern}': it has ${fields} field(s); a pattern has 5 ('minute hour day month weekday'), or 6 with seconds first.`,
    );
  }
  if (timezone !== undefined) checkTimezone(timezone, where);
  let cron: Cron<unknown>;
  try {
    cron = new Cron(pattern.trim(), { paused: true, ...(timezone ? { timezone } : {}) });
  } catch (error) {
    throw new InvalidArgumentError('cron', `${where}invalid cron '${pattern}': ${describeCronError(pattern, error)}`);
  }
  const probe = new Date(Date.UTC(2000, 0, 1));
  const first = cron.nextRun(probe);
  const second = first ? cron.nextRun(first) : null;
  if (!first || !second) {
    throw new InvalidArgumentError('cron', `${where}cron '${pattern}' never fires (or fires only once); check the day and month fields.`);
  }
  // The smallest gap over a sample of slots: a "*/5 9-17 * * *" job is judged by its 5 minutes.
  let nominal = second.getTime() - first.getTime();
  let at = second;
  for (let i = 0; i < 50; i++) {
    const next = cron.nextRun(at);
    if (!next) break;
    nominal = Math.min(nominal, next.getTime() - at.getTime());
    at = next;
  }
  const schedule: Schedule = {
    description: `cron ${pattern.trim()}${timezone ? ` (${timezone})` : ''}`,
    expression: pattern.trim(),
    timezone: timezone ?? null,
    nominalIntervalMs: nominal,
    next: lastAnswerKept(cron),
  };
  const byPattern = CRON_CACHE.get(timezone ?? '') ?? new Map<string, Schedule>();
  CRON_CACHE.set(timezone ?? '', byPattern.set(pattern.trim(), schedule));
  return { ...schedule };
}

// A croner instance costs about 80 KiB (it precomputes a year of matches) and nextRun() is a
// pure function of its argument, so jobs with the same pattern and timezone share one. Keyed by
// timezone ('' for none), then trimmed pattern: no key string to build per job.
const CRON_CACHE = new Map<string, Map<string, Schedule>>();

/**
 * cron.nextRun, remembering its last answer. The jobs sharing a pattern ask it for the same
 * instant one after another (at start, and when their common slot comes due), and each nextRun
 * leaves about 1 KiB of garbage: 10,000 jobs grew the heap by 30 MiB of it at start.
 */
function lastAnswerKept(cron: Cron<unknown>): (after: Date) => Date | null {
  let lastAfter = Number.NaN;
  let lastNext: number | null = null;
  return (after) => {
    const at = after.getTime();
    if (at !== lastAfter) {
      lastNext = cron.nextRun(after)?.getTime() ?? null;
      lastAfter = at;
    }
    // a new Date each time: callers keep (and may change) the one they get
    return lastNext === null ? null : new Date(lastNext);
  };
}

const FIELD_NAMES_5 = ['minute', 'hour', 'day of month', 'month', 'day of week'];
const FIELD_NAMES_6 = ['second', ...FIELD_NAMES_5];

/** Names the field and its position in croner's message, e.g. "field 2 (hour) '25': ...". */
function describeCronError(pattern: string, error: unknown): string {
  const message = error instanceof Error ? error.message.replace(/^CronPattern: /, '') : String(error);
  const parts = pattern.trim().split(/\s+/);
  const names = parts.length === 5 ? FIELD_NAMES_5 : FIELD_NAMES_6;
  const entry = /configuration entry (\d+) \((.*?)\)/.exec(message);
  if (entry) {
    // croner numbers entries of its 6-field form (seconds first) from 0
    const index = Number(entry[1]);
    const position = parts.length === 5 ? index : index + 1;
    return `field ${position} (${FIELD_NAMES_6[index] ?? 'year'}) '${entry[2]}' ${message.replace(/.*\) /, '')}`;
  }
  const value = /Invalid value for (\w[\w ]*): (.*)$/.exec(message);
  if (value) {
    const name = (value[1] ?? '').toLowerCase();
    const index = names.findIndex((n) => n.replace(/ /g, '') === name.replace(/ /g, '') || n.startsWith(name));
    return `field ${index + 1} (${names[index] ?? name}) has an invalid value '${value[2]}'`;
  }
  return message;
}

function checkTimezone(timezone: string, where: string): void {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: timezone });
  } catch {
    throw new InvalidArgumentError(
      'timezone',
      `${where}unknown timezone '${timezone}': use an IANA name such as 'Europe/Berlin' or 'America/New_York'.`,
    );
  }
}

/** The slots in (after, until], oldest first, at most `limit` of them. */
export function slotsBetween(schedule: Schedule, after: Date, until: Date, limit = 10_000): Date[] {
  const slots: Date[] = [];
  for (let slot = schedule.next(after); slot && slot <= until && slots.length < limit; slot = schedule.next(slot)) {
    slots.push(slot);
  }
  return slots;
}
