// What the table says about a schedule: the next slot, and cron steps that do not divide their
// field's range said plainly (`*/7` in the minute field runs at 0,7,…,56 and then again at 0:
// the gap across the hour is 4 minutes, not 7).
import { parseSchedule, type Schedule } from './schedule.js';

/** A stored schedule ('90s' for every, a cron pattern otherwise), or null if it no longer parses. */
export function storedSchedule(schedule: string, timezone: string | null): Schedule | null {
  try {
    return /\s/.test(schedule.trim())
      ? parseSchedule(timezone ? { cron: schedule, timezone } : { cron: schedule })
      : parseSchedule({ every: schedule as `${number}s` });
  } catch {
    return null;
  }
}

/** The first slot after both `now` and the last claimed slot. */
export function nextRun(schedule: Schedule | null, now: Date, lastSlot: Date | null): Date | null {
  if (!schedule) return null;
  const after = lastSlot && lastSlot > now ? lastSlot : now;
  try {
    return schedule.next(after);
  } catch {
    return null;
  }
}

const FIELDS: Array<{ name: string; unit: string; range: number; wrap: string }> = [
  { name: 'second', unit: 'seconds', range: 60, wrap: 'minute' },
  { name: 'minute', unit: 'minutes', range: 60, wrap: 'hour' },
  { name: 'hour', unit: 'hours', range: 24, wrap: 'day' },
];

/** e.g. "minutes 0,7,…,56: gap of 4 at the hour" for `*\/7 * * * *`; null when every gap is equal. */
export function scheduleNote(schedule: string): string | null {
  const parts = schedule.trim().split(/\s+/);
  if (parts.length < 5) return null;
  const fields = parts.length === 6 ? FIELDS : FIELDS.slice(1);
  const notes: string[] = [];
  fields.forEach((field, i) => {
    const m = /^(\*|\d+)\/(\d+)$/.exec(parts[i]!);
    if (!m) return;
    const start = m[1] === '*' ? 0 : Number(m[1]);
    const step = Number(m[2]);
    if (!(step > 0) || start >= field.range) return;
    const values: number[] = [];
    for (let v = start; v < field.range; v += step) values.push(v);
    const wrapGap = field.range - values[values.length - 1]! + values[0]!;
    if (values.length < 2 || wrapGap === step) return;
    const list = values.length <= 4 ? values.join(',') : `${values[0]},${values[1]},…,${values[values.length - 1]}`;
    notes.push(`${field.unit} ${list}: gap of ${wrapGap} at the ${field.wrap}`);
  });
  return notes.length ? notes.join('; ') : null;
}
