// The JSON form of the client's and the worker's events, one vocabulary for every process that
// reports them as JSON lines (test fixtures, the demo's workers, the fault suite's workers):
// dates as ISO strings, errors by reason and message, lease events by lease `name`, run and
// slot events by `job`. Built on the public events API (EventSource), nothing internal.
import type { EventSource } from '../monitor/metrics.js';
import { skippedSlotFields, type LeaseholdEvents } from '../observe/events.js';

export type EventFields = Record<string, string | number | boolean | null | string[]>;

const iso = (date: Date | null): string | null => date?.toISOString() ?? null;
/** Messages are cut short: a history line stays one short line. */
const short = (text: string, max = 300) => text.slice(0, max);

/** The events that have a JSON form, each with its mapping. */
export const EVENT_JSON = {
  'lease:acquired': (lease) => ({ name: lease.name, slot: iso(lease.slot), fence: lease.fence, holder: lease.holder, tookOver: lease.tookOver }),
  'lease:lost': (lease, error) => ({ name: lease.name, fence: lease.fence, reason: error.reason, message: short(error.message) }),
  'liveness:lost': (error) => ({ error: short(error.message, 200) }),
  'run:started': (run) => ({ job: run.job, slot: run.slot.toISOString(), fence: run.fence, lateMs: run.lateMs }),
  'run:finished': (run) => ({
    job: run.job,
    slot: run.slot.toISOString(),
    fence: run.fence,
    outcome: run.outcome,
    error: run.error,
    durationMs: Math.round(run.durationMs),
  }),
  'slot:skipped': (skip) => skippedSlotFields(skip),
  'slot:missed': (missed) => ({ job: missed.job, slots: missed.slots.map((s) => s.toISOString()) }),
} satisfies { [E in keyof LeaseholdEvents]?: (...args: LeaseholdEvents[E]) => EventFields };

export type ReportedEvent = keyof typeof EVENT_JSON;

/** The JSON form of `E`, e.g. EventJson<'slot:skipped'> for a skip line's fields. */
export type EventJson<E extends ReportedEvent> = ReturnType<(typeof EVENT_JSON)[E]>;

/**
 * Subscribes to `events` (event name → the tag its lines carry) and calls `write` with each
 * event's tag and JSON fields. Returns the function that unsubscribes.
 */
export function reportEvents(
  source: EventSource,
  events: { [E in ReportedEvent]?: string },
  write: (tag: string, fields: EventFields) => void,
): () => void {
  const offs = (Object.keys(events) as ReportedEvent[]).map((event) => {
    const tag = events[event] as string;
    const toJson = EVENT_JSON[event] as (...args: unknown[]) => EventFields;
    return source.on(event, (...args: unknown[]) => write(tag, toJson(...args)));
  });
  return () => {
    for (const off of offs) off();
  };
}
