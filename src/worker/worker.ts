// The scheduler runtime: turns job schedules into claims and runs.
//
// One timer per worker (not one per job): it sleeps until the earliest due slot on the
// database-corrected clock (at most 30 s at a time, then recomputes), claims every job due at
// that moment with ONE leasehold.claim() statement, and starts the runs it won. Any number of
// workers may run the same jobs: the database decides which worker runs each slot, and each
// slot runs at most once.
import { performance } from 'node:perf_hooks';
import { InvalidArgumentError, PermissionDeniedError, ShutdownError } from '../errors.js';
import { createLeasehold, type Leasehold, type LeaseholdOptions } from '../lease/leasehold.js';
import { LeaseholdEmitter, type LeaseholdEvents } from '../observe/events.js';
import { stderrLogger, type Logger } from '../observe/logger.js';
import type { ClockStep, DatabaseClock } from '../schedule/database-clock.js';
import { slotsBetween } from '../schedule/schedule.js';
import { parseBoundedDuration, type Duration } from '../validate/duration.js';
import { SchedulerStore, type ClaimRequest, type ClaimRow } from './claims.js';
import { followForwardStep, reportBackwardStep, StepRecorder } from './clock-steps.js';
import { executeRun, type RunReport } from './execute-run.js';
import { FinishQueue } from './finish-queue.js';
import { defineJob, type JobDefinition, type JobOptions } from './job.js';
import { LEASEHOLD_OPTION_KEYS } from '../lease/option-keys.js';
import { checkOptionKeys, optionKeys } from '../validate/options.js';

export interface WorkerOptions extends Omit<LeaseholdOptions, 'logger'> {
  /** Job definitions (from defineJob) or their options. */
  jobs: ReadonlyArray<JobDefinition | JobOptions>;
  /** How long stop() (or SIGTERM/SIGINT) waits for running handlers after aborting them. @default '30s' */
  shutdownGrace?: Duration;
  /** Stop on SIGTERM and SIGINT (a second signal exits at once). @default true */
  handleSignals?: boolean;
  /** Keep run, skip and missed-slot history this long. @default '30d' */
  historyRetention?: Duration;
  /** How often the clock offset to the database is measured again. @default '5m' */
  clockSyncInterval?: Duration;
  logger?: Logger;
}

interface JobState {
  job: JobDefinition;
  /** The next slot this worker will try to claim. */
  nextSlot: Date | null;
  running: number;
}

type Phase = { kind: 'running'; timer: NodeJS.Timeout | undefined } | { kind: 'stopping'; done: Promise<void> } | { kind: 'stopped' };

const MAX_SLEEP_MS = 30_000;
// Fire a little after the slot so that the database (whose now() decides) agrees it is due.
const FIRE_MARGIN_MS = 3;
const RETRY_DELAYS_MS = [25, 100, 400];
const MAX_MISSED_RECORDED = 1_000;

export class Worker {
  readonly holder: string;
  private phase: Phase = { kind: 'running', timer: undefined };
  private readonly states: JobState[];
  private readonly runs = new Set<Promise<RunReport>>();
  private readonly shutdownController = new AbortController();
  private readonly timers = new Set<NodeJS.Timeout>();
  private readonly finisher: FinishQueue;
  private removeSignalHandlers: () => void = () => undefined;
  private resolveStopped: () => void = () => undefined;
  /** Resolves once the worker has stopped (by stop(), SIGTERM or SIGINT). */
  readonly stopped: Promise<void> = new Promise((resolve) => {
    this.resolveStopped = resolve;
  });

  /** @internal use startWorker() */
  constructor(
    readonly leasehold: Leasehold,
    private readonly store: SchedulerStore,
    private readonly clock: DatabaseClock,
    private readonly events: LeaseholdEmitter,
    private readonly logger: Logger,
    jobs: readonly JobDefinition[],
    private readonly settings: { graceMs: number; retentionMs: number; clockSyncMs: number },
  ) {
    this.holder = leasehold.holder;
    this.steps = new StepRecorder(store, this.holder, logger);
    this.finisher = new FinishQueue(store);
    this.states = jobs.map((job) => ({ job, nextSlot: null, running: 0 }));
  }

