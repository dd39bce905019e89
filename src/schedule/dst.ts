// Marks slots that fall on a daylight-saving transition, for previews: a slot at the instant
// clocks jump forward (times in the skipped hour run then), or a local time that happens
// twice on a fall-back night.

/** Offset of `timezone` from UTC at `at`, in minutes (e.g. 60 for CET, 120 for CEST). */
export function utcOffsetMinutes(at: Date, timezone: string): number {
  const parts = new Intl.DateTimeFormat('en-US', {
    timeZone: timezone,
    hourCycle: 'h23',
    year: 'numeric',
    month: 'numeric',
    day: 'numeric',
    hour: 'numeric',
    minute: 'numeric',
    second: 'numeric',
  }).formatToParts(at);
  const get = (type: string) => Number(parts.find((p) => p.type === type)?.value);
  const local = Date.UTC(get('year'), get('month') - 1, get('day'), get('hour'), get('minute'), get('second'));
  return Math.round((local - Math.floor(at.getTime() / 1000) * 1000) / 60_000);
}

/** Local wall-clock time of `at` in `timezone`, as 'YYYY-MM-DD HH:mm:ss'. */
export function localTime(at: Date, timezone: string): string {
  return new Intl.DateTimeFormat('sv-SE', {
    timeZone: timezone,
    year: 'numeric',
    month: '2-digit',
    day: '2-digit',
    hour: '2-digit',
    minute: '2-digit',
    second: '2-digit',
  }).format(at);
}

export type DstMark = { kind: 'gap'; note: string } | { kind: 'repeat'; note: string } | null;

export function dstMark(slot: Date, timezone: string): DstMark {
  const offset = utcOffsetMinutes(slot, timezone);
  const before = utcOffsetMinutes(new Date(slot.getTime() - 1), timezone);
  if (before < offset) {
    return {
      kind: 'gap',
      note: `DST gap: clocks jump ${offset - before} min forward at ${localTime(slot, timezone).slice(11, 16)}; a scheduled time inside the gap runs at this moment, once`,
    };
  }
  // The same wall time exists under the other offset of a fall-back transition nearby?
  for (const other of [utcOffsetMinutes(new Date(slot.getTime() - 3 * 3_600_000), timezone), utcOffsetMinutes(new Date(slot.getTime() + 3 * 3_600_000), timezone)]) {
    if (other === offset) continue;
    const twin = new Date(slot.getTime() + (offset - other) * 60_000);
    if (utcOffsetMinutes(twin, timezone) === other && twin.getTime() !== slot.getTime()) {
      const first = twin.getTime() > slot.getTime();
      return {
        kind: 'repeat',
        note: `DST repeat: ${localTime(slot, timezone).slice(11, 16)} happens twice tonight; this slot is the ${first ? 'first' : 'second'}`,
      };
    }
  }
  return null;
}
