// The worker's claim loop: one timer per worker (not one per job). It sleeps until the earliest
// due slot on the database-corrected clock (at most 30 s at a time, then recomputes), claims
// the jobs due at that moment with leasehold.claim_due(): its own hash share in one statement,
// the rest in a second one shortly after (shares.ts), and starts the runs it won.
// Any number of workers may run the same jobs: the database decides which worker runs each
// slot, and each slot runs at most once.
import { performance } from 'node:perf_hooks';
import type { LeaseTracker } from '../lease/tracker.js';
import type { LeaseholdEmitter } from '../observe/events.js';
import type { Logger } from '../observe/logger.js';
import type { ClockStep, DatabaseClock } from '../schedule/database-clock.js';
import { jobClock } from '../schedule/jitter.js';
import { slotsBetween } from '../schedule/schedule.js';
import { MAX_MISSED_RECORDED } from './catch-up.js';
import type { ClaimRequest, ClaimRow, SchedulerStore } from './claims.js';
import { followForwardStep, reportBackwardStep, StepRecorder } from './clock-steps.js';
import { FinishQueue } from './finish-queue.js';
import type { JobDefinition } from './job.js';
import { dataJobSettings } from './job-feed.js';
import { RunSet, type JobState } from './runs.js';
import type { RunReport } from './execute-run.js';
import { NextSlots } from './next-slots.js';
import { RequestPoller } from './requests.js';
import { nameHash, owns, PeerList, STEAL_DELAY_FACTOR, STEAL_DELAY_MAX_MS, STEAL_DELAY_MIN_MS } from './shares.js';

const MAX_SLEEP_MS = 30_000;
// Fire a little after the slot so that the database (whose now() decides) agrees it is due.
const FIRE_MARGIN_MS = 3;
const RETRY_DELAYS_MS = [25, 100, 400];
// Jobs with jitter fire at many distinct moments: ticks are at least this far apart, so that
// those due within it share one claim statement (and one pass over the jobs).
const MIN_TICK_GAP_MS = 50;
// A claim that started this many runs holds back the recording of their ends (FinishQueue.hold)
// for twice as long as the claim took, at most FINISH_HOLD_MAX_MS: the other workers are
// claiming and starting the same tick on the same database and cores (their claims took about
// as long, and starting their runs about as long again).
// Not above FINISH_HOLD_MAX_RUNS: 25,000 runs held in memory cost a worker more garbage
// collection than the database time the hold saves (100,000 jobs on 4 workers: handler start
// p99 2.4-2.7 s without the hold, 2.9 s with it).
const FINISH_HOLD_MIN_RUNS = 500;
const FINISH_HOLD_MAX_RUNS = 5_000;
const FINISH_HOLD_MAX_MS = 500;

export interface EngineParts {
  tracker: LeaseTracker;
  store: SchedulerStore;
  clock: DatabaseClock;
  events: LeaseholdEmitter;
  logger: Logger;
  holder: string;
}

export class ClaimEngine {
  readonly states: JobState[];
  readonly finisher: FinishQueue;
  readonly runs: RunSet;
  /** Live workers, for the hash shares of a tick (shares.ts). */
  readonly peers: PeerList;
  /** Run-now and backfill requests of this worker's jobs (requests.ts). */
  readonly requests: RequestPoller;
  /** Fires when the worker begins to stop; running handlers see it through their signal. */
  readonly shutdown = new AbortController();
  private readonly byName: Map<string, JobState>;
  private readonly tracker: LeaseTracker;
  private readonly store: SchedulerStore;
  private readonly clock: DatabaseClock;
  private readonly events: LeaseholdEmitter;
  private readonly logger: Logger;
  private readonly holder: string;
  /** Windows of forward database clock steps, stored in the database. */
  private readonly steps: StepRecorder;
  /** Claims in flight: stopping waits for them, so that no run is claimed behind its back. */
  private readonly claiming = new Set<Promise<number>>();
  private readonly retryTimers = new Set<NodeJS.Timeout>();
  private timer: NodeJS.Timeout | undefined;
  private lastTickAt = -Infinity;
  private running = true;

