// The scheduler runtime: turns job schedules into claims and runs. The public Worker is a
// handle: the claim loop is engine.ts, the runs in progress runs.ts, the periodic chores
// housekeeping.ts; this file starts them and stops them in order.
import { InvalidArgumentError, ShutdownError, type LeaseholdError } from '../errors.js';
import { openLeasehold, type Leasehold, type LeaseholdOptions } from '../client/leasehold.js';
import { trackerOf } from '../lease/tracker.js';
import type { LeaseholdEvents } from '../observe/events.js';
import type { DatabaseClock } from '../schedule/database-clock.js';
import { stderrLogger, type Logger } from '../observe/logger.js';
import { parseBoundedDuration, type Duration } from '../validate/duration.js';
import { durationSetting } from '../validate/settings.js';
import { WORKER_DEFAULTS } from './defaults.js';
import { planStart, type LastSlot } from './catch-up.js';
import { SchedulerStore } from './claims.js';
import type { ClaimAheadSetting } from './claim-ahead.js';
import { ClaimEngine } from './engine.js';
import type { HandlerWrapper } from './execute-run.js';
import { startHousekeeping } from './housekeeping.js';
import { UnhandledWatch } from './unhandled.js';
import { defineJob, type JobDefinition, type JobOptions } from '../job/job.js';
import { JobFeed, type DataJobHandler } from './job-feed.js';
import { listenerFor, type ChangeListener } from './listen-for-changes.js';
import { checkHolder } from '../validate/names.js';
import { stopOnSignals } from './signals.js';
import { LEASEHOLD_OPTION_KEYS } from '../lease/option-keys.js';
import { checkOptionKeys, optionKeys } from '../validate/options.js';

export interface WorkerOptions extends Omit<LeaseholdOptions, 'logger'> {
  /** Job definitions (from defineJob) or their options. Optional when `handlers` is given. */
  jobs?: ReadonlyArray<JobDefinition | JobOptions> | undefined;
  /**
   * Handlers of jobs defined as data (`leasehold.control.define({ handler })`), by handler name.
   * The worker runs every stored schedule that names one of them, and follows changes at run time.
   */
  handlers?: Readonly<Record<string, DataJobHandler>> | undefined;
  /** How often a worker with `handlers` asks for changed schedules (and every worker for paused jobs) while it is not notified of them. @default '1s' */
  scheduleRefresh?: Duration | undefined;
  /**
   * Listen for schedule changes, pauses and run-now requests (LISTEN/NOTIFY on a direct
   * connection of its own: the liveness connection string, else the main one; not with only a
   * `pool`): they reach the worker in milliseconds, and an idle worker polls only every 30 s.
   * Where notifications do not arrive (a transaction-pooling PgBouncer) the worker finds out and
   * polls (`scheduleRefresh`, 500 ms for requests). false: always poll.
   * @default true
   */
  notifications?: boolean | undefined;
  /** How long stop() (or SIGTERM/SIGINT) waits for running handlers after aborting them; those still running are then recorded `aborted`. @default '30s' */
  shutdownGrace?: Duration | undefined;
  /** Stop on SIGTERM and SIGINT (a second signal exits at once, with code 143 or 130). @default true */
  handleSignals?: boolean | undefined;
  /** Keep run, skip and missed-slot history this long: older rows are deleted hourly, by one worker at a time (it needs the `operator` grant). @default '30d' */
  historyRetention?: Duration | undefined;
  /** How often the clock offset to the database is measured again. @default '5m' */
  clockSyncInterval?: Duration | undefined;
  /**
   * Claim a slot shortly before it is due, so that its run starts on time when claiming takes
   * long (docs/scheduler.md "Claim ahead"): 'auto' claims ahead only once this worker's share of
   * a tick of 500 due jobs or more took over 50 ms to claim and start, by about 1.5 times that
   * (at most 5 s); a duration claims that far ahead always; '0ms' never.
   * @default 'auto'
   */
  claimAhead?: Duration | 'auto' | undefined;
  /** pino-compatible logger; `LEASEHOLD_LOG_LEVEL` sets the default logger's level. @default JSON lines on stderr, warnings and errors only */
  logger?: Logger | undefined;
}

interface WorkerParts {
  leasehold: Leasehold;
  engine: ClaimEngine;
  feed: JobFeed;
  /** Notifications of changes (absent: polling only). */
  listener: ChangeListener | undefined;
  unhandled: UnhandledWatch;
  store: SchedulerStore;
  clock: DatabaseClock;
  logger: Logger;
  graceMs: number;
}

