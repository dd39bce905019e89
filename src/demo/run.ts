// The demo (`npm run demo`, `leasehold demo`): three worker processes run the scheduler runtime
// with the same two jobs on one database, and the demo prints a live timeline of what they do.
//
//   1. runs, each slot on one worker with its fence; a slow run makes the next slot of
//      nightly-report (overlap 'skip') skip, naming the holder; a slow run of sync-invoices
//      (overlap 'buffer-one') makes the next slot wait and start as soon as it is released
//   2. a worker is killed (SIGKILL) in the middle of a slow run: its liveness session dies with
//      it, so the next slot runs on time on another worker, milliseconds after the kill, not
//      after the TTL; the killed run is recorded as lost, and a new worker replaces the dead one
//   3. a worker is frozen (SIGSTOP) in the middle of a slow run for longer than its TTL:
//      another takes over, and when the frozen one wakes up its fenced write is refused
//      (expiry is not cancellation; fencing is what protects the data)
//   4. a summary from the run history, and the checks behind the exit code
//
// Needs no database: without DATABASE_URL (or options.databaseUrl) it starts an embedded
// PostgreSQL server. Either way it works in a fresh database that it drops at the end.
// Returns 0 when the story happened, 1 when it did not, 128 + the signal's number when
// interrupted (130 for Ctrl-C). It never exits the process itself.
import { rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../db/embedded.js';
import { LeaseholdError } from '../errors.js';
import { createLeasehold, type Leasehold } from '../lease/leasehold.js';
import { silentLogger } from '../observe/logger.js';
import { createTestDatabase } from '../testing.js';
import { EventLog, StoryError, WorkerProcess } from './processes.js';
import { DEMO_TABLE_SQL, REPORT_JOB, SYNC_JOB, slotKey, type MessageOf, type WorkerMessage } from './protocol.js';
import { clockTime, ms, Story, type Style } from './story.js';

export interface DemoOptions {
  /** The PostgreSQL server to use (a database is created on it and dropped at the end). @default DATABASE_URL, else an embedded server */
  databaseUrl?: string;
  /** A shorter story (less calm between the events): for tests. @default false */
  quick?: boolean;
  /** Where the story goes. @default process.stdout */
  write?: (text: string) => void;
  /** Colour (ANSI) in the story. @default when stdout is a terminal and NO_COLOR is unset */
  colour?: boolean;
  /**
   * Called on a second SIGINT/SIGTERM/SIGHUP (more than a second after the first) while the
   * cleanup after the first is still running, with the exit code the signal asks for. A
   * command-line entry passes `(code) => process.exit(code)`; without it the cleanup goes on
   * (it is bounded).
   */
  onForceQuit?: (exitCode: number) => void;
  /**
   * After the story, keep the database (and the embedded server) for exploring: print how to
   * reach it and wait for SIGINT/SIGTERM/SIGHUP, then clean up as usual. @default false
   */
  keep?: boolean;
}

/** Runs the demo; resolves with the exit code it recommends. Leaves no process, database or directory behind. */
export async function runDemo(options: DemoOptions = {}): Promise<number> {
  return new Demo(options).run();
}

const WORKERS = 3;
const WORKER_STYLES: Style[] = ['cyan', 'magenta', 'blue', 'yellow', 'green'];
const DEMO = 'demo';
const SIGNAL_EXIT_CODES = { SIGINT: 130, SIGTERM: 143, SIGHUP: 129, SIGPIPE: 141 } as const;
type HandledSignal = keyof typeof SIGNAL_EXIT_CODES;
/** The orchestrator stops (SIGSTOP) or kills a holder this far into a slow run at the latest, or tries the next one. */
const KILL_INTO_RUN_MS = 1_300;
const FREEZE_INTO_RUN_MS = 400;
/** How long the frozen worker stays frozen after the takeover was seen. */
const FROZEN_AFTER_TAKEOVER_MS = 700;
/** A run that starts this long after its slot is not "on time". */
const ON_TIME_MS = 1_000;

interface OpenRun {
  worker: string;
  job: string;
  slot: string;
  fence: number;
  at: number;
}

class Demo {
  private readonly startedAt = Date.now();
  private readonly story: Story;
  private readonly quick: boolean;
  private readonly log: EventLog;
  private readonly abort = new AbortController();
  private readonly interruption: Promise<never>;

  // Everything the cleanup must undo.
  private embedded: EmbeddedPostgres | undefined;
  private embeddedStopped = false;
  private stoppingEmbedded: Promise<void> | undefined;
  private database: { url: string; drop(): Promise<void> } | undefined;
  private observer: Leasehold | undefined;
  private readonly workers: WorkerProcess[] = [];
  private readonly pendingSetup = new Set<Promise<unknown>>();
  private cleaning: Promise<void> | undefined;
  private removeProcessHooks: () => void = () => undefined;
  /** When the first SIGINT, SIGTERM or SIGHUP came (or stdout closed), and the exit code it asks for. */
  private interrupted: { at: number; exitCode: number } | undefined;
  /** The story was over and the database kept (--keep) when the interruption came: not a failure. */
  private keptUntilInterrupted = false;

  // What happened, for the timeline, the summary and the exit code.
  private readonly problems: string[] = [];
  private offsetMs = 0; // database clock − local clock
  private readonly plans: Array<{ job: string; slot: string; ms: number }> = [];
  private readonly openRuns = new Map<string, OpenRun>();
  private readonly bufferedSlots = new Set<string>();
  private readonly written = new Set<string>();
  private readonly lastFinished = new Map<string, MessageOf<'finished'>>();
  private readonly takeovers: Array<{ text: string; job: string; fence: number }> = [];
  private killed: { worker: string; fence: number; slot: string } | undefined;
  private stale: { worker: string; fence: number } | undefined;
  private frozenVictim: string | undefined;
  /** The start of the worker that replaces the killed one. */
  private replacement: Promise<void> | undefined;
  private nextWorkerNumber = 1;
  /** Every worker was asked to stop and did (not killed after a failure). */
  private woundDown = false;

  constructor(private readonly options: DemoOptions) {
    this.quick = options.quick ?? false;
    this.story = new Story(this.startedAt, options.write, options.colour);
    this.log = new EventLog((message) => this.show(message));
    this.interruption = new Promise<never>((_, reject) => {
      this.abort.signal.addEventListener('abort', () => reject(new StoryError('interrupted')), { once: true });
    });
    this.interruption.catch(() => undefined);
  }

  private paint(text: string, ...styles: Style[]): string {
    return this.story.paint(text, ...styles);
  }

  async run(): Promise<number> {
    this.installProcessHooks();
    try {
      await this.main();
      if (this.options.keep && this.interrupted === undefined) await this.keepForExploring();
    } catch (error) {
      if (this.interrupted === undefined) {
        this.problems.push(describeError(error));
      }
    } finally {
      await this.cleanup();
      this.removeProcessHooks();
    }
    if (this.interrupted !== undefined && !this.keptUntilInterrupted) return this.interrupted.exitCode;
    this.story.plain('');
    if (this.problems.length === 0) {
      this.story.plain(this.paint(`OK: the story happened as it should (${((Date.now() - this.startedAt) / 1000).toFixed(1)} s)`, 'green', 'bold'));
      if (!this.options.keep) {
        this.story.plain('Next steps: `leasehold demo --keep` leaves the database running to explore; the README\'s quick start puts a job of your own under a lease.');
      }
      return 0;
    }
    this.story.plain(this.paint('FAILED: the story did not happen as it should:', 'red', 'bold'));
    for (const problem of this.problems) this.story.plain(`  - ${problem}`);
    return 1;
  }

  // -------------------------------------------------------------------------------------------
  // The story

  private async main(): Promise<void> {
    const story = this.story;
    story.plain(this.paint('leasehold demo: a job scheduled on three worker processes, each slot run once, fenced', 'bold'));
    let serverUrl = this.options.databaseUrl ?? process.env.DATABASE_URL;
    if (serverUrl) {
      story.line(DEMO, `using the server in DATABASE_URL (${describeServer(serverUrl)})`);
    } else {
      story.line(DEMO, 'DATABASE_URL is not set: starting an embedded PostgreSQL server');
      const server = await this.setupStep(startEmbeddedPostgres(), (started) => {
        this.embedded = started;
      });
      serverUrl = server.connectionString;
      story.line(DEMO, `embedded PostgreSQL is up on 127.0.0.1:${server.port}`);
    }
    const created = await this.setupStep(createTestDatabase(serverUrl, 'leasehold_demo'), (made) => {
      this.database = made;
    });
    const observer = await this.setupStep(
      createLeasehold({ connectionString: created.url, holder: 'demo-observer', liveness: false, logger: silentLogger() }),
      (made) => {
        this.observer = made;
      },
    );
    await observer.pool.query(DEMO_TABLE_SQL);
    await this.measureClock(observer.pool);
    story.line(DEMO, `created database ${new URL(created.url).pathname.slice(1)} with the leasehold schema and a table demo_writes`);
    story.line(DEMO, `starting ${WORKERS} worker processes, each with the same two jobs (startWorker):`);
    story.note(
      `${REPORT_JOB.name}  every ${ms(REPORT_JOB.everyMs)}, ttl ${ms(REPORT_JOB.ttlMs)}, overlap '${REPORT_JOB.overlap}':       usually takes ${ms(REPORT_JOB.usualMs)}, a slow run ${ms(REPORT_JOB.slowMs)}`,
    );
    story.note(
      `${SYNC_JOB.name}   every ${ms(SYNC_JOB.everyMs)}, ttl ${ms(SYNC_JOB.ttlMs)}, overlap '${SYNC_JOB.overlap}': usually takes ${ms(SYNC_JOB.usualMs)}, a slow run ${ms(SYNC_JOB.slowMs)}`,
    );
    story.note('every run ends with a fenced write (ctx.transaction) of one row into demo_writes');
    await this.guard(Promise.all(Array.from({ length: WORKERS }, () => this.startWorker(created.url))));

    try {
      await this.phaseSkipAndBuffer();
      await this.phaseKill(created.url);
      await this.phaseFreeze();
      await this.phaseWindDown();
    } catch (error) {
      // Show what did happen before reporting what did not.
      if (this.interrupted === undefined) {
        this.killWorkers();
        await within(Promise.all(this.workers.map((w) => w.exited)), 5_000, []);
        await this.summary().catch(() => undefined);
      }
      throw error;
    }
    await this.summary();
  }

  /** --keep: the story is over; leave the database for `leasehold status`, `runs`, `dashboard` until a signal. */
  private async keepForExploring(): Promise<void> {
    const url = this.database?.url;
    if (!url) return;
    const story = this.story;
    story.plain('');
    story.plain(this.paint(`Kept for exploring: ${url}`, 'bold'));
    story.plain(`  export DATABASE_URL='${url}'`);
    story.plain('  then: leasehold status · leasehold runs nightly-report · leasehold dashboard · psql "$DATABASE_URL"');
    story.plain('Press Ctrl-C to stop and remove it.');
    await this.interruption.catch(() => undefined);
    this.keptUntilInterrupted = true;
  }

  private async phaseSkipAndBuffer(): Promise<void> {
    const story = this.story;
    story.heading(`1. Runs, a skip and a buffered slot: each slot runs on one worker; a slow run makes the next slot skip (or wait, under buffer-one)`);
    // Both slow runs start at a slot that both jobs share (a multiple of 6 s); in the full
    // story the sync-invoices one comes a slot later.
    const report = this.nextSlot(REPORT_JOB.everyMs, this.dbNow() + (this.quick ? 1_500 : 2_500), (s) => s % 6_000 === 0);
    const sync = this.quick ? report : report + SYNC_JOB.everyMs;
    this.plan(REPORT_JOB.name, report, REPORT_JOB.slowMs);
    this.plan(SYNC_JOB.name, sync, SYNC_JOB.slowMs);
    story.line(
      DEMO,
      `today the ${REPORT_JOB.name} run of slot ${clockTime(report)} will be slow (${ms(REPORT_JOB.slowMs)}, longer than its ${ms(REPORT_JOB.everyMs)} interval), ` +
        `and so will ${SYNC_JOB.name} at ${clockTime(sync)} (${ms(SYNC_JOB.slowMs)}; interval ${ms(SYNC_JOB.everyMs)})`,
    );
    const waitMs = (slot: number, extra: number) => Math.max(0, slot - this.dbNow()) + extra;
    const skipped = this.log.first(
      'skipped',
      (m) => m.job === REPORT_JOB.name && m.slot === iso(report + REPORT_JOB.everyMs),
      waitMs(report, 12_000),
      `the skip of ${REPORT_JOB.name} slot ${clockTime(report + REPORT_JOB.everyMs)}`,
    );
    const buffered = this.log.first(
      'started',
      (m) => m.job === SYNC_JOB.name && m.slot === iso(sync + SYNC_JOB.everyMs),
      waitMs(sync, 15_000),
      `the buffered start of ${SYNC_JOB.name} slot ${clockTime(sync + SYNC_JOB.everyMs)}`,
    );
    skipped.catch(() => undefined);
    buffered.catch(() => undefined);
    await this.guard(skipped);
    const start = await this.guard(buffered);
    if (!this.bufferedSlots.has(slotKey(start.job, start.slot))) {
      this.problems.push(`${SYNC_JOB.name} slot ${clockTime(start.slot)} ran, but no worker reported it as buffered`);
    }
    await this.guard(this.log.first('finished', (m) => m.job === start.job && m.fence === start.fence, 10_000, 'the end of the buffered run'));
  }

  private async phaseKill(databaseUrl: string): Promise<void> {
    const story = this.story;
    story.heading(
      `2. A worker is killed (SIGKILL) in the middle of a slow run: its liveness session dies with it, so the next slot runs on time elsewhere, not after the ${ms(REPORT_JOB.ttlMs)} TTL`,
    );
    for (let attempt = 1; ; attempt++) {
      if (attempt > 3) throw new StoryError('could not catch a worker in the middle of a slow run to kill it (3 attempts)');
      // Not at a slot where sync-invoices starts a second after: the victim might hold that run too.
      const slot = this.nextSlot(REPORT_JOB.everyMs, this.dbNow() + 1_200, (s) => s % 6_000 !== 2_000);
      const run = await this.slowRun(slot);
      if (!run) continue;
      const victim = this.worker(run.worker);
      await this.sleepUntil(slot + KILL_INTO_RUN_MS);
      const status = await this.leaseStatus(REPORT_JOB.name);
      if (this.dbNow() > slot + REPORT_JOB.everyMs - 300 || !victim.alive) {
        story.line(DEMO, this.paint(`(the demo's own timer fired too late to kill ${victim.name} before the next slot; taking the next slow run)`, 'dim'));
        continue;
      }
      if (status?.holder !== victim.name || status.fence !== run.fence || status.state !== 'held') {
        story.line(DEMO, this.paint(`(${victim.name} no longer holds the lease of its run; taking the next slow run)`, 'dim'));
        continue;
      }
      const nextSlot = slot + REPORT_JOB.everyMs;
      const leftMs = (status.expiresAt?.getTime() ?? 0) - this.dbNow();
      const others = [...this.openRuns.values()].filter((r) => r.worker === victim.name && r.job !== REPORT_JOB.name);
      story.line(
        DEMO,
        `${this.paint(`KILL  ${victim.name}`, 'red', 'bold')} (SIGKILL, pid ${victim.pid}) ${ms(Date.now() - run.at)} into its slow run of ${REPORT_JOB.name} slot ${clockTime(slot)} (fence ${run.fence}); ` +
          `its lease has ${ms(leftMs)} of TTL left, the next slot is ${clockTime(nextSlot)}`,
      );
      if (others.length > 0) story.note(`it also held ${others.map((r) => `${r.job} (fence ${r.fence})`).join(', ')}`);
      const takeover = this.log.first('started', (m) => m.job === REPORT_JOB.name && m.slot === iso(nextSlot), 10_000, `the run of slot ${clockTime(nextSlot)} after the kill`);
      const skipped = this.log.first('skipped', (m) => m.job === REPORT_JOB.name && m.slot === iso(nextSlot), 10_000, 'a skip');
      takeover.catch(() => undefined);
      skipped.catch(() => undefined);
      const killedAt = Date.now();
      victim.signal('SIGKILL');
      this.killed = { worker: victim.name, fence: run.fence, slot: run.slot };
      const freedMs = await this.holderGone(REPORT_JOB.name, victim.name, killedAt, Math.max(100, this.localAt(nextSlot) - Date.now() - 150));
      story.note(
        freedMs === undefined
          ? this.paint(`${victim.name}'s liveness session was still there ${ms(Date.now() - killedAt)} after the kill`, 'red')
          : `liveness: ${victim.name}'s session (and its advisory lock) was gone ${freedMs} ms after the kill; leasehold.lease_status shows holder_alive = false`,
      );
      // A supervisor (systemd, Kubernetes) would start a new worker: so does the demo, once the
      // takeover is told (starting a process takes CPU the others need to be on time).
      const replace = () => this.startWorker(databaseUrl, victim.name);

      const first = await this.guard(Promise.race([takeover, skipped]));
      if (first.type === 'skipped') {
        this.problems.push(
          `slot ${clockTime(nextSlot)} was skipped after ${victim.name} was killed (held by ${first.holder}): liveness did not free the lease in time`,
        );
        story.line(DEMO, this.paint(`slot ${clockTime(nextSlot)} was skipped: the killed worker's lease was not freed by liveness`, 'red', 'bold'));
        this.replacement = replace();
        this.replacement.catch(() => undefined);
        return;
      }
      const next = first;
      const afterKillMs = next.at - killedAt;
      const lateMs = Math.round(next.at - this.localAt(nextSlot));
      const { rows } = await this.query<{ outcome: string; error: string | null }>('select outcome, error from leasehold.runs where job = $1 and fence = $2', [
        REPORT_JOB.name,
        run.fence,
      ]);
      const recorded = rows[0];
      this.takeovers.push({
        text: `${next.worker} at the next slot, ${afterKillMs} ms after ${victim.name} was killed${freedMs === undefined ? '' : ` (liveness freed the lease within ${freedMs} ms)`}`,
        job: next.job,
        fence: next.fence,
      });
      story.line(
        DEMO,
        this.paint(
          `TAKEOVER ${next.worker} ran slot ${clockTime(nextSlot)} on time (+${lateMs} ms), ${afterKillMs} ms after ${victim.name} was killed, ` +
            `${victim.name}'s run recorded as ${recorded?.outcome ?? 'missing'}`,
          'green',
          'bold',
        ),
      );
      story.note(
        `the lease still had ${ms(Math.max(0, leftMs - afterKillMs))} of TTL left: by the TTL alone slot ${clockTime(nextSlot)} would have been skipped` +
          (recorded?.error ? `; leasehold.runs says: ${recorded.error}` : ''),
      );
      if (!next.tookOver) this.problems.push(`the run of slot ${clockTime(nextSlot)} after the kill was not reported as a takeover`);
      if (next.fence !== run.fence + 1) this.problems.push(`the takeover after the kill got fence ${next.fence}, expected ${run.fence + 1}`);
      if (lateMs > ON_TIME_MS) this.problems.push(`the slot after the kill started ${lateMs} ms after its time (more than ${ON_TIME_MS} ms)`);
      if (recorded?.outcome !== 'lost') this.problems.push(`the killed run (fence ${run.fence}) is recorded as ${recorded?.outcome ?? 'nothing'}, not lost`);
      // The freeze comes next while the new worker starts: it may or may not take part.
      this.replacement = replace();
      this.replacement.catch(() => undefined);
      return;
    }
  }

  private async phaseFreeze(): Promise<void> {
    const story = this.story;
    story.heading(
      `3. A worker is frozen (SIGSTOP) in the middle of a slow run, longer than its ${ms(REPORT_JOB.ttlMs)} TTL: expiry is not cancellation, fencing protects the write`,
    );
    for (let attempt = 1; ; attempt++) {
      if (attempt > 3) throw new StoryError('could not catch a worker in the middle of a slow run to freeze it (3 attempts)');
      // Not at a slot where a sync-invoices run starts too: the victim might still be in it.
      const slot = this.nextSlot(REPORT_JOB.everyMs, this.dbNow() + 1_200, (s) => s % 6_000 !== 0);
      const run = await this.slowRun(slot);
      if (!run) continue;
      const victim = this.worker(run.worker);
      await this.sleepUntil(slot + FREEZE_INTO_RUN_MS);
      // Its first heartbeat comes a third of the TTL after the claim: freeze it before that.
      if (this.dbNow() > slot + REPORT_JOB.ttlMs / 3 - 150 || !victim.alive) {
        story.line(DEMO, this.paint(`(the demo's own timer fired too late to freeze ${victim.name} before its first heartbeat; taking the next slow run)`, 'dim'));
        continue;
      }
      const takeover = this.log.first(
        'started',
        (m) => m.job === REPORT_JOB.name && m.fence > run.fence,
        REPORT_JOB.ttlMs + 3 * REPORT_JOB.everyMs + 5_000,
        `a takeover from the frozen ${victim.name}`,
      );
      takeover.catch(() => undefined);
      victim.signal('SIGSTOP');
      this.frozenVictim = victim.name;
      const frozenAt = Date.now();
      story.line(
        DEMO,
        `${this.paint(`STOP  ${victim.name}`, 'yellow', 'bold')} (SIGSTOP, pid ${victim.pid}) ${ms(frozenAt - run.at)} into its slow run of ${REPORT_JOB.name} slot ${clockTime(slot)} (fence ${run.fence}): frozen, no heartbeats`,
      );
      story.note(`its process and its liveness connection stay open, so only its ${ms(REPORT_JOB.ttlMs)} TTL can free the lease`);

      const next = await this.guard(takeover);
      const { rows } = await this.query<{ outcome: string }>('select outcome from leasehold.runs where job = $1 and fence = $2', [REPORT_JOB.name, run.fence]);
      this.takeovers.push({ text: `${next.worker} ${ms(next.at - frozenAt)} into the freeze of ${victim.name}`, job: next.job, fence: next.fence });
      story.line(
        DEMO,
        this.paint(
          `TAKEOVER ${next.worker} ran slot ${clockTime(next.slot)} (fence ${next.fence}) ${ms(next.at - frozenAt)} into the freeze: ${victim.name}'s lease had expired; its run recorded as ${rows[0]?.outcome ?? 'missing'}`,
          'green',
          'bold',
        ),
      );
      if (!next.tookOver) this.problems.push(`the run of slot ${clockTime(next.slot)} during the freeze was not reported as a takeover`);
      if (rows[0]?.outcome !== 'lost') this.problems.push(`the frozen run (fence ${run.fence}) is recorded as ${rows[0]?.outcome ?? 'nothing'}, not lost`);
      await this.sleep(FROZEN_AFTER_TAKEOVER_MS);

      const wrote = this.log.first('wrote', (m) => m.worker === victim.name && m.job === REPORT_JOB.name && m.fence === run.fence, 15_000, `the late write of ${victim.name}`);
      const refused = this.log.first('refused', (m) => m.worker === victim.name && m.job === REPORT_JOB.name && m.fence === run.fence, 15_000, `the late write of ${victim.name}`);
      wrote.catch(() => undefined);
      refused.catch(() => undefined);
      story.line(
        DEMO,
        `${this.paint(`CONT  ${victim.name}`, 'yellow', 'bold')} (SIGCONT) after ${ms(Date.now() - frozenAt)} frozen, longer than its ${ms(REPORT_JOB.ttlMs)} TTL: its handler resumes where it was and tries its fenced write`,
      );
      victim.signal('SIGCONT');
      const result = await this.guard(Promise.race([wrote, refused]));
      if (result.type === 'wrote') {
        throw new StoryError(`the stale write of ${victim.name} (fence ${run.fence}) was NOT refused although fence ${next.fence} had been granted`);
      }
      this.stale = { worker: victim.name, fence: run.fence };
      if (result.sqlRows !== 0) this.problems.push(`the database accepted a holds_lease()-guarded write under stale fence ${run.fence}`);
      if (!result.signalAborted) this.problems.push(`${victim.name}'s AbortSignal had not fired when its write was refused`);
      await this.guard(this.log.first('finished', (m) => m.worker === victim.name && m.fence === run.fence && m.job === REPORT_JOB.name, 10_000, `the end of ${victim.name}'s stale run`));
      return;
    }
  }

  private async phaseWindDown(): Promise<void> {
    await this.sleep(this.quick ? 500 : 1_500);
    this.story.heading('4. Wind down');
    if (this.replacement) await this.guard(this.replacement);
    this.story.line(DEMO, 'asking every worker to stop: finish its runs, release its leases, close its client and exit');
    await this.guard(Promise.all(this.live().map((w) => w.stop(SYNC_JOB.slowMs + 8_000))));
    this.woundDown = true;
  }

  /**
   * Plans a slow nightly-report run at `slot` and waits for its start. Undefined when it did
   * not start slow (say the plan reached no worker in time) or its worker is gone.
   */
  private async slowRun(slot: number): Promise<MessageOf<'started'> | undefined> {
    this.plan(REPORT_JOB.name, slot, REPORT_JOB.slowMs);
    const run = await this.guard(
      this.log.first(
        'started',
        (m) => m.job === REPORT_JOB.name && m.slot === iso(slot),
        Math.max(0, slot - this.dbNow()) + 8_000,
        `the run of ${REPORT_JOB.name} slot ${clockTime(slot)}`,
      ),
    );
    if (run.plannedMs !== REPORT_JOB.slowMs) return undefined;
    const worker = this.workers.find((w) => w.name === run.worker);
    return worker?.alive && !worker.exitExpected ? run : undefined;
  }

  // -------------------------------------------------------------------------------------------
  // Printing worker events

  private show(message: WorkerMessage): void {
    const story = this.story;
    const who = message.worker;
    switch (message.type) {
      case 'ready':
        story.line(who, this.paint(`ready (pid ${message.pid})`, 'dim'), message.at);
        return;
      case 'started': {
        this.openRuns.set(`${message.job}#${message.fence}`, { worker: who, job: message.job, slot: message.slot, fence: message.fence, at: message.at });
        const extras: string[] = [];
        const job = jobOf(message.job);
        if (this.bufferedSlots.has(slotKey(message.job, message.slot))) {
          const released = this.lastFinished.get(message.job);
          extras.push(
            this.paint(
              `buffered slot ${clockTime(message.slot)} started` +
                (released ? ` ${ms(Math.max(0, message.at - released.at))} after ${released.worker} released slot ${clockTime(released.slot)}` : '') +
                ` (${ms(message.at - this.localAt(Date.parse(message.slot)))} after its slot time)`,
              'green',
            ),
          );
        }
        if (job && message.plannedMs >= job.everyMs) extras.push(this.paint(`a slow run: ${ms(message.plannedMs)}, longer than the ${ms(job.everyMs)} interval`, 'yellow'));
        if (message.tookOver) extras.push(this.paint('took the lease over (its holder never released it)', 'green'));
        story.line(who, `${this.event('RUN', 'bold')}${this.runLabel(message.job, message.slot)}  fence ${String(message.fence).padEnd(3)}${extras.length ? ` ${extras.join('; ')}` : ''}`, message.at);
        this.explainOnce('run', 'each slot is claimed by one worker in one statement (leasehold.claim); the fence grows with every run of the job');
        return;
      }
      case 'finished': {
        this.openRuns.delete(`${message.job}#${message.fence}`);
        this.lastFinished.set(message.job, message);
        const wrote = this.written.has(`${message.job}#${message.fence}`);
        const outcome =
          message.outcome === 'succeeded'
            ? `succeeded in ${ms(message.durationMs)}${wrote ? ', row written (fenced)' : ''}`
            : this.paint(`${message.outcome} after ${ms(message.durationMs)}${message.error ? ` (${shorten(message.error.split(';')[0] ?? '', 90)})` : ''}`, 'red');
        story.line(who, `${this.event('DONE')}${this.runLabel(message.job, message.slot)}  fence ${String(message.fence).padEnd(3)} ${outcome}`, message.at);
        return;
      }
      case 'skipped': {
        const held = `held by ${message.holder ?? 'unknown'} (fence ${message.holderFence}${message.holderSlot ? `, slot ${clockTime(message.holderSlot)}` : ''})${
          message.heldMs === null ? '' : ` for ${ms(message.heldMs)}`
        }`;
        if (message.buffered) {
          this.bufferedSlots.add(slotKey(message.job, message.slot));
          story.line(who, `${this.event('BUFFER', 'yellow')}${this.runLabel(message.job, message.slot)}  ${held}: waits, and starts when it is released`, message.at);
          this.explainOnce('buffer', `overlap 'buffer-one': the slot waits in leasehold.buffered; the worker that releases the lease claims it at once`);
        } else {
          story.line(who, `${this.event('SKIP', 'yellow')}${this.runLabel(message.job, message.slot)}  ${held}`, message.at);
          this.explainOnce('skip', `overlap 'skip': the slot does not run; every worker saw it held, one recorded the skip (leasehold.skips) and reported it`);
        }
        return;
      }
      case 'missed':
        story.line(who, `${this.event('MISSED', 'red')}${message.job.padEnd(15)} ${message.slots.map((s) => clockTime(s)).join(', ')}: no worker claimed in time`, message.at);
        return;
      case 'lost': {
        const run = this.openRuns.get(`${message.job}#${message.fence}`);
        story.line(
          who,
          `${this.event('LOST', 'red')}${message.job.padEnd(15)}${run ? ` slot ${clockTime(run.slot)}` : ''}  fence ${String(message.fence).padEnd(3)} ${this.paint(`lease lost (${message.reason}): its AbortSignal fired`, 'red')}`,
          message.at,
        );
        if (who === this.frozenVictim) {
          story.note(this.paint('the handler does not watch the signal (a job stuck in a library call would not either): it carries on to its write', 'dim'));
        }
        return;
      }
      case 'wrote':
        this.written.add(`${message.job}#${message.fence}`);
        return;
      case 'refused':
        this.showRefusal(message);
        return;
      case 'log': {
        // A failed handler is told by its DONE line; anything else at error level is trouble.
        if (message.fields.event === 'run:finished') return;
        const err = typeof message.fields.err === 'string' ? `: ${message.fields.err}` : '';
        this.problems.push(`${who} logged an error: ${message.message}${err}`);
        story.line(who, this.paint(`error logged: ${message.message}${err}`, 'red'), message.at);
        return;
      }
      case 'error':
        this.problems.push(`${who}: ${message.message}`);
        story.line(who, this.paint(`error: ${message.message}`, 'red'), message.at);
        return;
      case 'stopped':
        story.line(who, this.paint('stopped: released its leases, closed its client', 'dim'), message.at);
        return;
    }
  }

  private showRefusal(refusal: MessageOf<'refused'>): void {
    const newer = this.log.all('started', (m) => m.job === refusal.job && m.fence > refusal.fence).at(-1);
    const now = newer ? `the lease is now fence ${newer.fence}, taken by ${newer.worker}` : 'the lease is no longer held';
    this.story.line(
      refusal.worker,
      this.paint(`stale write from ${refusal.worker} (fence ${refusal.fence}) refused: LeaseLostError (${refusal.reason}); ${now}`, 'red', 'bold'),
      refusal.at,
    );
    this.story.note(
      refusal.reason === 'fence-mismatch'
        ? 'ctx.transaction() sent the write, and the database refused it: leasehold.assert_lease found another token and fence'
        : 'ctx.transaction() refused it before sending any SQL: the lease had been lost (its local deadline passed while frozen)',
    );
    this.story.note(
      refusal.sqlRows === 0
        ? `the database refuses it too: the same insert guarded by leasehold.holds_lease(name, token, ${refusal.fence}) wrote 0 rows`
        : this.paint(`BUT the same insert guarded by leasehold.holds_lease() wrote ${refusal.sqlRows} row(s)!`, 'red', 'bold'),
    );
  }

  private readonly explained = new Set<string>();

  /** A note under the line just printed, the first time something happens. */
  private explainOnce(what: string, text: string): void {
    if (this.explained.has(what)) return;
    this.explained.add(what);
    this.story.note(this.paint(text, 'dim'));
  }

  private event(word: string, ...styles: Style[]): string {
    return `${this.paint(word.padEnd(6), ...styles)} `;
  }

  private runLabel(job: string, slot: string): string {
    return `${job.padEnd(15)} slot ${clockTime(slot)}`;
  }

  // -------------------------------------------------------------------------------------------
  // Summary and checks

  private async summary(): Promise<void> {
    const pool = this.observer?.pool;
    if (!pool) return;
    const story = this.story;
    const outcomes = await this.query<{ outcome: string; n: number }>('select outcome, count(*)::int as n from leasehold.runs group by outcome order by n desc');
    const runs = outcomes.rows.reduce((sum, row) => sum + row.n, 0);
    const skips = this.log.count('skipped', (m) => !m.buffered);
    const bufferedStarts = this.log.count('started', (m) => this.bufferedSlots.has(slotKey(m.job, m.slot)));
    const refused = this.log.count('refused');

    story.heading('Summary');
    const item = (label: string, value: number, detail = '') => story.plain(`  ${label.padEnd(30)}${String(value).padStart(4)}${detail ? `   ${detail}` : ''}`);
    item('runs', runs, outcomes.rows.map((row) => `${row.outcome} ${row.n}`).join(', '));
    item('skips', skips, 'slots that did not run: the previous run still held the lease');
    item('buffered slots started', bufferedStarts, 'slots that waited for the previous run and started when it released');
    const takeovers = this.log.count('started', (m) => m.tookOver);
    const unexplained = takeovers - this.takeovers.length;
    item('takeovers', takeovers, [...this.takeovers.map((t) => t.text), ...(unexplained > 0 ? [`${unexplained} more: a lease ran out by itself`] : [])].join('; '));
    item('stale writes refused', refused, this.stale ? `${this.stale.worker}, fence ${this.stale.fence}` : '');

    const history = await this.query<{
      slot: Date;
      job: string;
      kind: string;
      outcome: string;
      fence: string | null;
      holder: string | null;
      duration_seconds: number | null;
      detail: string | null;
    }>(
      `select slot, job, kind, outcome, fence::text, holder, duration_seconds, detail
         from (select * from leasehold.run_history order by slot desc, at desc limit 15) last
        order by slot, at`,
    );
    story.plain('');
    story.plain('  select slot, job, kind, outcome, fence, holder, duration_seconds, detail from leasehold.run_history  (the last 15)');
    story.plain(this.paint(`  ${'slot'.padEnd(8)}  ${'job'.padEnd(14)}  ${'kind'.padEnd(4)}  ${'outcome'.padEnd(9)}  ${'fence'.padStart(5)}  ${'holder'.padEnd(8)}  ${'took'.padStart(6)}  detail`, 'bold'));
    for (const row of history.rows) {
      const took = row.duration_seconds === null ? '' : `${row.duration_seconds.toFixed(1)} s`;
      const outcomeStyle: Style[] = row.outcome === 'lost' || row.outcome === 'failed' ? ['red'] : row.kind === 'skip' ? ['yellow'] : [];
      story.plain(
        `  ${clockTime(row.slot).padEnd(8)}  ${row.job.padEnd(14)}  ${row.kind.padEnd(4)}  ${this.paint(row.outcome.padEnd(9), ...outcomeStyle)}  ${(row.fence ?? '').padStart(5)}  ${(row.holder ?? '').padEnd(8)}  ${took.padStart(6)}  ${shorten(row.detail ?? '', 90)}`,
      );
    }

    await this.checks(skips, bufferedStarts, refused);
  }

  /** The checks behind the exit code, on the worker events and on the database. */
  private async checks(skips: number, bufferedStarts: number, refused: number): Promise<void> {
    const problems = this.problems;
    if (skips < 1) problems.push('no slot was skipped');
    if (this.log.count('skipped', (m) => !m.buffered && m.holder !== null && m.heldMs !== null && m.holderSlot !== null) < 1) problems.push('no skip named the holder');
    if (bufferedStarts < 1) problems.push('no buffered slot started');
    if (!this.killed) problems.push('no worker was killed');
    else if (!this.takeovers.some((t) => t.text.includes('killed'))) problems.push(`no takeover after ${this.killed.worker} was killed`);
    if (!this.stale || refused < 1) problems.push('no stale write was refused');

    const unfinished = await this.query<{ job: string; slot: Date; fence: string; holder: string }>(
      "select r.job, r.slot, r.fence::text as fence, r.holder from leasehold.runs r where r.outcome = 'running' order by r.fence",
    );
    // (only after a normal wind-down: workers killed after a failure leave runs 'running')
    for (const row of this.woundDown ? unfinished.rows : []) {
      problems.push(`${row.job} slot ${clockTime(row.slot)} (fence ${row.fence}, ${row.holder}) is still 'running' in leasehold.runs after every worker stopped`);
    }

    const twice = await this.query<{ job: string; slot: Date; n: number }>(
      'select job, slot, count(*)::int as n from leasehold.runs group by job, slot having count(*) > 1',
    );
    for (const row of twice.rows) problems.push(`${row.job} slot ${clockTime(row.slot)} ran ${row.n} times`);

    const runs = await this.query<{ fence: string; started_at: Date; finished_at: Date | null; holder: string }>(
      'select r.fence::text as fence, r.started_at, r.finished_at, r.holder from leasehold.runs r where r.job = $1 order by r.fence',
      [REPORT_JOB.name],
    );
    for (let i = 1; i < runs.rows.length; i++) {
      const previous = runs.rows[i - 1];
      const current = runs.rows[i];
      if (!previous || !current) continue;
      if (previous.finished_at === null || current.started_at < previous.finished_at) {
        problems.push(`${REPORT_JOB.name} runs overlap: fence ${current.fence} (${current.holder}) started before fence ${previous.fence} (${previous.holder}) ended`);
      }
    }

    const writes = await this.query<{ job: string; fence: string }>('select w.job, w.fence::text as fence from demo_writes w order by w.written_at');
    const lastFence = new Map<string, number>();
    for (const row of writes.rows) {
      const fence = Number(row.fence);
      if (fence <= (lastFence.get(row.job) ?? 0)) problems.push(`demo_writes: ${row.job} fence ${fence} was committed after fence ${lastFence.get(row.job)}`);
      lastFence.set(row.job, fence);
    }
    const has = (job: string, fence: number) => writes.rows.some((row) => row.job === job && Number(row.fence) === fence);
    if (this.stale && has(REPORT_JOB.name, this.stale.fence)) problems.push(`demo_writes has a row from the stale fence ${this.stale.fence}`);
    if (this.killed && has(REPORT_JOB.name, this.killed.fence)) problems.push(`demo_writes has a row from the killed run's fence ${this.killed.fence}`);
    if (writes.rows.length !== this.written.size) problems.push(`demo_writes has ${writes.rows.length} rows but the workers reported ${this.written.size} writes`);
  }

  // -------------------------------------------------------------------------------------------
  // Workers, time and queries

  private async startWorker(databaseUrl: string, replacing?: string): Promise<void> {
    const name = `worker-${this.nextWorkerNumber++}`;
    this.story.setActorStyle(name, WORKER_STYLES[(this.nextWorkerNumber - 2) % WORKER_STYLES.length] ?? 'cyan');
    const child = WorkerProcess.spawn(name, databaseUrl, (message) => this.log.push(message));
    this.workers.push(child);
    if (replacing) this.story.line(DEMO, `${this.paint(`START ${name}`, 'green', 'bold')} (pid ${child.pid}) replaces ${replacing}, as a supervisor (systemd, Kubernetes) would`);
    for (const plan of this.plans) child.send({ cmd: 'plan', ...plan });
    void child.exited.then(({ code, signal }) => {
      if (child.exitExpected) return;
      this.problems.push(`${name} exited unexpectedly (${signal ?? `code ${code}`})`);
      this.story.line(name, this.paint(`exited unexpectedly (${signal ?? `code ${code}`})`, 'red', 'bold'));
      for (const line of child.stderr.trim().split('\n').slice(-8)) if (line) this.story.note(this.paint(line, 'dim'));
    });
    await Promise.race([
      this.log.first('ready', (m) => m.worker === name, 60_000, `${name} becoming ready`),
      child.exited.then(() => {
        throw new StoryError(`${name} exited before it was ready:\n${child.stderr}`);
      }),
    ]);
  }

  private live(): WorkerProcess[] {
    return this.workers.filter((w) => w.alive && !w.exitExpected);
  }

  private worker(name: string): WorkerProcess {
    const found = this.workers.find((w) => w.name === name);
    if (!found) throw new StoryError(`no worker named ${name}`);
    return found;
  }

  private plan(job: string, slot: number, durationMs: number): void {
    const plan = { job, slot: iso(slot), ms: durationMs };
    this.plans.push(plan);
    for (const w of this.live()) w.send({ cmd: 'plan', ...plan });
  }

  /** Offset of the database clock (which decides slots) from ours: best of three round trips. */
  private async measureClock(pool: pg.Pool): Promise<void> {
    let best = Infinity;
    for (let i = 0; i < 3; i++) {
      const sent = Date.now();
      const { rows } = await pool.query<{ ms: number }>('select (extract(epoch from clock_timestamp()) * 1000)::float8 as ms');
      const received = Date.now();
      const db = rows[0]?.ms;
      if (db !== undefined && received - sent < best) {
        best = received - sent;
        this.offsetMs = db - (sent + received) / 2;
      }
    }
  }

  private dbNow(): number {
    return Date.now() + this.offsetMs;
  }

  private localAt(dbTime: number): number {
    return dbTime - this.offsetMs;
  }

  /** The first slot of an every-`everyMs` schedule at or after `after` (database time) that `accept`s. */
  private nextSlot(everyMs: number, after: number, accept: (slot: number) => boolean): number {
    for (let slot = Math.ceil(after / everyMs) * everyMs; ; slot += everyMs) if (accept(slot)) return slot;
  }

  private async sleepUntil(dbTime: number): Promise<void> {
    await this.sleep(Math.max(0, this.localAt(dbTime) - Date.now()));
  }

  private async sleep(msToSleep: number): Promise<void> {
    try {
      await sleep(msToSleep, undefined, { signal: this.abort.signal });
    } catch {
      throw new StoryError('interrupted');
    }
  }

  /** Races `promise` against an interruption (Ctrl-C). */
  private guard<T>(promise: Promise<T>): Promise<T> {
    return Promise.race([promise, this.interruption]);
  }

  private async query<R extends pg.QueryResultRow>(text: string, values: unknown[] = []): Promise<pg.QueryResult<R>> {
    const pool = this.observer?.pool;
    if (!pool) throw new StoryError('not connected');
    return pool.query<R>(text, values);
  }

  /** Polls lease_status until `holder` no longer holds `name` or its liveness session is gone; ms since `since`, or undefined after `limitMs`. */
  private async holderGone(name: string, holder: string, since: number, limitMs: number): Promise<number | undefined> {
    const deadline = Date.now() + limitMs;
    for (;;) {
      const status = await this.leaseStatus(name);
      if (status?.holder !== holder || status.holderAlive === false || status.state !== 'held') return Date.now() - since;
      if (Date.now() > deadline) return undefined;
      await this.sleep(5);
    }
  }

  private async leaseStatus(name: string) {
    return (await this.observer?.leases())?.find((lease) => lease.name === name);
  }

  // -------------------------------------------------------------------------------------------
  // Setup, interruption and cleanup

  /**
   * Runs one setup step so that cleanup knows about it: `keep` records what it made before
   * anything else can run, and an interruption during the step stops the setup after it.
   */
  private async setupStep<T>(step: Promise<T>, keep: (made: T) => void): Promise<T> {
    const recorded = step.then((made) => {
      keep(made);
      return made;
    });
    this.pendingSetup.add(recorded);
    try {
      const made = await recorded;
      if (this.interrupted !== undefined) throw new StoryError('interrupted');
      return made;
    } finally {
      this.pendingSetup.delete(recorded);
    }
  }

  private killWorkers(): void {
    for (const w of this.workers) w.killNow();
  }

  private installProcessHooks(): void {
    const onSignal = (signal: HandledSignal) => {
      // Kill the workers first, synchronously: a frozen one would otherwise outlive us.
      this.killWorkers();
      const exitCode = SIGNAL_EXIT_CODES[signal];
      if (this.interrupted !== undefined) {
        // tsx relays a Ctrl-C to us a second time within milliseconds: ignore that one. A real
        // second Ctrl-C gives up on the cleanup, if the caller allows it.
        if (Date.now() - this.interrupted.at > 1_000) this.options.onForceQuit?.(exitCode);
        return;
      }
      this.interrupted = { at: Date.now(), exitCode };
      this.story.plain(`\n${signal}: stopping the workers and cleaning up`);
      this.abort.abort();
    };
    const handlers = (['SIGINT', 'SIGTERM', 'SIGHUP'] as const).map((signal) => {
      const handler = () => onSignal(signal);
      process.on(signal, handler);
      return { signal, handler };
    });
    // A closed pipe on stdout (`leasehold demo | head`) is an interruption like SIGPIPE: clean
    // up instead of dying of the unhandled error event. The listener stays once it has fired,
    // as later writes to the closed stream may report again.
    let stdoutClosed = false;
    const onStdoutError = (error: NodeJS.ErrnoException) => {
      if (stdoutClosed) return;
      if (error.code !== 'EPIPE') throw error;
      stdoutClosed = true;
      onSignal('SIGPIPE');
    };
    process.stdout.on('error', onStdoutError);
    // Last resort (an uncaught error, a forced quit): no worker may outlive us, and the
    // embedded server's temporary directory goes (the server itself is ended by its own hook).
    const onExit = () => {
      this.killWorkers();
      try {
        if (this.embedded && !this.embeddedStopped) rmSync(dirname(this.embedded.dataDir), { recursive: true, force: true });
      } catch {
        // the server may still be writing its shutdown checkpoint: nothing more to do on exit
      }
    };
    process.on('exit', onExit);
    this.removeProcessHooks = () => {
      for (const { signal, handler } of handlers) process.off(signal, handler);
      if (!stdoutClosed) process.stdout.off('error', onStdoutError);
      process.off('exit', onExit);
    };
  }

  private cleanup(): Promise<void> {
    this.cleaning ??= (async () => {
      this.killWorkers();
      // Interrupted while the embedded server starts or the database is created: let that
      // finish (or fail and clean up after itself), or it would be left behind.
      await within(Promise.allSettled([...this.pendingSetup]), 30_000, []);
      // After Ctrl-C the embedded server (in our process group) is shutting down already:
      // stop it at once, and do not bother dropping the database, which goes with it.
      const early = this.interrupted !== undefined && this.embedded ? this.stopEmbedded(this.embedded) : undefined;
      await within(Promise.all(this.workers.map((w) => w.exited)), 5_000, []);
      this.log.close();
      await this.observer?.close().catch(() => undefined);
      if (this.database && !early) {
        await this.database.drop().catch((error: unknown) => this.story.line(DEMO, this.paint(`could not drop the demo database: ${String(error)}`, 'red')));
      }
      if (this.embedded) await this.stopEmbedded(this.embedded);
    })();
    return this.cleaning;
  }

  /** Stops the embedded server and removes its directory; bounded in time. */
  private stopEmbedded(server: EmbeddedPostgres): Promise<void> {
    this.stoppingEmbedded ??= (async () => {
      const stopped = await within(
        server.stop().then(
          () => true,
          (error: unknown) => {
            this.story.line(DEMO, this.paint(`could not stop the embedded server: ${String(error)}`, 'red'));
            return false;
          },
        ),
        15_000,
        false,
      );
      if (!stopped) rmSync(dirname(server.dataDir), { recursive: true, force: true });
      this.embeddedStopped = true;
    })();
    return this.stoppingEmbedded;
  }
}

// ---------------------------------------------------------------------------------------------
// Helpers

function jobOf(name: string): typeof REPORT_JOB | typeof SYNC_JOB | undefined {
  return name === REPORT_JOB.name ? REPORT_JOB : name === SYNC_JOB.name ? SYNC_JOB : undefined;
}

/** A story error or a database error by its message; anything else (a bug) with its stack. */
function describeError(error: unknown): string {
  if (error instanceof StoryError) return error.message;
  if (!(error instanceof Error)) return String(error);
  if (error instanceof LeaseholdError || typeof (error as { code?: unknown }).code === 'string') return `${error.name}: ${error.message}`;
  return error.stack ?? error.message;
}

function iso(time: number): string {
  return new Date(time).toISOString();
}

function shorten(text: string, max: number): string {
  const oneLine = text.replace(/\s+/g, ' ');
  return oneLine.length <= max ? oneLine : `${oneLine.slice(0, max - 1)}…`;
}

function describeServer(url: string): string {
  const parsed = new URL(url);
  return `${parsed.protocol}//${parsed.username ? `${parsed.username}@` : ''}${parsed.host}${parsed.pathname}`;
}

/** Resolves with the promise's value, or with `fallback` after `ms` (the timer does not linger). */
async function within<T>(promise: Promise<T>, timeoutMs: number, fallback: T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<T>((resolve) => {
    timer = setTimeout(() => resolve(fallback), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
