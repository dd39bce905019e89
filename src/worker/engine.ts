// The worker's claim loop: one timer per worker (not one per job). It sleeps until the earliest
// due slot on the database-corrected clock (at most 30 s at a time, then recomputes), claims
// the jobs due at that moment with leasehold.claim(): its own hash share in one statement,
// the rest in a second one shortly after (shares.ts), and starts the runs it won.
// Any number of workers may run the same jobs: the database decides which worker runs each
// slot, and each slot runs at most once.
import { performance } from 'node:perf_hooks';
import type { LeaseTracker } from '../lease/tracker.js';
import type { LeaseholdEmitter } from '../observe/events.js';
import type { Logger } from '../observe/logger.js';
import type { ClockStep, DatabaseClock } from '../schedule/database-clock.js';
import { fireTime } from '../schedule/jitter.js';
import { LeadPolicy, STOPPED_BEFORE_START, type ClaimAheadSetting } from './claim-ahead.js';
import { ClaimHealth } from './claim-health.js';
import { skippedEvent, type ClaimRequest, type ClaimRow, type SchedulerStore } from './claims.js';
import { followForwardStep, reportBackwardStep, StepRecorder } from './clock-steps.js';
import { FinishQueue } from './finish-queue.js';
import type { JobDefinition } from '../job/job.js';
import { dataJobSettings } from './job-feed.js';
import { newState, RunSet, type JobState } from './runs.js';
import type { RunReport } from './execute-run.js';
import { NextSlots } from './next-slots.js';
import { RequestPoller } from './requests.js';
import { PeerList, STEAL_DELAY_FACTOR, STEAL_DELAY_MAX_MS, STEAL_DELAY_MIN_MS } from './shares.js';
import { coverOf, isDecided, ShareReporter, unclaimedDigest, unreportedRequests, type SecondPass, type ShareDigest } from './share-reports.js';
import { MissedSlots, type Follower } from './missed-slots.js';
import { StartQueue } from './start-queue.js';
import { advancePast, dueAtNextSlot, lookAhead, nextTickAt, planTick } from './tick-plan.js';

const MAX_SLEEP_MS = 30_000;
// Fire a little after the slot so that the database (whose now() decides) agrees it is due.
const FIRE_MARGIN_MS = 3;
const RETRY_DELAYS_MS = [25, 100, 400];
// Jobs with jitter fire at many distinct moments: ticks are at least this far apart, so that
// those due within it share one claim statement (and one pass over the jobs).
const MIN_TICK_GAP_MS = 50;
export interface EngineParts {
  tracker: LeaseTracker;
  store: SchedulerStore;
  clock: DatabaseClock;
  events: LeaseholdEmitter;
  logger: Logger;
  holder: string;
  /** How far ahead of a slot to claim it (claim-ahead.ts): a lead in ms, or 'auto'. */
  claimAhead: ClaimAheadSetting;
}

