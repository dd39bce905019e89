// Claiming ahead: a worker whose claims take long claims its share of a tick a little before
// the slot (leasehold.claim with ahead_ms) and starts each run at its slot, so that the time the claim
// and the run's setup take is not added to the run's start. See docs/scheduler.md "Claim ahead".
//
// LeadPolicy says how far ahead: a fixed lead (the claimAhead option), or 'auto': none while
// this worker claims its share of a tick and starts (or prepares) its runs quickly, and once
// that took longer than AUTO_ENGAGE_MS at a tick of AUTO_MIN_JOBS due jobs or more (all shares),
// about one and a half times that (an average over the recent ticks), at most AUTO_MAX_MS. A
// tick of fewer jobs counts as a quick one: a small fleet never claims ahead, and a fleet that
// shrank stops. Before its first measurement (the first tick after a start, every deploy) it
// expects PRIOR_MS_PER_JOB for each job of its share of the next slot's due jobs.
//
// StartQueue (start-queue.ts) holds the runs claimed ahead until their start.

export const AUTO_MIN_JOBS = 500;
export const AUTO_ENGAGE_MS = 50;
export const AUTO_MAX_MS = 5_000;
/** The lead is this much longer than the measured share (the claim statement varies tick to tick). */
const AUTO_FACTOR = 1.5;
const AUTO_MARGIN_MS = 25;
/** Weight of the newest tick in the average. */
const AUTO_WEIGHT = 0.5;
/**
 * What a share costs per job before anything was measured: claim, parse and start. Steady
 * ticks cost 0.1-0.16 ms a job with 4 workers and the server on 2 cores (bench/RESULTS.md,
 * 10,000 jobs), a cold first tick more; a lead too long only holds the leases a little longer
 * before their start, one too short starts the runs late, so this errs long.
 */
export const PRIOR_MS_PER_JOB = 0.2;

export type ClaimAheadSetting = number | 'auto';

/** The next slot's due jobs (all shares) and the live workers sharing them: what the first lead is guessed from. */
export interface NextTick {
  dueJobs: number;
  workers: number;
}

export class LeadPolicy {
  /** The average claim-and-prepare time of recent large shares (ms); 0 before the first. */
  private averageMs = 0;
  private measured = false;

  constructor(private readonly setting: ClaimAheadSetting) {}

  /**
   * How long before a slot this worker claims it now (0: at the slot). `nextTick` is asked only
   * before the first measurement.
   */
  leadMs(nextTick?: () => NextTick): number {
    if (this.setting !== 'auto') return this.setting;
    const ms = this.measured ? this.averageMs : priorMs(nextTick?.());
    if (ms < AUTO_ENGAGE_MS) return 0;
    return Math.min(AUTO_MAX_MS, Math.ceil(AUTO_FACTOR * ms + AUTO_MARGIN_MS));
  }

  /** At a tick of `dueJobs` due jobs (all workers' shares), this worker's share took `ms` from sending its claim to its runs started (or prepared). */
  observe(dueJobs: number, ms: number): void {
    if (this.setting !== 'auto' || !(ms >= 0)) return;
    const sample = dueJobs < AUTO_MIN_JOBS ? 0 : ms;
    this.averageMs = this.measured ? AUTO_WEIGHT * sample + (1 - AUTO_WEIGHT) * this.averageMs : sample;
    this.measured = true;
  }
}

function priorMs(next: NextTick | undefined): number {
  if (!next || next.dueJobs < AUTO_MIN_JOBS) return 0;
  return (next.dueJobs / Math.max(1, next.workers)) * PRIOR_MS_PER_JOB;
}

/** Why a run claimed ahead is handed back unrun (recorded with it as `aborted`). */
export const STOPPED_BEFORE_START = "the worker was stopping before the run's start";

/** A run claimed ahead: started at its start time, or handed back unstarted. */
export interface PreparedRun {
  begin(): void;
  /** begin() after a renewal of the lease (a peer may have taken it over: the renewal then fails and the run is recorded lost, unstarted). */
  renewThenBegin(): void;
  handBack(why: string): void;
}