  on<E extends keyof LeaseholdEvents>(event: E, listener: (...args: LeaseholdEvents[E]) => void): () => void {
    return this.events.on(event, listener);
  }

  get jobs(): readonly JobDefinition[] {
    return this.states.map((s) => s.job);
  }

  /** Runs in progress on this worker. */
  get activeRuns(): number {
    return this.runs.size;
  }

  /** @internal */
  async start(lastSlots: Map<string, Date | null>, handleSignals: boolean): Promise<void> {
    const now = this.clock.now();
    const catchUp: ClaimRequest[] = [];
    for (const state of this.states) {
      const { job } = state;
      const last = lastSlots.get(job.name) ?? null;
      state.nextSlot = job.schedule.next(now);
      if (!last) continue;
      // Slots after the last claimed one that are already due: all workers were down (or
      // this job is new to the fleet). Which run is up to the catch-up policy; the others
      // are recorded as missed when the next slot is claimed.
      if (job.catchUp === 'none') continue;
      const due = slotsBetween(job.schedule, last, now, MAX_MISSED_RECORDED);
      if (due.length === 0) continue;
      if (job.catchUp === 'latest') {
        const latest = due[due.length - 1] as Date;
        if (now.getTime() - latest.getTime() <= job.startingDeadlineMs) catchUp.push({ job, slot: latest });
      } else {
        const chosen = due.slice(-job.catchUp.all);
        await this.store.enqueue(job.name, chosen);
        catchUp.push({ job, slot: chosen[0] as Date });
        this.logger.info({ event: 'catch-up', job: job.name, slots: chosen.length }, `catching up ${chosen.length} missed slot(s) of "${job.name}"`);
      }
    }
    if (handleSignals) this.installSignalHandlers();
    const unsubscribe = this.clock.onStep((step) => this.clockStepped(step));
    void this.stopped.then(unsubscribe);
    this.every(this.settings.clockSyncMs, () => this.clock.sync().catch((e: unknown) => this.logger.warn({ event: 'clock:sync-failed', err: String(e) }, 'clock sync failed')));
    this.every(Math.min(this.settings.retentionMs, 3_600_000), () => this.prune());
    void this.prune();
    // Claimed on the next turn of the event loop, so that the caller of startWorker() has
    // attached its listeners before the catch-up runs' events fire.
    if (catchUp.length > 0) {
      setImmediate(() => {
        this.claim(catchUp, 0).catch((error: unknown) =>
          this.logger.error({ event: 'claim:failed', err: String(error) }, 'claiming catch-up slots failed'),
        );
      });
    }
    this.schedule();
  }