  constructor(parts: EngineParts, jobs: readonly JobDefinition[]) {
    ({ tracker: this.tracker, store: this.store, clock: this.clock, events: this.events, logger: this.logger, holder: this.holder } = parts);
    this.states = jobs.map(newState);
    // set one by one: a [name, state] pair per job would be garbage
    this.byName = new Map();
    for (const state of this.states) this.byName.set(state.job.name, state);
    this.steps = new StepRecorder(this.store, this.holder, this.logger);
    this.finisher = new FinishQueue(this.store);
    this.runs = new RunSet({ ...parts, finisher: this.finisher, shutdown: this.shutdown.signal });
    this.peers = new PeerList(() => this.store.liveKeys());
    this.requests = new RequestPoller({
      ...{ tracker: this.tracker, runs: this.runs, logger: this.logger, holder: this.holder, stateOf: (name) => this.byName.get(name) },
      claimBuffered: (job, slot) => this.claimOrLog([{ job, slot }], 'claiming the buffered slot failed'),
    });
  }

  // --- jobs added, changed and removed at run time (job-feed.ts) ---

  stateOf(name: string): JobState | undefined {
    return this.byName.get(name);
  }

  addJob(job: JobDefinition): JobState {
    const state = newState(job);
    this.states.push(state);
    this.byName.set(job.name, state);
    return state;
  }

  /** Forgets a job; a run of it in progress finishes under its lease. */
  removeJob(name: string): void {
    const state = this.byName.get(name);
    if (!state) return;
    this.byName.delete(name);
    this.states.splice(this.states.indexOf(state), 1);
  }

  /** A run ended: under buffer-one / buffer-all (and catch-up) the next waiting slot starts as soon as it released. One function for every run. */
  private readonly runSettled = (report: RunReport): void => {
    if (!report.nextBufferedSlot) return;
    const state = this.byName.get(report.job);
    if (state) this.claimOrLog([{ job: state.job, slot: report.nextBufferedSlot }], 'claiming the buffered slot failed');
  };

  claimNow(requests: ClaimRequest[]): void {
    this.claimOrLog(requests, 'claiming slots failed');
  }

  /** Recomputes the timer (a job was added, changed or resumed). */
  wake(): void {
    this.schedule();
  }

  /** Starts the loop; `catchUp` claims go out on the next turn of the event loop. */
  start(catchUp: ClaimRequest[]): void {
    // Claimed on the next turn of the event loop, so that the caller of startWorker() has
    // attached its listeners before the catch-up runs' events fire.
    if (catchUp.length > 0) setImmediate(() => this.claimOrLog(catchUp, 'claiming catch-up slots failed'));
    void this.peers.refresh(this.tracker.livenessKey());
    this.requests.start();
    this.schedule();
  }

  /** Stops claiming and waits for claims in flight. */
  async stopClaiming(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    for (const timer of this.retryTimers) clearTimeout(timer);
    await Promise.allSettled([...this.claiming, this.requests.stop()]);
  }

  /** Sleeps until the earliest next slot, then claims every job due by then. */
  private schedule(): void {
    if (!this.running) return;
    clearTimeout(this.timer);
    let earliest: number | null = null;
    let seen: Date | null = null;
    let seenOffset = 0;
    for (const state of this.states) {
      const slot = state.nextSlot;
      // jobs sharing a next slot share its Date (next-slots.ts): one sum for a run of them, not
      // a boxed number per job each time the timer is set
      if (slot === null || (slot === seen && state.job.jitterOffsetMs === seenOffset)) continue;
      seen = slot;
      seenOffset = state.job.jitterOffsetMs;
      // a job with jitter fires its slot at slot + offset (src/schedule/jitter.ts)
      const at = slot.getTime() + seenOffset;
      if (earliest === null || at < earliest) earliest = at;
    }
    if (earliest === null) return;
    const gap = MIN_TICK_GAP_MS - (performance.now() - this.lastTickAt);
    const wait = Math.min(Math.max(0, earliest - this.clock.now().getTime() + FIRE_MARGIN_MS, gap), MAX_SLEEP_MS);
    this.timer = setTimeout(() => void this.tick(), wait);
  }

