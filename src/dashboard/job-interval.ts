// A job defined as data with a cron pattern has no stored interval (the database does not parse
// cron): the table's "every …", its p95 ÷ interval and the timeline's interval ruler take the
// pattern's own (its smallest gap between slots, as a worker's registration would store).
import type { Schedule } from '../schedule/schedule.js';

interface WithInterval {
  intervalMs: number | null;
  p95Seconds: number | null;
  p95IntervalRatio: number | null;
}

export function withScheduleInterval<T extends WithInterval>(job: T, schedule: Schedule | null): T {
  if (job.intervalMs !== null || !schedule) return job;
  const intervalMs = schedule.nominalIntervalMs;
  return { ...job, intervalMs, p95IntervalRatio: job.p95Seconds === null ? null : (job.p95Seconds * 1000) / intervalMs };
}
