// Child processes that speak JSON lines, both sides of the pipe. The parent (JsonLinesProcess)
// spawns a process, sends commands ({"id":n,"cmd":...} on its stdin), awaits their answers
// (the line with the same id) or any unprompted event line, sends signals and always manages to
// end it. The child (serveCommands, writeLine) reads commands and writes answers and events.
// Used by the tests' fixtures, the demo, the fault suite and the benchmark.
import { spawn, type ChildProcess } from 'node:child_process';
import { basename } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/** One parsed line: a JSON object. */
export type Line = Record<string, unknown>;

export interface ExitStatus {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** tsx's loader, for running TypeScript children from a checkout (src/testing and dist/testing both sit two levels down). */
export const TSX_LOADER = fileURLToPath(new URL('../../node_modules/tsx/dist/esm/index.mjs', import.meta.url));

/** The command line that runs `script` with this Node.js: through tsx when it is TypeScript. */
export function nodeCommand(script: string, nodeArgs: readonly string[] = []): { command: string; args: string[] } {
  const loader = script.endsWith('.ts') ? ['--import', TSX_LOADER] : [];
  return { command: process.execPath, args: [...nodeArgs, ...loader, script] };
}

// Every child still running when this process exits is SIGKILLed, however it exits, so a failed
// test, benchmark or fault run leaves no process behind.
const live = new Set<ChildProcess>();
let exitHookInstalled = false;

/** SIGKILLs `child` when this process exits, unless it has exited before. */
export function killOnExit(child: ChildProcess): void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.on('exit', () => {
      for (const c of live) c.kill('SIGKILL');
    });
  }
  live.add(child);
  child.once('exit', () => live.delete(child));
}

export interface JsonLinesOptions {
  /** Names the process in error messages. @default the script's file name */
  label?: string;
  /** Added to this process's environment. */
  env?: Record<string, string>;
  cwd?: string;
  /** Options for node before the script (e.g. --expose-gc); for nodeScript() only. */
  nodeArgs?: readonly string[];
  /** false: the child's stdin is closed from the start (it takes no commands). @default true */
  stdin?: boolean;
  /** Called with every parsed line, answers included, in arrival order. */
  onLine?: (line: Line) => void;
  /** false: lines are not kept for waitFor() (a long history kept by onLine instead). @default true */
  keepLines?: boolean;
  /** How much of stderr is kept (the last characters). @default 1 MiB */
  stderrLimit?: number;
}

interface Waiter {
  match: (line: Line) => boolean;
  resolve: (line: Line) => void;
  /** Waits for the answer to a command (not kept in `lines`). */
  answer: boolean;
}

export class JsonLinesProcess {
  /** Every line but the answers to send() (those go to their sender only), unless keepLines is false. */
  readonly lines: Line[] = [];
  readonly exited: Promise<ExitStatus>;
  readonly label: string;
  private stderrText = '';
  private nextId = 1;
  private waiters: Waiter[] = [];
  private readonly stderrLimit: number;

  constructor(
    readonly child: ChildProcess,
    options: JsonLinesOptions = {},
  ) {
    this.label = options.label ?? `process ${child.pid ?? '?'}`;
    this.stderrLimit = options.stderrLimit ?? 1 << 20;
    const keep = options.keepLines ?? true;
    killOnExit(child);
    // A failed spawn (the executable is gone) emits 'error' and then 'exit'; the exit is reported.
    child.on('error', () => undefined);
    // Writing to a child that just died (EPIPE) must not crash the parent.
    child.stdin?.on('error', () => undefined);
    if (child.stdout) {
      createInterface({ input: child.stdout }).on('line', (text) => {
        const line = parseLine(text);
        if (!line) {
          // a line cut short by SIGKILL, or stray output: keep it where a failure report shows it
          if (text.trim()) this.appendStderr(`(stdout) ${text}\n`);
          return;
        }
        options.onLine?.(line);
        // Every waiter it matches gets it; an answer to send() is not kept.
        const matched = this.waiters.filter((w) => w.match(line));
        this.waiters = this.waiters.filter((w) => !matched.includes(w));
        for (const waiter of matched) waiter.resolve(line);
        if (keep && !matched.some((w) => w.answer)) this.lines.push(line);
      });
    }
    child.stderr?.on('data', (chunk: Buffer) => this.appendStderr(chunk.toString()));
    this.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  }

  /** Spawns `command` (no waiting). */
  static spawn(command: string, args: readonly string[], options: JsonLinesOptions = {}): JsonLinesProcess {
    const child = spawn(command, args, {
      env: { ...process.env, ...options.env },
      ...(options.cwd ? { cwd: options.cwd } : {}),
      stdio: [options.stdin === false ? 'ignore' : 'pipe', 'pipe', 'pipe'],
    });
    return new JsonLinesProcess(child, { label: basename(args.at(-1) ?? command), ...options });
  }

  /** Spawns a Node.js script (TypeScript through tsx) with this Node.js (no waiting). */
  static nodeScript(script: string, options: JsonLinesOptions = {}): JsonLinesProcess {
    const { command, args } = nodeCommand(script, options.nodeArgs);
    return JsonLinesProcess.spawn(command, args, { label: basename(script), ...options });
  }