  private async tick(): Promise<void> {
    if (!this.running) return;
    this.lastTickAt = performance.now();
    const tickNow = this.clock.now();
    // This worker's hash share first; the rest after twice as long as the share took, by
    // when the live peers have claimed theirs (the second pass then gets back almost no rows)
    // and a dead or missing peer's share is taken over.
    const ownKey = this.tracker.livenessKey();
    const share = this.peers.share(ownKey);
    const mine: ClaimRequest[] = [];
    const others: ClaimRequest[] = [];
    const advanced: JobState[] = [];
    const nextSlots = new NextSlots();
    for (const state of this.states) {
      // jitter: each job reads the clock behind by its offset, so its slots, its lateness and
      // its next slot are all judged from its fire times (slot + offset)
      const now = jobClock(tickNow, state.job.jitterOffsetMs);
      if (!state.nextSlot || state.nextSlot > now) continue;
      // Usually one slot is due: the one after it is still ahead (one schedule step per job,
      // for thousands of jobs a tick). If this worker slept through several slots (a blocked
      // event loop, a suspended VM), claim only the latest: the others ran elsewhere or are
      // recorded as missed.
      let latest = state.nextSlot;
      const following = state.aheadFrom === latest && state.aheadJob === state.job ? (state.aheadNext ?? null) : nextSlots.of(state.job.schedule, latest);
      if (following === null || following > now) {
        state.nextSlot = following;
      } else {
        const slots = slotsBetween(state.job.schedule, new Date(state.nextSlot.getTime() - 1), now, MAX_MISSED_RECORDED);
        latest = slots[slots.length - 1] ?? state.nextSlot;
        state.nextSlot = state.job.schedule.next(now);
      }
      if (now.getTime() - latest.getTime() > state.job.startingDeadlineMs) {
        this.logger.warn({ event: 'slot:late', job: state.job.name, slot: latest.toISOString() }, `slot of "${state.job.name}" is past its starting deadline; not claiming it`);
        continue;
      }
      (owns(share, state.shareHash) ? mine : others).push({ job: state.job, slot: latest });
      advanced.push(state);
    }
    const startedAt = performance.now();
    try {
      if (mine.length > 0) await this.claim(mine, 0);
    } catch (error) {
      this.logger.error({ event: 'claim:failed', err: String(error), jobs: mine.length }, 'claiming slots failed; retrying at the next slot');
    } finally {
      // The step after each advanced job's next slot, for the next tick: once this worker's own
      // runs have started, not while its claim (and its peers') keep the database's CPU busy.
      if (advanced.length > 0) setImmediate(() => lookAhead(advanced));
      if (others.length > 0) this.steal(others, performance.now() - startedAt);
      this.schedule();
      void this.peers.refresh(ownKey);
    }
  }

  /** The second pass over the other workers' shares. */
  private steal(requests: ClaimRequest[], ownShareMs: number): void {
    if (!this.running) return;
    const delay = Math.min(Math.max(STEAL_DELAY_MIN_MS, STEAL_DELAY_FACTOR * ownShareMs), STEAL_DELAY_MAX_MS);
    const timer = setTimeout(() => {
      this.retryTimers.delete(timer);
      this.claim(requests, 0).then(
        // a peer in the list did not claim its share (it stopped or died): read the list again
        // before the next tick rather than splitting by a dead peer for up to 10 s more
        (claimed) => {
          if (claimed === 0) return;
          this.peers.expire();
          void this.peers.refresh(this.tracker.livenessKey());
        },
        (error: unknown) => this.logger.error({ event: 'claim:failed', err: String(error) }, 'claiming slots of other workers\' shares failed'),
      );
    }, delay);
    this.retryTimers.add(timer);
  }

  private claimOrLog(requests: ClaimRequest[], message: string, attempt = 0): void {
    this.claim(requests, attempt).catch((error: unknown) => this.logger.error({ event: 'claim:failed', err: String(error) }, message));
  }