interface StartSettings {
  lastSlots: Map<string, LastSlot | null>;
  handleSignals: boolean;
  retentionMs: number;
  clockSyncMs: number;
}

type Phase = { kind: 'running' } | { kind: 'stopping'; done: Promise<void> } | { kind: 'stopped' };

// Set by Worker's static blocks: the one way to make and start a worker (startWorker).
let construct: (parts: WorkerParts) => Worker;
let start: (worker: Worker, settings: StartSettings) => Promise<void>;

export class Worker {
  readonly holder: string;
  /** The lease client this worker claims and runs with. */
  readonly leasehold: Leasehold;
  /** Resolves once the worker has stopped (by stop(), SIGTERM or SIGINT). */
  readonly stopped: Promise<void>;
  readonly #parts: WorkerParts;
  #phase: Phase = { kind: 'running' };
  #resolveStopped: () => void = () => undefined;
  /** Undo for what start() set up: chores and the clock step subscription (stopped first). */
  readonly #teardown: Array<() => void> = [];
  /** Removes the signal handlers (last: a second signal while stopping still exits at once). */
  #removeSignalHandlers: () => void = () => undefined;
  readonly #handlerWrappers: HandlerWrapper[] = [];

  private constructor(parts: WorkerParts) {
    this.#parts = parts;
    this.leasehold = parts.leasehold;
    this.holder = parts.leasehold.holder;
    this.stopped = new Promise((resolve) => {
      this.#resolveStopped = resolve;
    });
  }

  static {
    construct = (parts) => new Worker(parts);
  }

  on<E extends keyof LeaseholdEvents>(event: E, listener: (...args: LeaseholdEvents[E]) => void): () => void {
    return this.leasehold.on(event, listener);
  }

  get jobs(): readonly JobDefinition[] {
    return this.#parts.engine.states.map((s) => s.job);
  }

  /**
   * Runs every handler call from now on inside `wrapper` (leasehold/opentelemetry uses it to
   * run handlers in their run's span context). Wrappers added later wrap the earlier ones.
   * Returns a function that removes it.
   */
  wrapHandlers(wrapper: HandlerWrapper): () => void {
    const entry: HandlerWrapper = (run, call) => wrapper(run, call);
    this.#handlerWrappers.push(entry);
    this.#composeWrappers();
    return () => {
      const at = this.#handlerWrappers.indexOf(entry);
      if (at >= 0) this.#handlerWrappers.splice(at, 1);
      this.#composeWrappers();
    };
  }

