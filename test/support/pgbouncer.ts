// Starts a real PgBouncer (Debian package `pgbouncer`) in transaction pooling mode in front of
// a test database, on a free loopback port, with a generated ini and userlist.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { delimiter, join } from 'node:path';
import { freePort } from '../../src/db/embedded.js';
import { waitUntilServerReady } from '../../src/testing/server-ready.js';

/** The pgbouncer binary (Debian installs it in /usr/sbin, often not on a user's PATH), or undefined. */
export function findPgBouncer(): string | undefined {
  const dirs = [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/local/sbin', '/usr/local/bin'];
  return dirs.filter(Boolean).map((dir) => join(dir, 'pgbouncer')).find((file) => existsSync(file));
}

export interface PgBouncer {
  port: number;
  /** URL of `database` through PgBouncer (same user and password as the direct URL). */
  url(database?: string): string;
  /** Its log so far (stderr), for failure messages. */
  log(): string;
  stop(): Promise<void>;
}

/**
 * PgBouncer in front of the database of `directUrl`. Clients authenticate with auth_type=trust
 * (the user must be in the userlist); PgBouncer logs in to PostgreSQL with the userlist's
 * password, which covers both the embedded server (password auth) and a trust server.
 * Besides the database's own name it serves `<name>_single`, a pool of one server connection,
 * and `<name>_session`, the same database in session pooling mode.
 */
export async function startPgBouncer(binary: string, directUrl: string): Promise<PgBouncer> {
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      return await startOnce(binary, directUrl, await freePort());
    } catch (error) {
      lastError = error; // most likely the port was taken in between: try another
    }
  }
  throw lastError;
}

async function startOnce(binary: string, directUrl: string, port: number): Promise<PgBouncer> {
  const target = new URL(directUrl);
  const database = decodeURIComponent(target.pathname.slice(1));
  const user = decodeURIComponent(target.username || 'postgres');
  const password = decodeURIComponent(target.password);
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-pgbouncer-'));
  chmodSync(dir, 0o755); // PgBouncer refuses to run as root, so it may read these as another user
  const server = `host=${target.hostname} port=${target.port || '5432'} dbname=${database}`;
  const ini = join(dir, 'pgbouncer.ini');
  const userlist = join(dir, 'userlist.txt');
  writeFileSync(
    ini,
    [
      '[databases]',
      `${database} = ${server}`,
      `${database}_single = ${server} pool_size=1`,
      `${database}_session = ${server} pool_mode=session`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      'unix_socket_dir =',
      'auth_type = trust',
      `auth_file = ${userlist}`,
      `admin_users = ${user}`,
      'pool_mode = transaction',
      'default_pool_size = 10',
      'max_client_conn = 200',
      '',
    ].join('\n'),
    { mode: 0o644 },
  );
  const quote = (s: string) => `"${s.replace(/"/g, '""')}"`;
  writeFileSync(userlist, `${quote(user)} ${quote(password)}\n`, { mode: 0o644 });

  const args = [ini];
  if (process.getuid?.() === 0) {
    // "PgBouncer should not run as root": let it switch to an unprivileged user.
    const runAs = ['nobody', 'postgres'].find((name) => spawnSync('id', ['-u', name], { stdio: 'ignore' }).status === 0);
    if (!runAs) throw new Error('running as root, and neither user nobody nor postgres exists for PgBouncer to run as');
    args.unshift('-u', runAs);
  }
  const child: ChildProcess = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr?.on('data', (chunk: Buffer) => (log += chunk.toString()));
  const exited = new Promise<void>((resolve) => child.on('exit', () => resolve()));
  let running = true;
  void exited.then(() => (running = false));

  const url = (name = database) => {
    const u = new URL(directUrl);
    u.port = String(port);
    u.hostname = '127.0.0.1';
    u.pathname = `/${name}`;
    return u.toString();
  };
  const stop = async () => {
    if (running) {
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 3_000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };

  // Ready when a query goes through it to the server.
  try {
    await waitUntilServerReady(url(), { what: `pgbouncer on port ${port}`, timeoutMs: 10_000, alive: () => running, log: () => log });
  } catch (error) {
    await stop();
    throw error;
  }
  return { port, url, log: () => log, stop };
}
