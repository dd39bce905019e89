// Everything the demo must undo, however it ends: the embedded server, the database, the
// observer client and the worker processes; and how it ends early: SIGINT, SIGTERM, SIGHUP or a
// closed stdout interrupt the story (every wait is raced against that), a second signal can give
// up on the cleanup, and an exit hook kills any worker left.
import { rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { EmbeddedPostgres } from '../db/embedded.js';
import type { Leasehold } from '../client/leasehold.js';
import { within } from './helpers.js';
import { StoryError, type EventLog, type WorkerProcess } from './processes.js';
import type { Story } from './story.js';

const DEMO = 'demo';
const SIGNAL_EXIT_CODES = { SIGINT: 130, SIGTERM: 143, SIGHUP: 129, SIGPIPE: 141 } as const;
type HandledSignal = keyof typeof SIGNAL_EXIT_CODES;

export class DemoLifecycle {
  embedded: EmbeddedPostgres | undefined;
  private embeddedStopped = false;
  private stoppingEmbedded: Promise<void> | undefined;
  database: { url: string; drop(): Promise<void> } | undefined;
  observer: Leasehold | undefined;
  readonly workers: WorkerProcess[] = [];
  private readonly pendingSetup = new Set<Promise<unknown>>();
  private cleaning: Promise<void> | undefined;
  /** Removes what install() added. */
  uninstall: () => void = () => undefined;
  /** When the first SIGINT, SIGTERM or SIGHUP came (or stdout closed), and the exit code it asks for. */
  interrupted: { at: number; exitCode: number } | undefined;
  private readonly abort = new AbortController();
  /** Rejects with a StoryError('interrupted') at the first interruption. */
  readonly interruption: Promise<never>;

  constructor(
    private readonly story: Story,
    private readonly log: EventLog,
    private readonly onForceQuit: ((exitCode: number) => void) | undefined,
  ) {
    this.interruption = new Promise<never>((_, reject) => {
      this.abort.signal.addEventListener('abort', () => reject(new StoryError('interrupted')), { once: true });
    });
    this.interruption.catch(() => undefined);
  }

  /**
   * Runs one setup step so that cleanup knows about it: `keep` records what it made before
   * anything else can run, and an interruption during the step stops the setup after it.
   */
  async setupStep<T>(step: Promise<T>, keep: (made: T) => void): Promise<T> {
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

  killWorkers(): void {
    for (const w of this.workers) w.killNow();
  }

  /** Signal, broken-pipe and exit hooks; uninstall() removes them. */
  install(): void {
    const onSignal = (signal: HandledSignal) => {
      // Kill the workers first, synchronously: a frozen one would otherwise outlive us.
      this.killWorkers();
      const exitCode = SIGNAL_EXIT_CODES[signal];
      if (this.interrupted !== undefined) {
        // tsx relays a Ctrl-C to us a second time within milliseconds: ignore that one. A real
        // second Ctrl-C gives up on the cleanup, if the caller allows it.
        if (Date.now() - this.interrupted.at > 1_000) this.onForceQuit?.(exitCode);
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
    this.uninstall = () => {
      for (const { signal, handler } of handlers) process.off(signal, handler);
      if (!stdoutClosed) process.stdout.off('error', onStdoutError);
      process.off('exit', onExit);
    };
  }

  cleanup(): Promise<void> {
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
        await this.database.drop().catch((error: unknown) => this.story.line(DEMO, this.story.paint(`could not drop the demo database: ${String(error)}`, 'red')));
      }
      if (this.embedded) await this.stopEmbedded(this.embedded);
    })();
    return this.cleaning;
  }

  /** Stops the embedded server and removes its directory; bounded in time. */
  stopEmbedded(server: EmbeddedPostgres): Promise<void> {
    this.stoppingEmbedded ??= (async () => {
      const stopped = await within(
        server.stop().then(
          () => true,
          (error: unknown) => {
            this.story.line(DEMO, this.story.paint(`could not stop the embedded server: ${String(error)}`, 'red'));
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

  async sleep(msToSleep: number): Promise<void> {
    try {
      await sleep(msToSleep, undefined, { signal: this.abort.signal });
    } catch {
      throw new StoryError('interrupted');
    }
  }

  /** Races `promise` against an interruption (Ctrl-C). */
  guard<T>(promise: Promise<T>): Promise<T> {
    return Promise.race([promise, this.interruption]);
  }
}
