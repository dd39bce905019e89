// The worker's periodic chores besides claiming: measuring the database clock offset again,
// and pruning old history (an operator privilege: a worker with the client grant leaves it to
// one that has it).
import { PermissionDeniedError } from '../errors.js';
import type { Logger } from '../observe/logger.js';
import type { DatabaseClock } from '../schedule/database-clock.js';
import type { SchedulerStore } from './claims.js';

export interface HousekeepingSettings {
  store: SchedulerStore;
  clock: DatabaseClock;
  logger: Logger;
  retentionMs: number;
  clockSyncMs: number;
}

/** Starts the chores (pruning once at once); returns the function that stops them. */
export function startHousekeeping(settings: HousekeepingSettings): () => void {
  const { store, clock, logger, retentionMs } = settings;
  let pruneAllowed = true;
  const prune = async (): Promise<void> => {
    if (!pruneAllowed) return;
    try {
      const deleted = await store.prune(retentionMs);
      if (deleted > 0) logger.info({ event: 'history:pruned', deleted }, `pruned ${deleted} history rows`);
    } catch (error) {
      if (error instanceof PermissionDeniedError) {
        pruneAllowed = false;
        logger.info({ event: 'history:prune-skipped' }, 'history pruning needs the operator grant; this worker leaves it to one that has it (docs/security.md)');
        return;
      }
      logger.warn({ event: 'history:prune-failed', err: String(error) }, 'history pruning failed');
    }
  };
  const timers = [
    setInterval(() => clock.sync().catch((e: unknown) => logger.warn({ event: 'clock:sync-failed', err: String(e) }, 'clock sync failed')), settings.clockSyncMs),
    setInterval(() => void prune(), Math.min(retentionMs, 3_600_000)),
  ];
  for (const timer of timers) timer.unref();
  void prune();
  return () => timers.forEach((timer) => clearInterval(timer));
}
