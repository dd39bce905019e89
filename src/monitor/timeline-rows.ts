// The rows of leasehold.runs, skips and missed as the timeline read models select them, and
// their public shapes. Shared by jobTimeline() (one job or all) and the dashboard's per-page
// timelines, so both describe a run, a skip and a missed slot the same way.
import type { JobTimeline, TimelineMissed, TimelineRun, TimelineSkip } from './status.js';

export interface RunRow {
  job: string;
  slot: Date;
  fence: string;
  holder: string;
  started_at: Date;
  finished_at: Date | null;
  outcome: TimelineRun['outcome'];
  error: string | null;
  attempts: number;
  trigger: TimelineRun['trigger'];
}

export interface SkipRow {
  job: string;
  slot: Date;
  holder: string | null;
  holder_fence: string | null;
  holder_slot: Date | null;
  held_for_seconds: number | null;
  recorded_by: string;
  recorded_at: Date;
}

export interface MissedRow {
  job: string;
  slot: Date;
  reason: string;
  recorded_by: string;
  recorded_at: Date;
}

export const toTimelineRun = (row: RunRow): TimelineRun => ({
  job: row.job,
  slot: row.slot,
  fence: Number(row.fence),
  holder: row.holder,
  startedAt: row.started_at,
  finishedAt: row.finished_at,
  outcome: row.outcome,
  error: row.error,
  attempts: row.attempts,
  trigger: row.trigger,
});

export const toTimelineSkip = (row: SkipRow): TimelineSkip => ({
  job: row.job,
  slot: row.slot,
  holder: row.holder,
  holderFence: row.holder_fence === null ? null : Number(row.holder_fence),
  holderSlot: row.holder_slot,
  heldForSeconds: row.held_for_seconds,
  recordedBy: row.recorded_by,
  recordedAt: row.recorded_at,
});

export const toTimelineMissed = (row: MissedRow): TimelineMissed => ({
  job: row.job,
  slot: row.slot,
  reason: row.reason,
  recordedBy: row.recorded_by,
  recordedAt: row.recorded_at,
});

/** The timeline from the three result sets (each newest first, at most `limit` rows). */
export function toJobTimeline(now: Date, since: Date, runs: RunRow[], skips: SkipRow[], missed: MissedRow[], limit: number): JobTimeline {
  return {
    now,
    since,
    runs: [...runs].reverse().map(toTimelineRun),
    skips: [...skips].reverse().map(toTimelineSkip),
    missed: [...missed].reverse().map(toTimelineMissed),
    truncated: runs.length >= limit || skips.length >= limit || missed.length >= limit,
  };
}