  /** Stops claiming, aborts running handlers, waits up to the grace period, records outcomes and releases leases. */
  stop(): Promise<void> {
    if (this.phase.kind === 'stopping') return this.phase.done;
    if (this.phase.kind === 'stopped') return Promise.resolve();
    if (this.phase.timer) clearTimeout(this.phase.timer);
    const done = this.shutdown();
    this.phase = { kind: 'stopping', done };
    return done;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  private async shutdown(): Promise<void> {
    for (const timer of this.timers) clearInterval(timer);
    this.logger.info(
      { event: 'worker:stopping', running: this.runs.size, graceMs: this.settings.graceMs },
      `worker stopping: ${this.runs.size} run(s) in progress, waiting up to ${this.settings.graceMs} ms for them`,
    );
    this.shutdownController.abort(new ShutdownError());
    await Promise.allSettled([...this.claiming]);
    const all = Promise.allSettled([...this.runs]);
    let graceTimer: NodeJS.Timeout | undefined;
    const grace = new Promise<'timeout'>((resolve) => {
      graceTimer = setTimeout(() => resolve('timeout'), this.settings.graceMs);
    });
    const result = await Promise.race([all.then(() => 'done' as const), grace]);
    clearTimeout(graceTimer);
    if (result === 'timeout') {
      this.logger.warn({ event: 'worker:grace-expired', running: this.runs.size }, 'handlers still running after the grace period; their runs are recorded as aborted');
      await this.abandonRunning();
    }
    await this.finisher.drain();
    this.removeSignalHandlers();
    await this.leasehold.close();
    this.phase = { kind: 'stopped' };
    this.logger.info({ event: 'worker:stopped' }, 'worker stopped');
    this.resolveStopped();
  }

  /**
   * After the grace period: record still-running runs as aborted and release their leases
   * (their handlers may still be running, but their fenced writes are now refused). When a
   * handler settles later, its own finish_run finds the run already recorded and does nothing.
   */
  private async abandonRunning(): Promise<void> {
    await Promise.allSettled(
      [...this.pendingRuns.values()].map(({ job, fence, token }) =>
        this.store.finish(job, fence, token, 'aborted', 'did not stop within the shutdown grace period', 1),
      ),
    );
  }

  /** job, fence and token of runs whose handler has not settled (maintained by launch()). */
  private readonly pendingRuns = new Map<string, { job: string; fence: number; token: string | null }>();

  private get stopping(): boolean {
    return this.phase.kind !== 'running';
  }

  private every(ms: number, fn: () => unknown): void {
    const timer = setInterval(fn, ms);
    timer.unref();
    this.timers.add(timer);
  }

  private pruneAllowed = true;

  private async prune(): Promise<void> {
    if (!this.pruneAllowed) return;
    try {
      const deleted = await this.store.prune(this.settings.retentionMs);
      if (deleted > 0) this.logger.info({ event: 'history:pruned', deleted }, `pruned ${deleted} history rows`);
    } catch (error) {
      // pruning is an operator privilege: a worker with the client grant leaves it to one that has it
      if (error instanceof PermissionDeniedError) {
        this.pruneAllowed = false;
        this.logger.info({ event: 'history:prune-skipped' }, 'history pruning needs the operator grant; this worker leaves it to one that has it (docs/security.md)');
        return;
      }
      this.logger.warn({ event: 'history:prune-failed', err: String(error) }, 'history pruning failed');
    }
  }

  /** Sleeps until the earliest next slot, then claims every job due by then. */
  private schedule(): void {
    if (this.phase.kind !== 'running') return;
    clearTimeout(this.phase.timer);
    let earliest: number | null = null;
    for (const state of this.states) {
      const at = state.nextSlot?.getTime();
      if (at !== undefined && (earliest === null || at < earliest)) earliest = at;
    }
    if (earliest === null) return;
    const wait = Math.min(Math.max(0, earliest - this.clock.now().getTime() + FIRE_MARGIN_MS), MAX_SLEEP_MS);
    this.phase.timer = setTimeout(() => void this.tick(), wait);
  }

  private async tick(): Promise<void> {
    if (this.phase.kind !== 'running') return;
    const now = this.clock.now();
    const due: ClaimRequest[] = [];
    for (const state of this.states) {
      if (!state.nextSlot || state.nextSlot > now) continue;
      // If this worker slept through several slots (a blocked event loop, a suspended VM),
      // claim only the latest: the others ran elsewhere or are recorded as missed.
      const slots = slotsBetween(state.job.schedule, new Date(state.nextSlot.getTime() - 1), now, MAX_MISSED_RECORDED);
      const latest = slots[slots.length - 1] ?? state.nextSlot;
      state.nextSlot = state.job.schedule.next(now);
      if (now.getTime() - latest.getTime() > state.job.startingDeadlineMs) {
        this.logger.warn({ event: 'slot:late', job: state.job.name, slot: latest.toISOString() }, `slot of "${state.job.name}" is past its starting deadline; not claiming it`);
        continue;
      }
      due.push({ job: state.job, slot: latest });
    }
    try {
      if (due.length > 0) await this.claim(due, 0);
    } catch (error) {
      this.logger.error({ event: 'claim:failed', err: String(error), jobs: due.length }, 'claiming slots failed; retrying at the next slot');
    } finally {
      this.schedule();
    }
  }

  /** Claims `requests` in one statement; retries the transient refusals a few times. */
  private claim(requests: ClaimRequest[], attempt: number): Promise<void> {
    if (this.stopping || requests.length === 0) return Promise.resolve();
    // Shutdown waits for claims in flight, so that no run is claimed behind its back.
    const claiming = this.claimOnce(requests, attempt);
    this.claiming.add(claiming);
    return claiming.finally(() => this.claiming.delete(claiming));
  }

  private readonly claiming = new Set<Promise<void>>();

  private async claimOnce(requests: ClaimRequest[], attempt: number): Promise<void> {
    const internals = this.leasehold.internals();
    const holderKey = internals.livenessKey();
    const sentAt = performance.now();
    const rows = await this.store.claim(requests, this.holder, holderKey);
    // the claim's database time is a clock sample: a step shows here before the rows are used
    if (rows[0]) this.clock.observe(rows[0].database_time, sentAt, performance.now());
    if (this.stopping) {
      // Stopping began while the statement ran: hand back what it claimed, unrun.
      const claimed = rows.filter((row) => row.claimed);
      if (claimed.length > 0) {
        await this.store
          .finishMany(claimed.map((row) => ({ job: row.job, fence: Number(row.fence), token: row.token, outcome: 'aborted', error: 'the worker was stopping', attempts: 0 })))
          .catch((error: unknown) => this.logger.warn({ event: 'claim:return-failed', err: String(error) }, 'could not hand back slots claimed while stopping; their leases end by TTL'));
      }
      return;
    }
    const byName = new Map(requests.map((r) => [r.job.name, r.job]));
    const retry: ClaimRequest[] = [];
    for (const row of rows) {
      const job = byName.get(row.job);
      if (!job) continue;
      if (row.claimed) {
        this.launch(job, row, holderKey, sentAt);
        if (row.previous_slot) void this.recordMissed(job, row.previous_slot, row.slot);
      } else if (row.reason === 'held') {
        if (row.skip_recorded) this.reportSkip(job, row);
      } else if (row.reason === 'slot-not-due' && (attempt >= RETRY_DELAYS_MS.length || this.clock.now() < row.slot)) {
        // Not due by the database clock, and not just a hair early: the database clock is
        // behind our estimate (it stepped back). Claim it again when it is due on that time.
        this.rearm(job, row.slot, row.database_time);
      } else if (row.reason === 'holder-committing' || row.reason === 'slot-not-due') {
        retry.push({ job, slot: row.slot });
      } else if (row.reason === 'unknown-job') {
        await this.store.register([job], this.holder);
        retry.push({ job, slot: row.slot });
      }
    }
    if (retry.length > 0 && attempt < RETRY_DELAYS_MS.length) {
      const timer = setTimeout(() => {
        this.timers.delete(timer);
        this.claim(retry, attempt + 1).catch((error: unknown) =>
          this.logger.error({ event: 'claim:failed', err: String(error) }, 'claiming slots failed'),
        );
      }, RETRY_DELAYS_MS[attempt]);
      this.timers.add(timer);
    }
  }

  private launch(job: JobDefinition, row: ClaimRow, holderKey: string | null, sentAt: number): void {
    const state = this.states.find((s) => s.job === job);
    if (state) state.running++;
    const key = `${job.name}#${row.fence}`;
    this.pendingRuns.set(key, { job: job.name, fence: Number(row.fence), token: row.token });
    const env = {
      internals: this.leasehold.internals(),
      finisher: this.finisher,
      logger: this.logger,
      events: this.events,
      holder: this.holder,
      shutdown: this.shutdownController.signal,
    };
    const run = executeRun(env, job, row, holderKey, sentAt);
    this.runs.add(run);
    void run
      .then((report) => {
        // buffer-one / buffer-all (and catch-up): the next waiting slot starts as soon as we release
        if (report.nextBufferedSlot && !this.stopping) {
          this.claim([{ job, slot: report.nextBufferedSlot }], 0).catch((error: unknown) =>
            this.logger.error({ event: 'claim:failed', err: String(error) }, 'claiming the buffered slot failed'),
          );
        }
      })
      .catch((error: unknown) => this.logger.error({ event: 'run:error', job: job.name, err: String(error) }, 'a run failed outside its handler'))
      .finally(() => {
        this.runs.delete(run);
        this.pendingRuns.delete(key);
        if (state) state.running--;
      });
  }

  private reportSkip(job: JobDefinition, row: ClaimRow): void {
    const heldMs = row.holder_since ? row.database_time.getTime() - row.holder_since.getTime() : null;
    this.events.emit('slot:skipped', {
      job: job.name,
      slot: row.slot,
      holder: row.holder,
      holderFence: Number(row.holder_fence),
      holderSlot: row.holder_slot,
      heldMs,
      buffered: row.buffered,
    });
    this.logger.warn(
      {
        event: 'slot:skipped',
        job: job.name,
        slot: row.slot.toISOString(),
        holder: row.holder,
        holderFence: Number(row.holder_fence),
        holderSlot: row.holder_slot?.toISOString(),
        heldMs,
        buffered: row.buffered,
      },
      `skipped "${job.name}" slot ${row.slot.toISOString()}: still held by ${row.holder} (fence ${row.holder_fence}, slot ${row.holder_slot?.toISOString()}) for ${heldMs === null ? '?' : (heldMs / 1000).toFixed(1)}s${row.buffered ? '; buffered to run next' : ''}`,
    );
  }

  /** Slots between the previous claim and this one that neither ran nor were skipped. */
  // Slots inside a stored clock step window are dropped by record_missed() itself; so the
  // windows this worker saw are stored first (missed slots are not recorded until they are).
  private async recordMissed(job: JobDefinition, previous: Date, claimed: Date): Promise<void> {
    const between = slotsBetween(job.schedule, previous, new Date(claimed.getTime() - 1), MAX_MISSED_RECORDED);
    if (between.length === 0) return;
    if (!(await this.steps.flush())) {
      this.logger.warn({ event: 'slot:missed-record-failed', job: job.name }, 'not recording missed slots: a clock step window is not stored yet');
      return;
    }
    try {
      const recorded = await this.store.recordMissed(job.name, between, 'no worker claimed it in time (downtime or past its starting deadline)', this.holder);
      if (recorded > 0) {
        const missed = between.slice(0, recorded);
        this.events.emit('slot:missed', { job: job.name, slots: missed });
        this.logger.warn({ event: 'slot:missed', job: job.name, count: recorded }, `"${job.name}" missed ${recorded} slot(s) before ${claimed.toISOString()}`);
      }
    } catch (error) {
      this.logger.warn({ event: 'slot:missed-record-failed', err: String(error) }, 'could not record missed slots');
    }
  }

  /** Windows of forward database clock steps, stored in the database. */
  private readonly steps: StepRecorder;

  /** The database clock stepped: follow it (see clock-steps.ts). */
  private clockStepped(step: ClockStep): void {
    if (this.phase.kind !== 'running') return;
    const now = this.clock.now();
    if (step.deltaMs > 0) {
      const requests = followForwardStep(this.states, step, now, this.store, this.logger);
      // The window goes to the database first, so that neither this worker nor one started
      // later records the jumped-over slots as missed; the claims wait for it.
      void this.steps.add(step.expected, now).then(() => {
        if (requests.length > 0) {
          this.claim(requests, 0).catch((error: unknown) => this.logger.error({ event: 'claim:failed', err: String(error) }, 'claiming slots after a clock step failed'));
        }
      });
    } else {
      reportBackwardStep(this.states, step, this.logger);
    }
    this.schedule();
  }

  /** A claim came back "not due": try that slot again when it is due on the database's time. */
  private rearm(job: JobDefinition, slot: Date, databaseTime: Date): void {
    const state = this.states.find((s) => s.job === job);
    if (!state || this.stopping) return;
    if (!state.nextSlot || slot < state.nextSlot) state.nextSlot = slot;
    this.logger.info(
      { event: 'slot:not-due', job: job.name, slot: slot.toISOString(), databaseTime: databaseTime.toISOString() },
      `slot ${slot.toISOString()} of "${job.name}" is not due yet by the database clock (${databaseTime.toISOString()}); claiming it when it is`,
    );
    void this.clock.sync().catch(() => undefined).finally(() => this.schedule());
  }

  private installSignalHandlers(): void {
    let received = 0;
    const onSignal = (signal: NodeJS.Signals) => {
      received++;
      if (received > 1) {
        this.logger.warn({ event: 'worker:forced-exit', signal }, 'second signal: exiting now');
        process.exit(signal === 'SIGINT' ? 130 : 143);
      }
      this.logger.info({ event: 'worker:signal', signal }, `${signal}: stopping (send again to exit at once)`);
      void this.stop();
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
    this.removeSignalHandlers = () => {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
    };
  }
}

/**
 * Starts a worker for `jobs`: connects (DATABASE_URL or options), migrates, registers the
 * jobs, applies each job's catch-up policy and begins claiming slots. Start as many workers
 * with the same jobs as you like; each slot runs at most once across all of them.
 */
export async function startWorker(options: WorkerOptions): Promise<Worker> {
  if (!options || !Array.isArray(options.jobs) || options.jobs.length === 0) {
    throw new InvalidArgumentError('jobs', 'startWorker({ jobs }) needs at least one job.');
  }
  checkOptionKeys(options, WORKER_OPTION_KEYS, 'startWorker()');
  const jobs = options.jobs.map((job) => (isDefinition(job) ? job : defineJob(job)));
  const seen = new Set<string>();
  for (const job of jobs) {
    if (seen.has(job.name)) throw new InvalidArgumentError('jobs', `job "${job.name}" is defined twice in this worker; job names must be unique.`);
    seen.add(job.name);
  }
  const graceMs = parseBoundedDuration(options.shutdownGrace ?? '30s', 'shutdownGrace', 1, 24 * 3_600_000);
  const retentionMs = parseBoundedDuration(options.historyRetention ?? '30d', 'historyRetention', 60_000, 3_650 * 86_400_000);
  const clockSyncMs = parseBoundedDuration(options.clockSyncInterval ?? '5m', 'clockSyncInterval', 1_000, 86_400_000);
  const logger = options.logger ?? stderrLogger();
  // the client gets the connection options only; the worker's own are not its business
  const clientOptions = Object.fromEntries(Object.entries(options).filter(([key]) => LEASEHOLD_OPTION_KEYS.includes(key))) as LeaseholdOptions;
  const leasehold = await createLeasehold({ ...clientOptions, logger });
  try {
    const internals = leasehold.internals();
    const store = new SchedulerStore(internals.runtime);
    const clock = internals.clock;
    await clock.sync();
    const lastSlots = await store.register(jobs, leasehold.holder);
    const worker = new Worker(leasehold, store, clock, internals.runtime.events, logger, jobs, { graceMs, retentionMs, clockSyncMs });
    logger.info(
      { event: 'worker:started', holder: leasehold.holder, jobs: jobs.length, clockOffsetMs: Math.round(clock.localOffsetMs()) },
      `worker ${leasehold.holder} started with ${jobs.length} job(s)`,
    );
    await worker.start(lastSlots, options.handleSignals ?? true);
    return worker;
  } catch (error) {
    await leasehold.close();
    throw error;
  }
}

const WORKER_OPTION_KEYS = [
  ...LEASEHOLD_OPTION_KEYS,
  ...optionKeys<Omit<WorkerOptions, keyof LeaseholdOptions>>({ jobs: true, shutdownGrace: true, handleSignals: true, historyRetention: true, clockSyncInterval: true }),
];

function isDefinition(job: JobDefinition | JobOptions): job is JobDefinition {
  return typeof (job as JobDefinition).schedule === 'object' && typeof (job as JobDefinition).ttlMs === 'number';
}
