// Drives test/fixtures/holder.ts child processes: send a command, await its answer, wait for
// an unprompted event, send signals.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

const HOLDER = fileURLToPath(new URL('../fixtures/holder.ts', import.meta.url));
/** test/fixtures/scheduled-worker.ts: a scheduler worker that reports runs and skips as JSON lines. */
export const SCHEDULED_WORKER = fileURLToPath(new URL('../fixtures/scheduled-worker.ts', import.meta.url));
const TSX = fileURLToPath(new URL('../../node_modules/tsx/dist/esm/index.mjs', import.meta.url));

export type Line = Record<string, unknown>;

export class HolderProcess {
  readonly lines: Line[] = [];
  readonly stderr: string[] = [];
  private nextId = 1;
  private waiters: Array<{ match: (line: Line) => boolean; resolve: (line: Line) => void }> = [];
  readonly exited: Promise<number | null>;

  private constructor(readonly child: ChildProcessWithoutNullStreams) {
    createInterface({ input: child.stdout }).on('line', (text) => {
      let line: Line;
      try {
        line = JSON.parse(text) as Line;
      } catch {
        return;
      }
      this.lines.push(line);
      this.waiters = this.waiters.filter((w) => {
        if (!w.match(line)) return true;
        w.resolve(line);
        return false;
      });
    });
    child.stderr.on('data', (chunk: Buffer) => this.stderr.push(chunk.toString()));
    this.exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
  }

  /** Starts a holder (or another fixture `script` that prints a ready line) and waits until it is connected. `env` adds to the environment (e.g. LD_PRELOAD for libfaketime). */
  static async start(databaseUrl: string, env: Record<string, string> = {}, script = HOLDER): Promise<HolderProcess> {
    const child = spawn(process.execPath, ['--import', TSX, script], {
      env: { ...process.env, DATABASE_URL: databaseUrl, ...env },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    const holder = new HolderProcess(child);
    const ready = holder.waitFor((line) => line.event === 'ready', 30_000);
    const failed = holder.exited.then((code) => {
      throw new Error(`holder exited with ${code} before it was ready: ${holder.stderr.join('')}`);
    });
    await Promise.race([ready, failed]);
    return holder;
  }

  get pid(): number {
    return this.child.pid as number;
  }

  get holderName(): string {
    return String(this.lines.find((l) => l.event === 'ready')?.holder);
  }

  /** Sends a command and resolves with its answer. */
  send(command: Line, timeoutMs = 30_000): Promise<Line> {
    const id = this.nextId++;
    const answer = this.waitFor((line) => line.id === id, timeoutMs);
    this.child.stdin.write(`${JSON.stringify({ id, ...command })}\n`);
    return answer;
  }

  /** Resolves with the first line (already seen or future) that matches. */
  waitFor(match: (line: Line) => boolean, timeoutMs = 30_000): Promise<Line> {
    const seen = this.lines.find(match);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`no matching line within ${timeoutMs} ms; saw ${JSON.stringify(this.lines)}`)), timeoutMs);
      this.waiters.push({
        match,
        resolve: (line) => {
          clearTimeout(timer);
          resolve(line);
        },
      });
    });
  }

  signal(signal: NodeJS.Signals): void {
    this.child.kill(signal);
  }

  /** Ends the process whatever its state (a stopped process is continued first). */
  async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGCONT');
    this.child.kill('SIGKILL');
    await this.exited;
  }
}
