// History for runs under a plain lease (run(), `leasehold exec`): the same rows the scheduler
// writes, through leasehold.start_run and finish_held_run, so `leasehold status`, `leasehold runs`
// and the dashboard show them. History is informative: failing to write it never fails the run.
import type pg from 'pg';
import { dbHandle, type DbHandle } from '../db/handle.js';
import type { Logger } from '../observe/logger.js';
import type { Lease } from './lease.js';

export type HeldRunOutcome = 'succeeded' | 'failed' | 'lost';

const TIMEOUT_MS = 5_000;

/** History statements go through the database handle: each has a timeout, a stuck connection is closed. */
function history(pool: pg.Pool, timeoutMs: number): DbHandle {
  return dbHandle(pool, { where: 'the database', timeoutMs });
}

/**
 * Makes the lease's name visible as a job (schedule 'external', unless a worker schedules it)
 * and records a running run under the lease. One round trip. Returns false if nothing was
 * recorded (the lease was already lost, or the statement failed).
 */
export async function startHeldRun(pool: pg.Pool, lease: Lease, intervalMs: number | null = null, timeoutMs = TIMEOUT_MS): Promise<boolean> {
  return history(pool, timeoutMs)
    .query('select leasehold.start_run($1, $2, $3, $4, $5)', [lease.name, lease.token, lease.fence, lease.slot, intervalMs])
    .then(
      () => true,
      () => false,
    );
}

/**
 * Records the run's outcome (leasehold.finish_held_run) and, with `release`, releases the lease
 * in the same statement. The database checks the lease first: if it was no longer held, the run
 * is recorded 'lost' whatever `outcome` says. Returns what was recorded, or null when the
 * statement failed (then the lease is still to be released by the caller).
 */
export async function finishHeldRun(
  pool: pg.Pool,
  lease: Lease,
  outcome: HeldRunOutcome,
  error: string | null,
  options: { release?: boolean; timeoutMs?: number } = {},
): Promise<{ outcome: HeldRunOutcome; recorded: boolean; released: boolean } | null> {
  return history(pool, options.timeoutMs ?? TIMEOUT_MS)
    .query<{ outcome: HeldRunOutcome; recorded: boolean; released: boolean }>(
      'select * from leasehold.finish_held_run($1, $2, $3, $4, $5, $6)',
      [lease.name, lease.fence, lease.token, outcome, error, options.release ?? true],
    )
    .then(
      (result) => result.rows[0] ?? null,
      () => null,
    );
}

/**
 * For Leasehold.run(): records the start now and returns `finish`, which records the outcome
 * and releases the lease in the same statement; it resolves true when it released the lease
 * (otherwise the caller still releases it). Null when the start could not be recorded: then
 * nothing more is written.
 */
export async function runRecorder(
  pool: pg.Pool,
  lease: Lease,
  logger: Logger,
  timeoutMs = TIMEOUT_MS,
): Promise<{ finish(failure: { error: unknown } | null): Promise<boolean> } | null> {
  if (!(await startHeldRun(pool, lease, null, timeoutMs))) {
    logger.debug({ event: 'run:history-failed', lease: lease.name, fence: lease.fence }, 'could not record the run in the history');
    return null;
  }
  return {
    async finish(failure) {
      const lost = lease.lostReason;
      const outcome: HeldRunOutcome = lost ? 'lost' : failure === null ? 'succeeded' : 'failed';
      const error = lost ? lost.message : failure === null ? null : failure.error instanceof Error ? failure.error.message : String(failure.error);
      const recorded = await finishHeldRun(pool, lease, outcome, error, { timeoutMs });
      if (recorded?.outcome === 'lost' && !lost) {
        logger.warn(
          { event: 'run:lost', lease: lease.name, fence: lease.fence },
          `lease "${lease.name}" (fence ${lease.fence}) was no longer held when the run finished; recorded as lost`,
        );
      }
      return recorded?.released === true;
    },
  };
}
