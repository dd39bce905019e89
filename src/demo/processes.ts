// Spawns and drives demo worker processes (worker.ts) through the JSON-lines toolkit
// (src/testing/json-lines.ts): events in, commands out, signals, and a kill that always works.
//
// The worker runs from source (tsx) when this file does (a checkout: `npm run demo`), and as
// plain JavaScript from dist/ otherwise (the installed package: `leasehold demo`).
import { fileURLToPath } from 'node:url';
import { JsonLinesProcess, type ExitStatus } from '../testing/json-lines.js';
import { toMessage, type MessageOf, type WorkerCommand, type WorkerEvent, type WorkerMessage } from './protocol.js';

const FROM_SOURCE = import.meta.url.endsWith('.ts');
/** The package root: two levels up from src/demo/ or dist/demo/. */
const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const WORKER = fileURLToPath(new URL(FROM_SOURCE ? './worker.ts' : './worker.js', import.meta.url));

export class WorkerProcess {
  /** True once we sent SIGSTOP and not yet SIGCONT. */
  frozen = false;
  /** Set before a kill or stop we asked for, so its exit is not reported as a crash. */
  exitExpected = false;

  private constructor(
    readonly name: string,
    private readonly child: JsonLinesProcess,
  ) {}

  static spawn(name: string, databaseUrl: string, onMessage: (message: WorkerMessage) => void): WorkerProcess {
    const child = JsonLinesProcess.nodeScript(WORKER, {
      label: name,
      cwd: ROOT,
      env: { DATABASE_URL: databaseUrl, WORKER_NAME: name },
      keepLines: false,
      stderrLimit: 4_000,
      onLine: (line) => {
        const message = toMessage(line);
        if (message) onMessage(message);
      },
    });
    return new WorkerProcess(name, child);
  }

  get exited(): Promise<ExitStatus> {
    return this.child.exited;
  }

  get pid(): number {
    return this.child.pid;
  }

  get alive(): boolean {
    return this.child.alive;
  }

  /** The last few KB the process wrote to stderr. */
  get stderr(): string {
    return this.child.stderr;
  }

  send(command: WorkerCommand): void {
    this.child.write(command);
  }

  signal(signal: 'SIGKILL' | 'SIGSTOP' | 'SIGCONT'): void {
    if (!this.alive) return;
    if (signal === 'SIGKILL') this.exitExpected = true;
    this.child.signal(signal);
    if (signal === 'SIGSTOP') this.frozen = true;
    if (signal === 'SIGCONT') this.frozen = false;
  }

  /** Ends the process now, whatever its state. Synchronous, so it can run in a signal or exit handler. */
  killNow(): void {
    if (!this.alive) return;
    this.exitExpected = true;
    this.child.killNow();
  }

  /** Asks the worker to finish its runs and exit; kills it after `graceMs`. */
  async stop(graceMs: number): Promise<void> {
    if (!this.alive) return;
    this.exitExpected = true;
    if (this.frozen) this.signal('SIGCONT');
    this.send({ cmd: 'stop' });
    const timer = setTimeout(() => this.killNow(), graceMs);
    await this.exited;
    clearTimeout(timer);
  }
}

/** Every event from every worker, in arrival order, with waiting for the next matching one. */
export class EventLog {
  readonly messages: WorkerMessage[] = [];
  private waiters: Array<{ match: (message: WorkerMessage) => boolean; resolve: (message: WorkerMessage) => void; timer: NodeJS.Timeout }> = [];

  constructor(private readonly onMessage: (message: WorkerMessage) => void) {}

  push(message: WorkerMessage): void {
    this.messages.push(message);
    this.onMessage(message);
    this.waiters = this.waiters.filter((waiter) => {
      if (!waiter.match(message)) return true;
      waiter.resolve(message);
      return false;
    });
  }

  all<K extends WorkerEvent['type']>(type: K, match: (message: MessageOf<K>) => boolean = () => true): Array<MessageOf<K>> {
    return this.messages.filter((message): message is MessageOf<K> => message.type === type).filter(match);
  }

  count<K extends WorkerEvent['type']>(type: K, match: (message: MessageOf<K>) => boolean = () => true): number {
    return this.all(type, match).length;
  }

  /**
   * Resolves with the first event of `type` that matches, already seen or arriving within
   * `timeoutMs`; rejects with a StoryError naming `what` after that.
   */
  first<K extends WorkerEvent['type']>(type: K, match: (message: MessageOf<K>) => boolean, timeoutMs: number, what: string): Promise<MessageOf<K>> {
    const seen = this.all(type, match)[0];
    if (seen) return Promise.resolve(seen);
    return this.next(type, match, timeoutMs, what);
  }

  /** Like first(), for events arriving from now on only. */
  next<K extends WorkerEvent['type']>(type: K, match: (message: MessageOf<K>) => boolean, timeoutMs: number, what: string): Promise<MessageOf<K>> {
    const is = (message: WorkerMessage): message is MessageOf<K> => message.type === type;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(new StoryError(`${what} did not happen within ${(timeoutMs / 1000).toFixed(0)} s`));
      }, timeoutMs);
      const waiter = {
        match: (message: WorkerMessage) => is(message) && match(message),
        resolve: (message: WorkerMessage) => {
          clearTimeout(timer);
          if (is(message)) resolve(message);
        },
        timer,
      };
      this.waiters.push(waiter);
    });
  }

  /** Forgets every waiter and its timer (their promises never settle), so nothing keeps the process alive. */
  close(): void {
    for (const waiter of this.waiters) clearTimeout(waiter.timer);
    this.waiters = [];
  }
}

/** The story did not happen as it should: the demo reports it and returns a non-zero exit code. */
export class StoryError extends Error {
  override name = 'StoryError';
}