  /** The wrappers as one, the latest outermost, handed to the runs started from now on. */
  #composeWrappers(): void {
    this.#parts.engine.runs.wrapHandler = this.#handlerWrappers.reduce<HandlerWrapper | undefined>(
      (inner, outer) => (inner ? (run, call) => outer(run, () => inner(run, call)) : outer),
      undefined,
    );
  }

  /** True from stop() (or SIGTERM/SIGINT) on: the worker claims nothing more (readiness probes fail). */
  get stopping(): boolean {
    return this.#phase.kind !== 'running';
  }

  /**
   * Why this worker's claims keep failing, when no retry cures it (a read-only server, a missing
   * grant): the typed error, from the third such failure in a row until a claim succeeds; else
   * null. The health probes fail meanwhile (workerHealth).
   */
  get failure(): LeaseholdError | null {
    return this.#parts.engine.health.failure;
  }

  /** Runs in progress on this worker. */
  get activeRuns(): number {
    return this.#parts.engine.runs.size;
  }

  /** Stops claiming, aborts running handlers, waits up to the grace period, records outcomes and releases leases. */
  stop(): Promise<void> {
    if (this.#phase.kind === 'stopping') return this.#phase.done;
    if (this.#phase.kind === 'stopped') return Promise.resolve();
    const done = this.#shutdown();
    this.#phase = { kind: 'stopping', done };
    return done;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.stop();
  }

  async #shutdown(): Promise<void> {
    const { engine, logger, graceMs } = this.#parts;
    for (const undo of this.#teardown.splice(0)) undo();
    logger.info(
      { event: 'worker:stopping', running: engine.runs.size, graceMs },
      `worker stopping: ${engine.runs.size} run(s) in progress, waiting up to ${graceMs} ms for them`,
    );
    engine.shutdown.abort(new ShutdownError());
    await this.#parts.listener?.stop();
    await this.#parts.feed.stop();
    await engine.stopClaiming();
    let graceTimer: NodeJS.Timeout | undefined;
    const grace = new Promise<'timeout'>((resolve) => {
      graceTimer = setTimeout(() => resolve('timeout'), graceMs);
    });
    const result = await Promise.race([engine.runs.settled().then(() => 'done' as const), grace]);
    clearTimeout(graceTimer);
    if (result === 'timeout') {
      logger.warn({ event: 'worker:grace-expired', running: engine.runs.size }, 'handlers still running after the grace period; their runs are recorded as aborted');
      await engine.runs.abandon();
    }
    await engine.finisher.drain();
    this.#removeSignalHandlers();
    await this.leasehold.close();
    this.#phase = { kind: 'stopped' };
    logger.info({ event: 'worker:stopped' }, 'worker stopped');
    this.#resolveStopped();
  }

  static {
    start = (worker, settings) => worker.#start(settings);
  }

  /** startWorker's last step: catch-up plan, signals, clock steps, chores, then the claim loop. */
  async #start({ lastSlots, handleSignals, retentionMs, clockSyncMs }: StartSettings): Promise<void> {
    const { engine, feed, store, clock, logger } = this.#parts;
    // a paused job gets no next slot and no catch-up until it is resumed (job-feed.ts)
    const catchUp = await planStart(engine.states.filter((state) => !feed.isPaused(state.job.name)), lastSlots, clock.now(), store, logger);
    if (handleSignals) this.#removeSignalHandlers = stopOnSignals(() => this.stop(), logger);
    this.#teardown.push(clock.onStep((step) => engine.clockStepped(step)));
    this.#teardown.push(startHousekeeping({ store, clock, logger, retentionMs, clockSyncMs }));
    this.#teardown.push(this.#parts.unhandled.start());
    engine.start(catchUp);
    feed.start(engine);
    this.#parts.listener?.start();
  }
}
/**
 * Starts a worker for `jobs`: connects (DATABASE_URL or options), migrates, registers the
 * jobs, applies each job's catch-up policy and begins claiming slots. Start as many workers
 * with the same jobs as you like; each slot runs at most once across all of them.
 */
export async function startWorker(options: WorkerOptions): Promise<Worker> {
  const handlers = checkHandlers(options?.handlers);
  if (!options || (!(Array.isArray(options.jobs) && options.jobs.length > 0) && !handlers)) {
    throw new InvalidArgumentError('jobs', 'startWorker({ jobs }) needs at least one job (or handlers of jobs defined as data).');
  }
  if (options.jobs !== undefined && !Array.isArray(options.jobs)) throw new InvalidArgumentError('jobs', 'startWorker({ jobs }): jobs must be an array.');
  checkOptionKeys(options, WORKER_OPTION_KEYS, 'startWorker()');
  const jobs = (options.jobs ?? []).map((job) => (isDefinition(job) ? job : defineJob(job)));
  const seen = new Set<string>();
  for (const job of jobs) {
    if (seen.has(job.name)) throw new InvalidArgumentError('jobs', `job "${job.name}" is defined twice in this worker; job names must be unique.`);
    seen.add(job.name);
  }
  const { graceMs, retentionMs, clockSyncMs, refreshMs, claimAhead } = workerSettings(options);
  const logger = options.logger ?? stderrLogger();
  // the client gets the connection options only; the worker's own are not its business
  const clientOptions = Object.fromEntries(Object.entries(options).filter(([key]) => LEASEHOLD_OPTION_KEYS.includes(key))) as LeaseholdOptions;
  const leasehold = await openLeasehold({ ...clientOptions, logger }, 'worker', Object.keys(handlers ?? {}));
  try {
    const tracker = trackerOf(leasehold);
    const { runtime } = tracker;
    const store = new SchedulerStore(runtime);
    const clock = runtime.clock;
    await clock.sync();
    const lastSlots = jobs.length > 0 ? await store.register(jobs, leasehold.holder) : new Map<string, LastSlot | null>();
    // after the code jobs' registration, which takes over any data job of the same name
    // `seen` holds the code jobs' names already
    const feed = new JobFeed({ runtime, store, logger, holder: leasehold.holder, handlers: handlers ?? {}, codeNames: seen, refreshMs });
    const data = await feed.load();
    for (const [name, slot] of data.lastSlots) lastSlots.set(name, slot);
    const engine = new ClaimEngine({ tracker, store, clock, events: runtime.events, logger, holder: leasehold.holder, claimAhead }, [...jobs, ...data.jobs]);
    const ownKey = () => tracker.livenessKey();
    const unhandled = new UnhandledWatch({
      store,
      events: runtime.events,
      logger,
      holder: leasehold.holder,
      isFirst: () => {
        // the list is re-read when it is old (a worker without due jobs ticks rarely)
        void engine.peers.refresh(ownKey());
        // one per service: each records the schedules it may act for (unhandled_schedules)
        return engine.peers.isFirstOfRole(ownKey());
      },
    });
    // a worker gone may have been the last with a handler
    engine.peers.onChange(() => unhandled.poke());
    const listener = listenerFor(options, { runtime, logger, feed, requests: engine.requests, unhandled });
    const worker = construct({ leasehold, engine, feed, listener, unhandled, store, clock, logger, graceMs });
    logger.info(
      { event: 'worker:started', holder: leasehold.holder, jobs: jobs.length, dataJobs: data.jobs.length, clockOffsetMs: Math.round(clock.localOffsetMs()) },
      `worker ${leasehold.holder} started with ${jobs.length} job(s) from code and ${data.jobs.length} defined as data`,
    );
    await start(worker, { lastSlots, handleSignals: options.handleSignals ?? WORKER_DEFAULTS.handleSignals.default, retentionMs, clockSyncMs });
    return worker;
  } catch (error) {
    await leasehold.close();
    throw error;
  }
}