  /**
   * Spawns `command` and waits for its first line matching `ready` (default: {"event":"ready"});
   * kills it and rejects if it exits or takes longer than `timeoutMs`.
   */
  static async start(
    command: string,
    args: readonly string[],
    env: Record<string, string> = {},
    ready: (line: Line) => boolean = (line) => line.event === 'ready',
    timeoutMs = 30_000,
  ): Promise<JsonLinesProcess> {
    const proc = JsonLinesProcess.spawn(command, args, { env });
    try {
      await proc.waitFor(ready, timeoutMs);
    } catch (error) {
      await proc.kill();
      throw error;
    }
    return proc;
  }

  /** start() for a Node.js script (TypeScript through tsx). */
  static startScript(script: string, env: Record<string, string> = {}, ready?: (line: Line) => boolean, timeoutMs?: number): Promise<JsonLinesProcess> {
    const { command, args } = nodeCommand(script);
    return JsonLinesProcess.start(command, args, env, ready, timeoutMs);
  }

  get pid(): number {
    return this.child.pid ?? -1;
  }

  get alive(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  /** The last part of what the process wrote to stderr. */
  get stderr(): string {
    return this.stderrText;
  }

  /** The `holder` its ready line announced. */
  get holderName(): string {
    return String(this.lines.find((l) => l.event === 'ready')?.holder);
  }

  /** Writes one line to the child's stdin, no answer expected (nothing when it has exited). */
  write(line: Line): void {
    if (this.alive) this.child.stdin?.write(`${JSON.stringify(line)}\n`);
  }

  /** Sends a command and resolves with its answer (the line with the same id). */
  send(command: Line, timeoutMs = 30_000): Promise<Line> {
    const id = this.nextId++;
    const answer = this.wait((line) => line.id === id, timeoutMs, true);
    this.write({ id, ...command });
    return answer;
  }

  /** Resolves with the first matching line (already kept or future); rejects on timeout or exit. */
  waitFor(match: (line: Line) => boolean, timeoutMs = 30_000): Promise<Line> {
    const seen = this.lines.find(match);
    if (seen) return Promise.resolve(seen);
    return this.wait(match, timeoutMs, false);
  }

  private wait(match: (line: Line) => boolean, timeoutMs: number, answer: boolean): Promise<Line> {
    return new Promise((resolve, reject) => {
      const fail = (reason: string) => {
        this.waiters = this.waiters.filter((w) => w !== waiter);
        reject(new Error(`${this.label}: ${reason}; lines: ${JSON.stringify(this.lines).slice(-2_000)}; stderr: ${this.stderrText.slice(-2_000)}`));
      };
      const timer = setTimeout(() => fail(`no matching line within ${timeoutMs} ms`), timeoutMs);
      const waiter: Waiter = {
        match,
        answer,
        resolve: (line) => {
          clearTimeout(timer);
          resolve(line);
        },
      };
      this.waiters.push(waiter);
      void this.exited.then(({ code, signal }) => {
        clearTimeout(timer);
        if (this.waiters.includes(waiter)) fail(`exited (${signal ?? code}) before a matching line`);
      });
    });
  }

  /** Sends `signal` without waiting (nothing when the process has exited). */
  signal(signal: NodeJS.Signals): void {
    if (this.alive) this.child.kill(signal);
  }

  /** Ends the process now whatever its state (a stopped one is continued first); synchronous, for exit handlers. */
  killNow(): void {
    if (!this.alive) return;
    this.child.kill('SIGCONT');
    this.child.kill('SIGKILL');
  }

  /** Ends the process whatever its state and waits for its exit. */
  async kill(): Promise<void> {
    this.killNow();
    await this.exited;
  }

  private appendStderr(text: string): void {
    this.stderrText += text;
    if (this.stderrText.length > this.stderrLimit) this.stderrText = this.stderrText.slice(-this.stderrLimit);
  }
}

/** Ends every process and waits for them all. */
export async function killAll(processes: readonly JsonLinesProcess[]): Promise<void> {
  await Promise.allSettled(processes.map((p) => p.kill()));
}

/** One line of text as a JSON object; undefined for anything else. */
export function parseLine(text: string): Line | undefined {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return undefined;
  }
  return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Line) : undefined;
}

// ---- the child's side ----------------------------------------------------------------------

/** Writes one JSON line to stdout. */
export function writeLine(line: object): void {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

export interface ServeOptions {
  /** stdin closed (the parent is gone). @default exit at once */
  onClose?: () => void;
}

/**
 * Reads commands from stdin, one JSON object a line, and hands each to `handle`. A command with a
 * numeric `id` is answered with `{ id, ...reply }`, or `{ id, error }` when `handle` throws;
 * lines that are not JSON objects are ignored.
 */
export function serveCommands(handle: (command: Line) => object | void | Promise<object | void>, options: ServeOptions = {}): void {
  const input = createInterface({ input: process.stdin });
  input.on('line', (text) => {
    const command = parseLine(text);
    if (!command) return;
    const id = typeof command.id === 'number' ? command.id : undefined;
    Promise.resolve()
      .then(() => handle(command))
      .then(
        (reply) => {
          if (id !== undefined) writeLine({ id, ...(reply ?? {}) });
        },
        (error: unknown) => {
          if (id !== undefined) writeLine({ id, error: String(error) });
        },
      );
  });
  input.on('close', options.onClose ?? (() => process.exit(0)));
}
