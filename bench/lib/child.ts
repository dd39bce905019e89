// A TypeScript child process (run with tsx) that speaks JSON lines: send a command, await its
// answer, wait for an unprompted line. Every child started here is SIGKILLed when this process
// exits, however it exits, so a failed benchmark leaves no worker behind.
import { spawn, type ChildProcess, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const TSX = fileURLToPath(new URL('../../node_modules/tsx/dist/esm/index.mjs', import.meta.url));

export type Line = Record<string, unknown>;

const live = new Set<ChildProcess>();
let exitHookInstalled = false;
function installExitHook(): void {
  if (exitHookInstalled) return;
  exitHookInstalled = true;
  process.on('exit', () => {
    for (const child of live) child.kill('SIGKILL');
  });
}

/** SIGKILLs `child` when this process exits, unless it has exited before (for children not started as a JsonChild). */
export function killOnExit(child: ChildProcess): void {
  installExitHook();
  live.add(child);
  child.once('exit', () => live.delete(child));
}

export class JsonChild {
  readonly lines: Line[] = [];
  readonly stderr: string[] = [];
  readonly exited: Promise<number | null>;
  private nextId = 1;
  private waiters: Array<{ match: (line: Line) => boolean; resolve: (line: Line) => void }> = [];

  private constructor(
    readonly label: string,
    readonly child: ChildProcessWithoutNullStreams,
  ) {
    createInterface({ input: child.stdout }).on('line', (text) => {
      let line: Line;
      try {
        line = JSON.parse(text) as Line;
      } catch {
        this.stderr.push(`(stdout) ${text}\n`);
        return;
      }
      // Answers are consumed by their waiter; only unprompted lines are kept.
      const waiter = this.waiters.find((w) => w.match(line));
      if (waiter) {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        waiter.resolve(line);
      } else {
        this.lines.push(line);
      }
    });
    child.stderr.on('data', (chunk: Buffer) => this.stderr.push(chunk.toString()));
    // stdin errors (EPIPE after the child died) must not crash the benchmark
    child.stdin.on('error', () => undefined);
    this.exited = new Promise((resolve) =>
      child.on('exit', (code) => {
        live.delete(child);
        resolve(code);
      }),
    );
  }

  /** Starts `script` under tsx (after `nodeArgs`, e.g. --expose-gc); does not wait for anything. */
  static spawn(label: string, script: string, env: Record<string, string>, nodeArgs: readonly string[] = []): JsonChild {
    installExitHook();
    const child = spawn(process.execPath, [...nodeArgs, '--import', TSX, script], {
      env: { ...process.env, ...env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    live.add(child);
    return new JsonChild(label, child);
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  /** Sends `signal` (e.g. SIGKILL) without waiting. */
  signal(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** Sends a command and resolves with its answer (the line with the same id). */
  send(command: Line, timeoutMs = 30_000): Promise<Line> {
    const id = this.nextId++;
    const answer = this.waitFor((line) => line.id === id, timeoutMs);
    this.child.stdin.write(`${JSON.stringify({ id, ...command })}\n`);
    return answer;
  }

  /** Resolves with the first matching line (already seen or future); rejects on timeout or exit. */
  waitFor(match: (line: Line) => boolean, timeoutMs = 30_000): Promise<Line> {
    const seen = this.lines.find(match);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const fail = (reason: string) => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(new Error(`${this.label}: ${reason}; stderr: ${this.stderr.join('').slice(-2_000)}`));
      };
      const timer = setTimeout(() => fail(`no answer within ${timeoutMs} ms`), timeoutMs);
      const waiter = {
        match,
        resolve: (line: Line) => {
          clearTimeout(timer);
          resolve(line);
        },
      };
      this.waiters.push(waiter);
      void this.exited.then((code) => {
        clearTimeout(timer);
        if (this.waiters.includes(waiter)) fail(`exited with ${code}`);
      });
    });
  }

  /** Ends the process whatever its state and waits for it. */
  async kill(): Promise<void> {
    if (!this.running) return;
    this.child.kill('SIGKILL');
    await this.exited;
  }
}

export async function killAll(children: readonly JsonChild[]): Promise<void> {
  await Promise.allSettled(children.map((child) => child.kill()));
}
