// Schedules no live worker can run: jobs defined as data whose handler no live worker registered
// (leasehold.unhandled_schedules, sql/baseline/2_scheduler.sql). Without this they stayed idle
// with nothing recorded. The first live worker of each login role (one per service) records the
// slots of those its role may act for as
// missed, naming the handler, so such a schedule shows wherever a missed slot shows: status
// attention, `leasehold runs`, the dashboard's timeline, the missed-slots metric and its alert.
import type { LeaseholdEmitter } from '../observe/events.js';
import { storedScheduleSpec } from '../control/job-row.js';
import type { Logger } from '../observe/logger.js';
import { parseSchedule, slotsBetween, type Schedule } from '../schedule/schedule.js';
import { MAX_MISSED_RECORDED } from './catch-up.js';
import { NOTIFIED_POLL_MS } from './change-listener.js';
import type { SchedulerStore, UnhandledRow } from './claims.js';

/** How often that worker looks while a schedule is unhandled (its slots are recorded as they pass) or changes are polled. */
export const UNHANDLED_CHECK_MS = 5_000;
/**
 * A slot is recorded only this long after it passed: a worker that has the handler but is not
 * in the list (its liveness is off) has started it by then, and record_missed_slots() leaves a
 * slot with a run alone.
 */
export const UNHANDLED_GRACE_MS = 5_000;
/** Nothing older than this is recorded at once (a schedule defined long ago, first seen now). */
const LOOK_BACK_MS = 24 * 3_600_000;

export interface UnhandledSettings {
  store: SchedulerStore;
  events: LeaseholdEmitter;
  logger: Logger;
  holder: string;
  /** Whether this worker is the first live worker of its login role now (one recorder per service). */
  isFirst: () => boolean;
}

/** The reason recorded with each missed slot of a schedule whose handler no live worker has. */
export function unhandledReason(handler: string): string {
  return `no live worker has handler "${handler}": start a worker with it (startWorker({ handlers }), or leasehold worker MODULE exporting handlers)`;
}

/**
 * The watch of one worker. A schedule becomes unhandled when it is defined or changed (a
 * notification pokes the watch), or when the last live worker with its handler goes (a changed
 * list of live workers pokes it). So while notifications arrive and nothing is unhandled, it looks
 * only every NOTIFIED_POLL_MS (a missed change still heals); every UNHANDLED_CHECK_MS otherwise.
 */
export class UnhandledWatch {
  /** Per job: the time up to which its slots were looked at. */
  private readonly lookedUpTo = new Map<string, number>();
  private running = false;
  /** Whether the last look found a schedule unhandled: its slots are recorded as they pass. */
  private unhandled = false;
  private started = false;
  private notified = false;
  /** A poke came while a look ran: look again right after it. */
  private again = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(
    private readonly settings: UnhandledSettings,
    private readonly everyMs = UNHANDLED_CHECK_MS,
    private readonly quietMs = NOTIFIED_POLL_MS,
  ) {}

  /** Starts looking (the first look after everyMs); returns the function that stops it. */
  start(): () => void {
    this.started = true;
    this.arm(this.everyMs);
    return () => {
      this.started = false;
      clearTimeout(this.timer);
    };
  }

  /** Looks now: a definition changed, or the list of live workers did. */
  poke(): void {
    if (!this.started) return;
    if (this.running) this.again = true;
    else this.arm(0);
  }

  /** Whether changes arrive as notifications (change-listener.ts): the look slows down while nothing is unhandled. */
  setNotified(notified: boolean): void {
    this.notified = notified;
  }

  private arm(ms: number): void {
    if (!this.started) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      void this.check().then(() => {
        const now = this.again;
        this.again = false;
        this.arm(now ? 0 : this.unhandled || !this.notified ? this.everyMs : this.quietMs);
      });
    }, ms);
    this.timer.unref();
  }

  /** One look: records the passed slots of every unhandled schedule; never throws. */
  async check(): Promise<void> {
    const { store, events, logger, holder, isFirst } = this.settings;
    if (this.running) return;
    if (!isFirst()) {
      this.unhandled = false; // another worker records them
      return;
    }
    this.running = true;
    try {
      const rows = await store.unhandledSchedules();
      this.unhandled = rows.length > 0;
      const byHandler = new Map<string, Array<{ job: string; slots: Date[] }>>();
      const listed = new Set<string>();
      for (const row of rows) {
        listed.add(row.job);
        const slots = this.passedSlots(row);
        if (slots.length === 0) continue;
        const list = byHandler.get(row.handler) ?? [];
        list.push({ job: row.job, slots });
        byHandler.set(row.handler, list);
      }
      // a schedule whose handler came back starts afresh if it is lost again
      for (const job of this.lookedUpTo.keys()) if (!listed.has(job)) this.lookedUpTo.delete(job);
      for (const [handler, missed] of byHandler) {
        const recorded = await store.recordMissedMany(missed, unhandledReason(handler), holder);
        for (const [job, slots] of recorded) events.emit('slot:missed', { job, slots });
      }
    } catch (error) {
      logger.warn({ event: 'unhandled:check-failed', err: String(error) }, 'could not check for schedules whose handler no live worker has');
    } finally {
      this.running = false;
    }
  }

  private passedSlots(row: UnhandledRow): Date[] {
    const schedule = scheduleOf(row);
    if (!schedule) return [];
    const upTo = row.database_time.getTime() - UNHANDLED_GRACE_MS;
    const from = Math.max(row.since.getTime(), this.lookedUpTo.get(row.job) ?? Number.NEGATIVE_INFINITY, upTo - LOOK_BACK_MS);
    this.lookedUpTo.set(row.job, Math.max(from, upTo));
    if (upTo <= from) return [];
    return slotsBetween(schedule, new Date(from), new Date(upTo), MAX_MISSED_RECORDED);
  }
}

/** The stored schedule, as the workers would run it; null when it cannot be read (the worker that loads it says why). */
function scheduleOf(row: UnhandledRow): Schedule | null {
  try {
    return parseSchedule(storedScheduleSpec(row));
  } catch {
    return null;
  }
}