  /** Claims `requests` in one statement; retries the transient refusals a few times. Resolves to the number of runs it started. */
  private claim(requests: ClaimRequest[], attempt: number): Promise<number> {
    if (!this.running || requests.length === 0) return Promise.resolve(0);
    const claiming = this.claimOnce(requests, attempt);
    this.claiming.add(claiming);
    return claiming.finally(() => this.claiming.delete(claiming));
  }

  private async claimOnce(requests: ClaimRequest[], attempt: number): Promise<number> {
    const holderKey = this.tracker.livenessKey();
    const sentAt = performance.now();
    const rows = await this.store.claim(requests, this.holder, holderKey);
    // the claim's database time is a clock sample: a step shows here before the rows are used
    if (rows[0]) this.clock.observe(rows[0].database_time, sentAt, performance.now());
    if (!this.running) return this.handBack(rows).then(() => 0);
    if (rows.length >= FINISH_HOLD_MIN_RUNS && rows.length <= FINISH_HOLD_MAX_RUNS) this.finisher.hold(Math.min(FINISH_HOLD_MAX_MS, 2 * (performance.now() - sentAt)));
    let started = 0;
    const retry: ClaimRequest[] = [];
    const orphans: ClaimRow[] = [];
    const missed: Array<{ job: JobDefinition; previous: Date; claimed: Date }> = [];
    for (const row of rows) {
      const state = this.byName.get(row.job);
      // removed from this worker while the claim ran: hand the slot back unrun
      if (!state) {
        if (row.claimed) orphans.push(row);
        continue;
      }
      const { job } = state;
      if (row.claimed) {
        started++;
        this.runs.launch(state, row, holderKey, sentAt, this.runSettled);
        if (row.previous_slot && this.missedBetween(job, row.previous_slot, row.slot)) missed.push({ job, previous: row.previous_slot, claimed: row.slot });
      } else if (row.reason === 'held') {
        if (row.skip_recorded) this.reportSkip(job, row);
      } else if (row.reason === 'slot-not-due' && (attempt >= RETRY_DELAYS_MS.length || this.clock.now() < row.slot)) {
        // Not due by the database clock, and not just a hair early: the database clock is
        // behind our estimate (it stepped back). Claim it again when it is due on that time.
        this.rearm(state, row.slot, row.database_time);
      } else if (row.reason === 'holder-committing' || row.reason === 'slot-not-due') {
        retry.push({ job, slot: row.slot });
      } else if (row.reason === 'unknown-job' && !dataJobSettings(job)) {
        // (a data job is never registered from here: that would make it a code job)
        await this.store.register([job], this.holder);
        retry.push({ job, slot: row.slot });
      }
    }
    // after a downtime many jobs have missed slots: recorded in one statement
    if (missed.length > 0) void this.recordMissed(missed);
    // 'paused' and 'removed' need nothing: the job feed stops or drops the job within a refresh
    if (orphans.length > 0) await this.handBack(orphans, 'the job was removed from this worker while it was being claimed');
    if (retry.length > 0 && attempt < RETRY_DELAYS_MS.length) {
      const timer = setTimeout(() => {
        this.retryTimers.delete(timer);
        this.claimOrLog(retry, 'claiming slots failed', attempt + 1);
      }, RETRY_DELAYS_MS[attempt]);
      this.retryTimers.add(timer);
    }
    return started;
  }

  /** Stopping began while the claim ran: hand back what it claimed, unrun. */
  private async handBack(rows: ClaimRow[], why = 'the worker was stopping'): Promise<void> {
    const claimed = rows.filter((row) => row.claimed);
    if (claimed.length === 0) return;
    await this.store
      .finishMany(claimed.map((row) => ({ job: row.job, fence: Number(row.fence), token: row.token, outcome: 'aborted', error: why, attempts: 0 })))
      .catch((error: unknown) => this.logger.warn({ event: 'claim:return-failed', err: String(error) }, 'could not hand back slots claimed while stopping; their leases end by TTL'));
  }