const WORKER_OPTION_KEYS = [
  ...LEASEHOLD_OPTION_KEYS,
  ...optionKeys<Omit<WorkerOptions, keyof LeaseholdOptions>>({
    jobs: true,
    handlers: true,
    scheduleRefresh: true,
    notifications: true,
    shutdownGrace: true,
    handleSignals: true,
    historyRetention: true,
    clockSyncInterval: true,
    claimAhead: true,
  }),
];

/** The worker's own settings from its options, checked against WORKER_DEFAULTS (LeaseholdModule checks them where it is configured). */
export function workerSettings(options: Pick<WorkerOptions, 'shutdownGrace' | 'historyRetention' | 'clockSyncInterval' | 'scheduleRefresh' | 'claimAhead' | 'notifications'>) {
  if (options.notifications !== undefined && typeof options.notifications !== 'boolean') {
    throw new InvalidArgumentError('notifications', `notifications must be true or false (got ${JSON.stringify(options.notifications)}).`);
  }
  return {
    graceMs: durationSetting(options.shutdownGrace, WORKER_DEFAULTS.shutdownGrace, 'shutdownGrace'),
    retentionMs: durationSetting(options.historyRetention, WORKER_DEFAULTS.historyRetention, 'historyRetention'),
    clockSyncMs: durationSetting(options.clockSyncInterval, WORKER_DEFAULTS.clockSyncInterval, 'clockSyncInterval'),
    refreshMs: durationSetting(options.scheduleRefresh, WORKER_DEFAULTS.scheduleRefresh, 'scheduleRefresh'),
    claimAhead: claimAheadSetting(options.claimAhead),
  };
}

/** The claimAhead option: 'auto', or a lead in milliseconds within its bounds (0: never ahead). */
function claimAheadSetting(value: Duration | 'auto' | undefined): ClaimAheadSetting {
  const setting = WORKER_DEFAULTS.claimAhead;
  if ((value ?? setting.default) === 'auto') return 'auto';
  return parseBoundedDuration(value as Duration, 'claimAhead', setting.minMs, setting.maxMs);
}

/** The handlers object, checked: names as job names are checked, functions as values. */
function checkHandlers(handlers: unknown): Readonly<Record<string, DataJobHandler>> | undefined {
  if (handlers === undefined) return undefined;
  if (handlers === null || typeof handlers !== 'object' || Array.isArray(handlers)) {
    throw new InvalidArgumentError('handlers', "startWorker({ handlers }): handlers must be an object such as { 'sync-customer': async (ctx) => … }.");
  }
  const entries = Object.entries(handlers);
  if (entries.length === 0) return undefined;
  for (const [name, fn] of entries) {
    checkHolder(name);
    if (typeof fn !== 'function') throw new InvalidArgumentError('handlers', `startWorker({ handlers }): handler "${name}" must be an async function (context) => ….`);
  }
  return handlers as Readonly<Record<string, DataJobHandler>>;
}

function isDefinition(job: JobDefinition | JobOptions): job is JobDefinition {
  return typeof (job as JobDefinition).schedule === 'object' && typeof (job as JobDefinition).ttlMs === 'number';
}
