// The processes of a failover topology built from distribution packages (Patroni, etcd,
// HAProxy, pg_auto_failover): daemons started as the servers' OS user (as root: `postgres`,
// which PostgreSQL needs), whole process trees killed or frozen like a host, a work folder
// they can write, and an exit hook that leaves no process and no folder behind.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { runAs, type RunAs } from '../pg-server.js';

const live = new Set<number>();
const liveDataDirs = new Set<string>();
const liveFolders = new Set<string>();
process.on('exit', () => {
  for (const dir of liveDataDirs) for (const pid of tree(postmasterPid(dir))) signal(pid, 'SIGKILL');
  for (const pid of live) for (const p of tree(pid)) signal(p, 'SIGKILL');
  for (const dir of liveFolders) rmSync(dir, { recursive: true, force: true });
});

/** A program on PATH or in the usual sbin folders, or undefined. */
export function findProgram(name: string, extraDirs: string[] = []): string | undefined {
  const dirs = [...extraDirs, ...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/bin', '/usr/local/bin'];
  return dirs.filter(Boolean).map((dir) => join(dir, name)).find((file) => existsSync(file));
}

/** The OS user the servers run as (undefined: this process's), or why there is none. */
export function serverUser(): RunAs | undefined | string {
  return runAs();
}

/** A fresh folder the servers' OS user owns, removed by `remove()` or at exit. */
export function workFolder(prefix: string, user: RunAs | undefined): { path: string; remove: () => void } {
  const path = mkdtempSync(join(tmpdir(), prefix));
  chmodSync(path, 0o755);
  if (user) chownSync(path, user.uid, user.gid);
  liveFolders.add(path);
  return {
    path,
    remove: () => {
      rmSync(path, { recursive: true, force: true });
      liveFolders.delete(path);
    },
  };
}

/** The postmaster's pid from its data directory (0 when not running). */
export function postmasterPid(dataDir: string): number {
  try {
    return Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0]) || 0;
  } catch {
    return 0;
  }
}

/** Watches a data directory: its postmaster is killed at exit whoever started it (Patroni does, detached). */
export function trackDataDir(dataDir: string): void {
  liveDataDirs.add(dataDir);
}

/** `pid` and all its descendants, parents first. */
export function tree(pid: number): number[] {
  if (!pid) return [];
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch {
      // gone meanwhile
    }
  }
  const out: number[] = [];
  const walk = (p: number) => {
    out.push(p);
    for (const c of children.get(p) ?? []) walk(c);
  };
  walk(pid);
  return out;
}

export function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig);
  } catch {
    // already gone
  }
}

export function alive(pid: number): boolean {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
    const state = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return state.slice(state.lastIndexOf(')') + 2, state.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

/** A long-running program of the topology, its output kept (the tail) for error messages. */
export class Daemon {
  readonly child: ChildProcess;
  private output = '';

  constructor(
    readonly name: string,
    command: string,
    args: string[],
    options: { user: RunAs | undefined; env?: Record<string, string>; cwd?: string },
  ) {
    this.child = spawn(command, args, {
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(options.user ?? {}),
      cwd: options.cwd,
      env: { ...process.env, LC_ALL: 'C', ...options.env },
    });
    const keep = (chunk: Buffer) => {
      this.output = (this.output + chunk.toString()).slice(-20_000);
    };
    this.child.stdout?.on('data', keep);
    this.child.stderr?.on('data', keep);
    if (this.child.pid) live.add(this.child.pid);
    this.child.once('exit', () => {
      if (this.child.pid) live.delete(this.child.pid);
    });
  }

  get pid(): number {
    return this.child.pid ?? 0;
  }

  get running(): boolean {
    return this.child.exitCode === null && this.child.signalCode === null;
  }

  log(): string {
    return `---- ${this.name}\n${this.output}`;
  }

  /** SIGKILL to the daemon and all its descendants; resolves when it has exited. */
  async kill(): Promise<void> {
    if (!this.running) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    for (const pid of tree(this.pid)) signal(pid, 'SIGCONT');
    for (const pid of tree(this.pid)) signal(pid, 'SIGKILL');
    await exited;
  }

  /** Asks it to stop (SIGTERM), then kills it after `graceMs`. */
  async stop(graceMs = 5_000): Promise<void> {
    if (!this.running) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    signal(this.pid, 'SIGTERM');
    const timer = setTimeout(() => void this.kill(), graceMs);
    await exited;
    clearTimeout(timer);
  }
}

export const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Polls `fn` until it returns a value other than undefined/false, or throws `what` after `timeoutMs`. */
export async function waitFor<T>(fn: () => Promise<T | undefined | false> | T | undefined | false, timeoutMs: number, what: () => string, everyMs = 100): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await fn();
      if (value !== undefined && value !== false) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`${what()} (not within ${timeoutMs / 1000} s${last ? `; last error: ${String(last)}` : ''})`);
    await sleep(everyMs);
  }
}

/** HTTP status of a GET (0 when nothing answered in time). */
export async function httpStatus(url: string, timeoutMs = 1_000): Promise<number> {
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    await response.arrayBuffer();
    return response.status;
  } catch {
    return 0;
  }
}

/** Runs a program to completion as `user`; throws with its output when it fails. */
export function run(command: string, args: string[], user: RunAs | undefined, env: Record<string, string> = {}): string {
  const result = spawnSync(command, args, { encoding: 'utf8', ...(user ?? {}), env: { ...process.env, LC_ALL: 'C', ...env }, timeout: 120_000 });
  if (result.status !== 0) throw new Error(`${command} ${args.join(' ')} failed (${result.status ?? result.signal}): ${result.stderr}${result.stdout}`);
  return result.stdout;
}

/** The same without blocking the event loop (the run's histories keep arriving meanwhile). */
export function runAsync(command: string, args: string[], user: RunAs | undefined, env: Record<string, string> = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ['ignore', 'pipe', 'pipe'], ...(user ?? {}), env: { ...process.env, LC_ALL: 'C', ...env } });
    let out = '';
    child.stdout?.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`${command} ${args.join(' ')} failed (${code}): ${out.slice(-4_000)}`))));
  });
}
