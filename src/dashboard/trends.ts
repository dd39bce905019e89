// GET /api/trends?hours=N[&job=NAME]: a job's trends (up to DASHBOARD_LIMITS.historyHours) or the
// fleet's (up to fleetHistoryHours), bucketed on the server (monitor/trends.ts). The fleet's are
// shared by every open page for FLEET_TTL_MS per window, as the summary is.
import type { Queryable } from '../db/handle.js';
import { fleetTrends, jobTrends, type Trends } from '../monitor/trends.js';
import { DASHBOARD_LIMITS } from './defaults.js';
import { jobParam, numberParam, onlyParams } from './guard.js';

const FLEET_TTL_MS = 15_000;

export function trendsEndpoint(db: Queryable, timed: <T>(work: () => Promise<T>) => Promise<T>): (params: URLSearchParams) => Promise<Trends & { hours: number }> {
  const fleet = new Map<number, { at: number; value: Promise<Trends> }>();
  return async (params) => {
    onlyParams(params, ['job', 'hours']);
    const job = jobParam(params, 'job');
    const hours = numberParam(params, 'hours', 1, 0.25, job ? DASHBOARD_LIMITS.historyHours : DASHBOARD_LIMITS.fleetHistoryHours);
    if (job) return { hours, ...(await timed(() => jobTrends(db, job, hours))) };
    // one entry per window asked for in the last FLEET_TTL_MS: a client varying `hours` cannot grow it
    for (const [key, entry] of fleet) if (Date.now() - entry.at > FLEET_TTL_MS) fleet.delete(key);
    let cached = fleet.get(hours);
    if (!cached || Date.now() - cached.at > FLEET_TTL_MS) {
      const value = timed(() => fleetTrends(db, hours));
      cached = { at: Date.now(), value };
      fleet.set(hours, cached);
      value.catch(() => {
        if (fleet.get(hours)?.value === value) fleet.delete(hours);
      });
    }
    return { hours, ...(await cached.value) };
  };
}
