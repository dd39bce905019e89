// Drives a child process that speaks JSON lines (Python holders, pooled TypeScript holders):
// send a command, await its answer, wait for an unprompted event, send signals.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { createInterface } from 'node:readline';

export type Line = Record<string, unknown>;

export class JsonLinesProcess {
  readonly lines: Line[] = [];
  readonly stderr: string[] = [];
  readonly exited: Promise<number | null>;
  private nextId = 1;
  private waiters: Array<{ match: (line: Line) => boolean; resolve: (line: Line) => void }> = [];

  constructor(readonly child: ChildProcessWithoutNullStreams) {
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

  /** Starts `command` and waits for its first line matching `ready` (default: {"event":"ready"}). */
  static async start<T extends JsonLinesProcess>(
    this: new (child: ChildProcessWithoutNullStreams) => T,
    command: string,
    args: string[],
    env: Record<string, string>,
    ready: (line: Line) => boolean = (line) => line.event === 'ready',
    timeoutMs = 30_000,
  ): Promise<T> {
    const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ['pipe', 'pipe', 'pipe'] });
    const proc = new this(child);
    const failed = proc.exited.then((code) => {
      throw new Error(`${command} exited with ${code} before it was ready: ${proc.stderr.join('')}`);
    });
    try {
      await Promise.race([proc.waitFor(ready, timeoutMs), failed]);
    } catch (error) {
      await proc.kill();
      throw error;
    }
    failed.catch(() => undefined);
    return proc;
  }

  get pid(): number {
    return this.child.pid as number;
  }

  /** The `holder` its ready line announced. */
  get holderName(): string {
    return String(this.lines.find((l) => l.event === 'ready')?.holder);
  }

  /** Sends a command and resolves with its answer (the line with the same id). */
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
      const timer = setTimeout(
        () => reject(new Error(`no matching line within ${timeoutMs} ms; saw ${JSON.stringify(this.lines)}; stderr: ${this.stderr.join('')}`)),
        timeoutMs,
      );
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

  /** Ends the process whatever its state. */
  async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    this.child.kill('SIGCONT');
    this.child.kill('SIGKILL');
    await this.exited;
  }
}
