// A Redis lock as the claim, against a redis-server this benchmark starts for itself:
//   SET key token NX PX ttl                       — 1 round trip, never waits
//   EVAL <compare-and-delete> 1 key token          — release (+1)
// The lock expires by the Redis server's clock; there is no fence, a loser learns nothing
// about the holder, and it is a second system to run next to the database.
//
// The server: `redis-server` (/usr/bin/redis-server or on PATH) on a free loopback port, with
// persistence off, as a child of this process. It is never the machine's own Redis (6379).
// stop() ends it; it is also SIGKILLed when this process exits however it exits.
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { accessSync, constants } from 'node:fs';
import { createServer } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { Redis } from 'ioredis';
import { killOnExit } from '../../src/testing/json-lines.js';
import type { ClaimConnection, ClaimOutcome, ClaimPattern } from './pattern.js';
import { sleep } from './stats.js';

export const REDIS_HOST = '127.0.0.1';

/** Deletes the key only when it still holds the caller's token. */
export const COMPARE_AND_DELETE = "if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end";

export const redisKey = (name: string): string => `leasehold-bench:${name}`;

/** One ioredis connection that counts the commands it sends (no auto-pipelining: one round trip each). */
export class RedisSession implements ClaimConnection {
  roundTrips = 0;
  failure: Error | undefined;

  private constructor(readonly client: Redis) {}

  static async open(port: number, connectionName: string): Promise<RedisSession> {
    const client = new Redis({
      host: REDIS_HOST,
      port,
      connectionName,
      lazyConnect: true,
      // A benchmark connection that breaks should fail the measurement, not retry quietly.
      retryStrategy: () => null,
      maxRetriesPerRequest: 0,
      enableOfflineQueue: false,
    });
    const session = new RedisSession(client);
    client.on('error', (error: Error) => {
      session.failure = error;
    });
    try {
      await client.connect();
    } catch (error) {
      client.disconnect();
      throw error;
    }
    return session;
  }

  /** Sends one command (one round trip). */
  async command<T>(send: (client: Redis) => Promise<T>): Promise<T> {
    this.roundTrips++;
    return send(this.client);
  }

  async close(): Promise<void> {
    await this.client.quit().catch(() => undefined);
    this.client.disconnect();
  }
}

export const redisPattern: ClaimPattern<RedisSession> = {
  id: 'redis',
  description: 'SET key token NX PX ttl — 1 round trip; a winner then releases with EVAL compare-and-delete (+1)',
  guarantees: 'TTL (Redis server clock), no fence, a loser learns nothing; a second system next to the database',
  table: null,

  async prepare(session: RedisSession, name: string): Promise<void> {
    await session.command((client) => client.del(redisKey(name)));
  },

  async acquire(session: RedisSession, name: string, _holder: string, ttlSeconds: number): Promise<ClaimOutcome> {
    const token = randomUUID();
    const reply = await session.command((client) => client.set(redisKey(name), token, 'PX', Math.round(ttlSeconds * 1000), 'NX'));
    const won = reply === 'OK';
    return { won, token: won ? token : null, reason: won ? 'acquired' : 'held' };
  },

  async release(session: RedisSession, name: string, token: string): Promise<boolean> {
    const deleted = await session.command((client) => client.eval(COMPARE_AND_DELETE, 1, redisKey(name), token));
    return deleted === 1;
  },
};

/** /usr/bin/redis-server, else the first redis-server on PATH, else null. */
export function findRedisServer(): string | null {
  const candidates = ['/usr/bin/redis-server', ...(process.env.PATH ?? '').split(path.delimiter).filter(Boolean).map((dir) => path.join(dir, 'redis-server'))];
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not there
    }
  }
  return null;
}

/** A free TCP port on the loopback interface (free now; the server binds it right after). */
async function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, REDIS_HOST, () => {
      const address = server.address();
      server.close(() => {
        if (address && typeof address === 'object') resolve(address.port);
        else reject(new Error('no port'));
      });
    });
  });
}

export interface RedisServer {
  binary: string;
  port: number;
  version: string;
  pid: number | undefined;
  stop(): Promise<void>;
}

const READY_TIMEOUT_MS = 10_000;

async function startOnce(binary: string, port: number): Promise<RedisServer> {
  const child: ChildProcess = spawn(
    binary,
    ['--port', String(port), '--bind', REDIS_HOST, '--save', '', '--appendonly', 'no', '--daemonize', 'no'],
    // Working directory: a temporary one, so a stray dump could never land in the repository.
    { cwd: os.tmpdir(), stdio: ['ignore', 'pipe', 'pipe'] },
  );
  killOnExit(child);
  const output: string[] = [];
  child.stdout?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
  child.stderr?.on('data', (chunk: Buffer) => output.push(chunk.toString()));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.once('error', (error: Error) => output.push(`spawn error: ${error.message}\n`));
  const running = () => child.exitCode === null && child.signalCode === null;
  const stop = async () => {
    if (!running()) return;
    child.kill('SIGTERM');
    const gone = await Promise.race([exited.then(() => true), sleep(3_000).then(() => false)]);
    if (!gone) {
      child.kill('SIGKILL');
      await exited;
    }
  };

  // Ready when a PING on the port answers; the server's log tells why when it does not.
  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (!running()) throw new Error(`redis-server exited before it was ready: ${output.join('').slice(-1_000)}`);
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`redis-server not ready within ${READY_TIMEOUT_MS} ms: ${output.join('').slice(-1_000)}`);
    }
    let session: RedisSession | undefined;
    try {
      session = await RedisSession.open(port, 'bench-ready-check');
      const info = await session.command((client) => client.info('server'));
      // Make sure it is OUR server that answered on the port.
      const pid = Number(/process_id:(\d+)/.exec(info)?.[1]);
      if (pid !== child.pid) throw new Error(`port ${port} is answered by process ${pid}, not by the redis-server started here`);
      const version = /redis_version:(\S+)/.exec(info)?.[1] ?? 'unknown';
      return { binary, port, version, pid: child.pid, stop };
    } catch (error) {
      if (error instanceof Error && error.message.startsWith('port ')) {
        await stop();
        throw error;
      }
      await sleep(50);
    } finally {
      await session?.close();
    }
  }
}

/** Starts a private redis-server on a free loopback port (three tries, in case the port is taken meanwhile). */
export async function startRedisServer(binary: string): Promise<RedisServer> {
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freeLoopbackPort();
    try {
      return await startOnce(binary, port);
    } catch (error) {
      lastError = error;
    }
  }
  throw lastError instanceof Error ? lastError : new Error(String(lastError));
}