/** Sent to claim() beyond the lead: the database's clock and this worker's estimate of it differ a little. */
const AHEAD_SLACK_MS = 250;
const MAX_AHEAD_MS = 10_000;

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
  /** Whether claims work; failures are reported through it (claim-health.ts). */
  readonly health: ClaimHealth;
  private readonly byName: Map<string, JobState>;
  private readonly tracker: LeaseTracker;
  private readonly store: SchedulerStore;
  private readonly clock: DatabaseClock;
  private readonly events: LeaseholdEmitter;
  private readonly logger: Logger;
  private readonly holder: string;
  /** Windows of forward database clock steps, stored in the database. */
  private readonly steps: StepRecorder;
  /** Slots that neither ran nor were skipped between a job's claims, recorded as missed. */
  private readonly missed: MissedSlots;
  /** Claims in flight: stopping waits for them, so that no run is claimed behind its back. */
  private readonly claiming = new Set<Promise<number>>();
  private readonly retryTimers = new Set<NodeJS.Timeout>();
  private timer: NodeJS.Timeout | undefined;
  private lastTickAt = -Infinity;
  private running = true;
  /** How far ahead of their slots this worker claims them now. */
  private readonly lead: LeadPolicy;
  /** Runs claimed ahead, waiting for their start. */
  private readonly starts: StartQueue;
  /** Tells the peers which shares this worker decided (share-reports.ts). */
  private readonly reports: ShareReporter;
  /** How long this worker's last claim ahead took (ms): its second pass waits for the peers' as long. */
  private lastAheadMs = 0;

  constructor(parts: EngineParts, jobs: readonly JobDefinition[]) {
    ({ tracker: this.tracker, store: this.store, clock: this.clock, events: this.events, logger: this.logger, holder: this.holder } = parts);
    this.states = jobs.map(newState);
    // set one by one: a [name, state] pair per job would be garbage
    this.byName = new Map();
    for (const state of this.states) this.byName.set(state.job.name, state);
    this.health = new ClaimHealth(this.logger, this.events);
    this.steps = new StepRecorder(this.store, this.holder, this.logger);
    this.missed = new MissedSlots({ store: this.store, steps: this.steps, events: this.events, logger: this.logger, holder: this.holder });
    this.lead = new LeadPolicy(parts.claimAhead);
    this.starts = new StartQueue(this.clock, FIRE_MARGIN_MS, async (key, through) => {
      const untouched = await this.store.startTick(key, through);
      if (untouched) this.reports.started(key, through.getTime());
      return untouched;
    });
    this.finisher = new FinishQueue(this.store);
    this.reports = new ShareReporter(this.store);
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

  /** Stops claiming and waits for claims in flight; runs claimed ahead and not started yet are handed back (recorded aborted). */
  async stopClaiming(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    for (const timer of this.retryTimers) clearTimeout(timer);
    await Promise.allSettled([...this.claiming, this.requests.stop()]);
    this.starts.handBackAll(STOPPED_BEFORE_START);
  }

  /** Sleeps until the earliest next slot (less the claim-ahead lead), then claims every job due by then. */
  private schedule(): void {
    if (!this.running) return;
    clearTimeout(this.timer);
    const earliest = nextTickAt(this.states, this.leadMs());
    if (earliest === null) return;
    const gap = MIN_TICK_GAP_MS - (performance.now() - this.lastTickAt);
    const wait = Math.min(Math.max(0, earliest - this.clock.now().getTime() + FIRE_MARGIN_MS, gap), MAX_SLEEP_MS);
    this.timer = setTimeout(() => void this.tick(), wait);
  }

  /** The claim-ahead lead now; before any share was measured, guessed from the next slot's due jobs and the live workers. */
  private leadMs(): number {
    return this.lead.leadMs(() => ({ dueJobs: dueAtNextSlot(this.states), workers: this.peers.share(this.tracker.livenessKey())?.count ?? 1 }));
  }

  private async tick(): Promise<void> {
    if (!this.running) return;
    this.lastTickAt = performance.now();
    // This worker's hash share first, reported once decided (share-reports.ts); the rest after
    // twice as long as the share took, by when the live peers have claimed and reported theirs:
    // the second pass claims only the shares not reported (a dead or missing peer's). Slots of
    // its share due within the lead are claimed ahead, and their runs started at their slots.
    const ownKey = this.tracker.livenessKey();
    const leadMs = this.leadMs();
    const keys = this.peers.keysNow();
    const share = this.peers.share(ownKey);
    const plan = planTick(this.states, this.clock.now(), share, leadMs, this.logger);
    const { mine, others, advanced } = plan;
    const startedAt = performance.now();
    try {
      await Promise.all([
        mine.length > 0 ? this.claim(mine, 0, share && plan.mineDigest).then(() => this.lead.observe(plan.dueJobs, performance.now() - startedAt)) : undefined,
        plan.ahead.length > 0 ? this.claimAhead(plan.ahead, plan.aheadStarts, leadMs, plan.dueJobs, share && plan.aheadDigest) : undefined,
      ]);
    } catch (error) {
      this.health.failed(error, 'claiming slots failed; retrying at the next slot', { jobs: mine.length + plan.ahead.length });
    } finally {
      // The step after each advanced job's next slot, for the next tick: once this worker's own
      // runs have started, not while its claim (and its peers') keep the database's CPU busy.
      if (advanced.length > 0) setImmediate(() => lookAhead(advanced));
      // (the states claimed ahead moved on to their next slot; those left keep theirs)
      if (plan.aheadStates.length > 0) setImmediate(() => lookAhead(plan.aheadStates));
      // (a share claimed ahead: the peers claimed theirs ahead too, about as long)
      const ownShareMs = mine.length > 0 ? performance.now() - startedAt : Math.max(performance.now() - startedAt, this.lastAheadMs);
      if (others.length > 0) this.steal(others, { keys, owners: plan.othersOwners, digests: plan.othersDigests }, ownShareMs);
      this.schedule();
      void this.peers.refresh(ownKey);
    }
  }

  /**
   * Claims `requests` ahead of their slots (claim with ahead_ms); each claimed run starts at its start.
   * What is not claimed is claimed at its slot. Resolves to the number of runs prepared.
   */
  private claimAhead(requests: ClaimRequest[], starts: Date[], leadMs: number, dueJobs: number, report: ShareDigest | null): Promise<number> {
    return this.inFlight(this.claimAheadOnce(requests, starts, leadMs, dueJobs, report));
  }

  private async claimAheadOnce(requests: ClaimRequest[], starts: Date[], leadMs: number, dueJobs: number, report: ShareDigest | null): Promise<number> {
    const holderKey = this.tracker.livenessKey();
    const sentAt = performance.now();
    const rows = await this.store.claimAhead(requests, starts, this.holder, holderKey, Math.min(MAX_AHEAD_MS, leadMs + AHEAD_SLACK_MS));
    this.health.succeeded();
    if (rows[0]) this.clock.observe(rows[0].database_time, sentAt, performance.now());
    if (!this.running || this.shutdown.signal.aborted) return this.handBack(rows).then(() => 0); // (stop aborts the signal first)
    const nextSlots = new NextSlots();
    const orphans: ClaimRow[] = [];
    let followers: Follower[] | undefined;
    let prepared = 0;
    for (const row of rows) {
      const state = this.byName.get(row.job);
      if (!state) {
        orphans.push(row);
        continue;
      }
      advancePast(state, row.slot, nextSlots);
      const run = this.runs.prepare(state, row, holderKey, sentAt, this.runSettled);
      if (run) {
        prepared++;
        this.starts.add(fireTime(row.slot, state.job.jitterOffsetMs).getTime(), run, holderKey, row.slot.getTime());
      }
      if (row.previous_slot) (followers ??= []).push({ job: state.job, previous: row.previous_slot, claimed: row.slot });
    }
    this.lastAheadMs = performance.now() - sentAt;
    this.lead.observe(dueJobs, this.lastAheadMs);
    this.reports.claimedAhead(report, unclaimedDigest(requests, rows, this.byName), coverOf(requests, starts));
    if (starts[0]) this.finisher.holdAfterAhead(prepared, leadMs, starts[0].getTime() - this.clock.now().getTime());
    if (followers) this.missed.check(followers);
    if (orphans.length > 0) await this.handBack(orphans, 'the job was removed from this worker while it was being claimed');
    return prepared;
  }

  /** The second pass over the other workers' shares, but those their workers reported decided. */
  private steal(requests: ClaimRequest[], pass: SecondPass, ownShareMs: number): void {
    if (!this.running) return;
    const delay = Math.min(Math.max(STEAL_DELAY_MIN_MS, STEAL_DELAY_FACTOR * ownShareMs), STEAL_DELAY_MAX_MS);
    const timer = setTimeout(() => {
      this.retryTimers.delete(timer);
      const unreported = this.running ? unreportedRequests(this.store, requests, pass).catch(() => requests) : Promise.resolve([]);
      void unreported.then((rest) => this.claim(rest, 0)).then(
        // a peer in the list did not claim its share (it stopped or died): read the list again
        // before the next tick rather than splitting by a dead peer for up to 10 s more
        (claimed) => {
          if (claimed === 0) return;
          this.peers.expire();
          void this.peers.refresh(this.tracker.livenessKey());
        },
        (error: unknown) => this.health.failed(error, 'claiming slots of other workers\' shares failed'),
      );
    }, delay);
    this.retryTimers.add(timer);
  }

  private claimOrLog(requests: ClaimRequest[], message: string, attempt = 0): void {
    this.claim(requests, attempt).catch((error: unknown) => this.health.failed(error, message));
  }

  /**
   * Claims `requests` in one statement; retries the transient refusals a few times. Resolves to
   * the number of runs it started. `report`: the digest of a share, reported if every slot of it
   * was decided by this statement.
   */
  private claim(requests: ClaimRequest[], attempt: number, report?: ShareDigest | null): Promise<number> {
    if (!this.running || requests.length === 0) return Promise.resolve(0);
    return this.inFlight(this.claimOnce(requests, attempt, report));
  }

  /** A claim in flight, which stopping waits for. */
  private inFlight(claiming: Promise<number>): Promise<number> {
    this.claiming.add(claiming);
    return claiming.finally(() => this.claiming.delete(claiming));
  }

  private async claimOnce(requests: ClaimRequest[], attempt: number, report?: ShareDigest | null): Promise<number> {
    const holderKey = this.tracker.livenessKey();
    const sentAt = performance.now();
    const rows = await this.store.claim(requests, this.holder, holderKey);
    this.health.succeeded();
    // the claim's database time is a clock sample: a step shows here before the rows are used
    if (rows[0]) this.clock.observe(rows[0].database_time, sentAt, performance.now());
    if (!this.running || this.shutdown.signal.aborted) return this.handBack(rows).then(() => 0); // (stop aborts the signal first)
    this.finisher.holdAfterClaim(rows.length, performance.now() - sentAt);
    // the peers' second pass may skip the share from now on: told before its runs are started
    if (report && rows.every(isDecided)) this.reports.decided(holderKey, report);
    let started = 0;
    const retry: ClaimRequest[] = [];
    const orphans: ClaimRow[] = [];
    // claimed rows that follow an earlier claim: looked at for missed slots after every run has started
    let followers: Follower[] | undefined;
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
        if (row.previous_slot) (followers ??= []).push({ job, previous: row.previous_slot, claimed: row.slot });
      } else if (row.reason === 'held') {
        if (row.skip_recorded && this.events.wants('slot:skipped')) this.events.emit('slot:skipped', skippedEvent(job.name, row));
      } else if (row.reason === 'held-ahead') {
        this.askAgainAtExpiry(state, row);
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
    if (followers) this.missed.check(followers);
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
      .finishMany(claimed.map((row) => ({ job: row.job, fence: Number(row.fence), token: row.token, outcome: 'aborted', error: why, attempts: 0, startedMs: null })))
      .catch((error: unknown) => this.logger.warn({ event: 'claim:return-failed', err: String(error) }, 'could not hand back slots claimed while stopping; their leases end by TTL'));
  }

  /** The database clock stepped: follow it (see clock-steps.ts). */
  clockStepped(step: ClockStep): void {
    if (!this.running) return;
    this.starts.rearm();
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

  /**
   * The slot was claimed ahead by a worker that has not started it, and whose lease is still
   * held (a worker paused in the lead, say): claim it again once that lease has expired, if the
   * slot is still within its starting deadline and before the job's next slot (whose claim
   * would take the lease over anyway). If the holder started the run meanwhile, that claim finds
   * the slot taken.
   */
  private askAgainAtExpiry(state: JobState, row: ClaimRow): void {
    const { job } = state;
    if (!this.running || !row.expires_at) return;
    const at = row.expires_at.getTime() + FIRE_MARGIN_MS;
    if (at - row.slot.getTime() > job.startingDeadlineMs || (state.nextSlot && at >= fireTime(state.nextSlot, job.jitterOffsetMs).getTime())) return;
    const timer = setTimeout(() => {
      this.retryTimers.delete(timer);
      this.claimOrLog([{ job, slot: row.slot }], 'claiming a slot claimed ahead and not started failed');
    }, Math.max(0, at - this.clock.now().getTime()));
    this.retryTimers.add(timer);
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
