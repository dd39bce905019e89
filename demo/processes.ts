// Spawns and drives demo worker processes (worker.ts): JSON-line events in, commands out,
// signals, and a kill that always works (a stopped process is continued first).
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { parseMessage, type MessageOf, type WorkerCommand, type WorkerEvent, type WorkerMessage } from './protocol.js';

const ROOT = fileURLToPath(new URL('..', import.meta.url));
const TSX = fileURLToPath(new URL('../node_modules/tsx/dist/esm/index.mjs', import.meta.url));
const WORKER = fileURLToPath(new URL('./worker.ts', import.meta.url));

export class WorkerProcess {
  /** True once we sent SIGSTOP and not yet SIGCONT. */
  frozen = false;
  /** Set before a kill or stop we asked for, so its exit is not reported as a crash. */
  exitExpected = false;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private stderrText = '';

  private constructor(
    readonly name: string,
    readonly child: ChildProcessWithoutNullStreams,
    onMessage: (message: WorkerMessage) => void,
  ) {
    createInterface({ input: child.stdout }).on('line', (text) => {
      const message = parseMessage(text);
      if (message) onMessage(message);
    });
    child.stderr.on('data', (chunk: Buffer) => {
      this.stderrText = (this.stderrText + chunk.toString()).slice(-4000);
    });
    child.stdin.on('error', () => undefined); // writing to a worker that just died
    this.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  }

  static spawn(name: string, databaseUrl: string, onMessage: (message: WorkerMessage) => void): WorkerProcess {
    const child = spawn(process.execPath, ['--import', TSX, WORKER], {
      cwd: ROOT,
      env: { ...process.env, DATABASE_URL: databaseUrl, WORKER_NAME: name },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    return new WorkerProcess(name, child, onMessage);
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The last few KB the process wrote to stderr. */
  get stderr(): string {
    return this.stderrText;
  }

  send(command: WorkerCommand): void {
    if (this.alive) this.child.stdin.write(`${JSON.stringify(command)}\n`);
  }

  signal(signal: 'SIGKILL' | 'SIGSTOP' | 'SIGCONT'): void {
    if (!this.alive) return;
    if (signal === 'SIGKILL') this.exitExpected = true;
    this.child.kill(signal);
    if (signal === 'SIGSTOP') this.frozen = true;
    if (signal === 'SIGCONT') this.frozen = false;
  }

  /** Ends the process now, whatever its state. Synchronous, so it can run in a signal handler. */
  killNow(): void {
    if (!this.alive) return;
    this.exitExpected = true;
    this.child.kill('SIGCONT');
    this.child.kill('SIGKILL');
  }

  /** Asks the worker to finish its job and exit; kills it after `graceMs`. */
  async stop(graceMs: number): Promise<void> {
    if (!this.alive) return;
    this.exitExpected = true;
    if (this.frozen) this.signal('SIGCONT');
    this.send({ cmd: 'stop' });
    const timer = setTimeout(() => this.killNow(), graceMs);
    await this.exited;
    clearTimeout(timer);
  }

  async kill(): Promise<void> {
    this.killNow();
    await this.exited;
  }
}

/** Every event from every worker, in arrival order, with waiting for the next matching one. */
export class EventLog {
  readonly messages: WorkerMessage[] = [];
  private waiters: Array<{ match: (message: WorkerMessage) => boolean; resolve: (message: WorkerMessage) => void }> = [];

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

  count<K extends WorkerEvent['type']>(type: K, match: (message: MessageOf<K>) => boolean = () => true): number {
    return this.messages.filter((message): message is MessageOf<K> => message.type === type).filter(match).length;
  }

  /**
   * Resolves with the next event (arriving from now on) of `type` that matches; rejects with
   * an error naming `what` after `timeoutMs`.
   */
  next<K extends WorkerEvent['type']>(
    type: K,
    match: (message: MessageOf<K>) => boolean,
    timeoutMs: number,
    what: string,
  ): Promise<MessageOf<K>> {
    return this.nextOf([type], match, timeoutMs, what);
  }

  /** Like next(), for any of several event types. */
  nextOf<K extends WorkerEvent['type']>(
    types: K[],
    match: (message: MessageOf<K>) => boolean,
    timeoutMs: number,
    what: string,
  ): Promise<MessageOf<K>> {
    const is = (message: WorkerMessage): message is MessageOf<K> => (types as string[]).includes(message.type);
    return new Promise((resolve, reject) => {
      const waiter = {
        match: (message: WorkerMessage) => is(message) && match(message),
        resolve: (message: WorkerMessage) => {
          clearTimeout(timer);
          if (is(message)) resolve(message);
        },
      };
      const timer = setTimeout(() => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(new StoryError(`${what} did not happen within ${(timeoutMs / 1000).toFixed(0)}s`));
      }, timeoutMs);
      this.waiters.push(waiter);
    });
  }
}

/** The story did not happen as it should: the demo reports it and exits non-zero. */
export class StoryError extends Error {
  override name = 'StoryError';
}