  private reportSkip(job: JobDefinition, row: ClaimRow): void {
    if (!this.events.wants('slot:skipped')) return;
    this.events.emit('slot:skipped', {
      job: job.name,
      slot: row.slot,
      holder: row.holder,
      holderFence: Number(row.holder_fence),
      holderSlot: row.holder_slot,
      heldMs: row.holder_since ? row.database_time.getTime() - row.holder_since.getTime() : null,
      buffered: row.buffered,
    });
  }

  /** Slots between the previous claim and this one that neither ran nor were skipped. */
  // Slots inside a stored clock step window are dropped by record_missed() itself; so the
  // windows this worker saw are stored first (missed slots are not recorded until they are).
  /** A slot of `job` lies strictly between `previous` and `claimed` (one schedule step: the usual answer is no). */
  private missedBetween(job: JobDefinition, previous: Date, claimed: Date): boolean {
    const next = job.schedule.next(previous);
    return next !== null && next < claimed;
  }

  private async recordMissed(claims: ReadonlyArray<{ job: JobDefinition; previous: Date; claimed: Date }>): Promise<void> {
    const missed: Array<{ job: string; slots: Date[] }> = [];
    for (const { job, previous, claimed } of claims) {
      const between = slotsBetween(job.schedule, previous, new Date(claimed.getTime() - 1), MAX_MISSED_RECORDED);
      if (between.length > 0) missed.push({ job: job.name, slots: between });
    }
    if (missed.length === 0) return;
    if (!(await this.steps.flush())) {
      this.logger.warn({ event: 'slot:missed-record-failed', jobs: missed.length }, 'not recording missed slots: a clock step window is not stored yet');
      return;
    }
    try {
      const recorded = await this.store.recordMissedMany(missed, 'no worker claimed it in time (downtime or past its starting deadline)', this.holder);
      for (const [job, slots] of recorded) this.events.emit('slot:missed', { job, slots });
    } catch (error) {
      this.logger.warn({ event: 'slot:missed-record-failed', err: String(error) }, 'could not record missed slots');
    }
  }

  /** The database clock stepped: follow it (see clock-steps.ts). */
  clockStepped(step: ClockStep): void {
    if (!this.running) return;
    const now = this.clock.now();
    if (step.deltaMs > 0) {
      const requests = followForwardStep(this.states, step, now, this.store, this.logger);
      // The window goes to the database first, so that neither this worker nor one started
      // later records the jumped-over slots as missed; the claims wait for it.
      void this.steps.add(step.expected, now).then(() => {
        if (requests.length > 0) this.claimOrLog(requests, 'claiming slots after a clock step failed');
      });
    } else {
      reportBackwardStep(this.states, step, this.logger);
    }
    this.schedule();
  }

  /** A claim came back "not due": try that slot again when it is due on the database's time. */
  private rearm(state: JobState, slot: Date, databaseTime: Date): void {
    if (!this.running) return;
    const { job } = state;
    if (!state.nextSlot || slot < state.nextSlot) state.nextSlot = slot;
    this.logger.info(
      { event: 'slot:not-due', job: job.name, slot: slot.toISOString(), databaseTime: databaseTime.toISOString() },
      `slot ${slot.toISOString()} of "${job.name}" is not due yet by the database clock (${databaseTime.toISOString()}); claiming it when it is`,
    );
    void this.clock.sync().catch(() => undefined).finally(() => this.schedule());
  }
}

function newState(job: JobDefinition): JobState {
  return { job, nextSlot: null, running: 0, shareHash: nameHash(job.name), aheadJob: undefined, aheadFrom: undefined, aheadNext: undefined };
}

/** Works out each state's slot after its next one (JobState.aheadNext). */
function lookAhead(states: readonly JobState[]): void {
  const nextSlots = new NextSlots();
  for (const state of states) {
    const from = state.nextSlot;
    state.aheadJob = state.job;
    state.aheadFrom = from;
    state.aheadNext = from ? nextSlots.of(state.job.schedule, from) : null;
  }
}
