// Whether work may start under a lease now. A paused process (SIGSTOP, a frozen VM, a long
// garbage collection) resumes with every overdue timer firing in the order it was armed, so a
// run's start timer can fire before the timer of the lease's local deadline: `lease.lost` still
// says false for a lease the database may already have handed to someone else. Every path that
// calls a handler asks here first; it reads the local deadline itself.
import { performance } from 'node:perf_hooks';
import { controlOfLease, type Lease } from './lease.js';

/**
 * A handler starts only with at least this share of its ttl left on the local deadline. With
 * less (a pause, a late heartbeat), the lease is renewed first: a handler never begins its
 * first side effect with a lease about to end.
 */
export const START_MARGIN_SHARE = 1 / 3;

export type StartCheck = 'start' | 'renew-first' | 'lost';

/** 'lost' (and the lease is marked lost) when its local deadline has passed, even if no timer has said so yet. */
export function startCheck(lease: Lease): StartCheck {
  const control = controlOfLease(lease);
  if (!control.held) return 'lost';
  const left = control.deadlineAt - performance.now();
  if (left <= 0) {
    control.deadlinePassed();
    return 'lost';
  }
  // the server ended its liveness session: renew() waits until it is taken back or lost
  if (control.suspended) return 'renew-first';
  return left < control.grant.ttlMs * START_MARGIN_SHARE ? 'renew-first' : 'start';
}

/**
 * Resolves true when work may start under `lease` now: its deadline has not passed, and a lease
 * with less than the margin left was renewed first. False when the lease is lost (the lease
 * says why). Never throws.
 */
export async function readyToStart(lease: Lease): Promise<boolean> {
  const check = startCheck(lease);
  if (check === 'start') return true;
  if (check === 'lost') return false;
  try {
    await lease.renew();
  } catch {
    return false; // renew() marked it lost
  }
  return startCheck(lease) !== 'lost';
}
