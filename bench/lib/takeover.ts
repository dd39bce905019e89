// Takeover after a SIGKILLed holder. A holder child process takes a lock; a challenger in this
// process tries to take it every ~2 ms; the holder is SIGKILLed and we time kill -> the
// challenger's successful claim.
//   leasehold, liveness on:  the holder's liveness lock dies with its connection, so the lease
//                            is free at once although its TTL (30 s) has barely started.
//   leasehold, liveness off: only the TTL frees it, so the takeover takes about the TTL left.
//   advisory lock:           pg_advisory_lock held by the holder's session; PostgreSQL frees
//                            it when the session ends (no TTL at all).
//   Redis:                   SET NX PX by the holder; only the TTL frees it (Redis's clock).
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { JsonLinesProcess } from '../../src/testing/json-lines.js';
import { startFixture } from '../../test/support/processes.js';
import { advisoryKey, TRY_ADVISORY_LOCK } from './advisory.js';
import { COMPARE_AND_DELETE, redisKey, RedisSession } from './redis.js';
import { Session } from './session.js';
import { max, median, round, sleep } from './stats.js';

export const POLL_INTERVAL_MS = 2;
/** Polling before the kill, to show the lock is held and reach a steady polling rhythm. */
const POLL_BEFORE_KILL_MS = 100;
const LOCK_HOLDER = fileURLToPath(new URL('../fixtures/lock-holder.ts', import.meta.url));

export type TakeoverMechanism = 'leasehold-liveness' | 'leasehold-ttl' | 'advisory' | 'redis-ttl';

export interface TakeoverRun {
  /** SIGKILL -> the challenger's successful claim. */
  takeoverMs: number;
  /**
   * SIGKILL -> this process saw the child exit. The kernel closes the child's sockets only
   * after tearing down its memory, so no server can notice the death before about then.
   */
  processExitMs: number;
  /**
   * The successful claim minus the holder's expiry (negative: before the TTL ran out). leasehold:
   * database time vs expires_at; Redis: local time vs the PTTL read right after the holder took
   * it (±1 round trip); null for the advisory lock (no TTL).
   */
  afterExpiryMs: number | null;
  polls: number;
}

export interface TakeoverResult {
  mechanism: TakeoverMechanism;
  /** For the report, e.g. "leasehold, liveness on (default)". */
  label: string;
  /** The holder's TTL, or null (advisory lock). */
  ttl: string | null;
  /** What frees the lock after the holder died. */
  freedBy: string;
  runs: TakeoverRun[];
  medianMs: number;
  maxMs: number;
  /** Median SIGKILL -> child exit seen (the operating system's share). */
  medianProcessExitMs: number;
  /** Median child exit seen -> challenger's claim (the lock's share; can be < 0 by event-loop order). */
  medianAfterExitMs: number;
}

/** A holder process the measurement can SIGKILL. */
interface Holder {
  signal(signal: NodeJS.Signals): void;
  readonly exited: Promise<unknown>;
  kill(): Promise<void>;
}

interface Held {
  holder: Holder;
  /** The holder's expiry on the clock `attempt` compares with, or null. */
  expiresAt: number | null;
}

type Attempt = { won: false } | { won: true; afterExpiryMs: number | null };

/** One way to hold a lock in a child process and to take it over from this one. */
export interface TakeoverScenario {
  mechanism: TakeoverMechanism;
  label: string;
  ttlSeconds: number | null;
  freedBy: string;
  /** Starts a holder process and makes it take `name`; resolves once it holds it. */
  hold(name: string): Promise<Held>;
  /** One claim by the challenger. */
  attempt(name: string, held: Held): Promise<Attempt>;
  /** Frees what the challenger won. */
  release(name: string): Promise<void>;
  close(): Promise<void>;
}

interface LeaseholdAcquireRow {
  acquired: boolean;
  token: string | null;
  reason: string;
  database_time: Date;
}

/** leasehold: the holder is test/fixtures/holder.ts (createLeasehold, liveness on or off). */
export async function leaseholdScenario(connectionString: string, liveness: boolean, ttlSeconds: number): Promise<TakeoverScenario> {
  const challenger = await Session.open(connectionString, 'bench-challenger');
  let token: string | null = null;
  return {
    mechanism: liveness ? 'leasehold-liveness' : 'leasehold-ttl',
    label: liveness ? 'leasehold, liveness on (default)' : 'leasehold, liveness off (TTL only)',
    ttlSeconds,
    freedBy: liveness ? 'the liveness lock ends with the holder\'s session' : 'the TTL (database clock)',
    async hold(name) {
      const holder = await startFixture(connectionString, liveness ? {} : { LIVENESS: 'off' });
      try {
        const answer = await holder.send({ cmd: 'acquire', name, ttl: `${ttlSeconds}s` });
        if (answer.acquired !== true || typeof answer.expiresAt !== 'string') {
          throw new Error(`the holder did not acquire "${name}": ${JSON.stringify(answer)}`);
        }
        return { holder, expiresAt: new Date(answer.expiresAt).getTime() };
      } catch (error) {
        await holder.kill();
        throw error;
      }
    },
    async attempt(name, held) {
      const rows = await challenger.query<LeaseholdAcquireRow>('select * from leasehold.acquire($1, $2::interval, $3)', [
        name,
        '30 seconds',
        'bench-challenger',
      ]);
      const row = rows[0];
      if (!row?.acquired || !row.token) return { won: false };
      token = row.token;
      return { won: true, afterExpiryMs: held.expiresAt === null ? null : row.database_time.getTime() - held.expiresAt };
    },
    async release(name) {
      if (token) await challenger.query('select leasehold.release($1, $2)', [name, token]);
      token = null;
    },
    close: () => challenger.close(),
  };
}

/** Starts bench/fixtures/lock-holder.ts and waits for its ready line. */
async function startLockHolder(label: string, env: Record<string, string>): Promise<JsonLinesProcess> {
  const holder = JsonLinesProcess.nodeScript(LOCK_HOLDER, { label, env });
  try {
    await holder.waitFor((line) => line.event === 'ready', 30_000);
    return holder;
  } catch (error) {
    await holder.kill();
    throw error;
  }
}

async function holderAcquire(holder: JsonLinesProcess, name: string, ttlMs: number): Promise<void> {
  const answer = await holder.send({ cmd: 'acquire', name, ttlMs });
  if (answer.acquired !== true) throw new Error(`the holder did not take "${name}": ${JSON.stringify(answer)}`);
}

/** A PostgreSQL session advisory lock: the holder's pg_advisory_lock(k), the challenger's pg_try_advisory_lock(k). */
export async function advisoryScenario(connectionString: string): Promise<TakeoverScenario> {
  const challenger = await Session.open(connectionString, 'bench-advisory-challenger');
  return {
    mechanism: 'advisory',
    label: 'advisory lock',
    ttlSeconds: null,
    freedBy: 'PostgreSQL, when the holder\'s session ends',
    async hold(name) {
      const holder = await startLockHolder('advisory holder', { KIND: 'advisory', DATABASE_URL: connectionString });
      try {
        await holderAcquire(holder, name, 0);
        return { holder, expiresAt: null };
      } catch (error) {
        await holder.kill();
        throw error;
      }
    },
    async attempt(name) {
      const rows = await challenger.query<{ locked: boolean }>(TRY_ADVISORY_LOCK, [advisoryKey(name)]);
      return rows[0]?.locked === true ? { won: true, afterExpiryMs: null } : { won: false };
    },
    async release(name) {
      await challenger.query('select pg_advisory_unlock($1::bigint)', [advisoryKey(name)]);
    },
    close: () => challenger.close(),
  };
}

/** A Redis lock: the holder's SET NX PX; the challenger's SET NX PX, released by compare-and-delete. */
export async function redisScenario(port: number, ttlSeconds: number): Promise<TakeoverScenario> {
  const challenger = await RedisSession.open(port, 'bench-redis-challenger');
  const token = `bench-challenger-${process.pid}`;
  return {
    mechanism: 'redis-ttl',
    label: 'Redis SET NX PX',
    ttlSeconds,
    freedBy: 'the TTL (Redis server clock)',
    async hold(name) {
      const holder = await startLockHolder('redis holder', { KIND: 'redis', REDIS_PORT: String(port) });
      try {
        await holderAcquire(holder, name, ttlSeconds * 1000);
        // The expiry on the local clock: now + the TTL Redis says is left.
        const pttl = await challenger.command((client) => client.pttl(redisKey(name)));
        if (pttl <= 0) throw new Error(`"${name}" has no TTL in Redis (PTTL ${pttl})`);
        return { holder, expiresAt: performance.now() + pttl };
      } catch (error) {
        await holder.kill();
        throw error;
      }
    },
    async attempt(name, held) {
      const reply = await challenger.command((client) => client.set(redisKey(name), token, 'PX', 30_000, 'NX'));
      if (reply !== 'OK') return { won: false };
      return { won: true, afterExpiryMs: held.expiresAt === null ? null : round(performance.now() - held.expiresAt, 0) };
    },
    async release(name) {
      await challenger.command((client) => client.eval(COMPARE_AND_DELETE, 1, redisKey(name), token));
    },
    close: () => challenger.close(),
  };
}

interface Win {
  at: number;
  afterExpiryMs: number | null;
  polls: number;
}

/** Polls the challenger's claim until it wins, `timeoutMs` passes, or `stop()` is called. */
function poll(scenario: TakeoverScenario, name: string, held: Held, timeoutMs: number): { won: Promise<Win>; stop(): void } {
  let stopped = false;
  const deadline = performance.now() + timeoutMs;
  const won = (async () => {
    let polls = 0;
    for (;;) {
      if (stopped) throw new Error('polling stopped');
      if (performance.now() > deadline) throw new Error(`the challenger did not get "${name}" within ${timeoutMs} ms`);
      const attempt = await scenario.attempt(name, held);
      const at = performance.now();
      polls++;
      if (attempt.won) return { at, afterExpiryMs: attempt.afterExpiryMs, polls };
      await sleep(POLL_INTERVAL_MS);
    }
  })();
  won.catch(() => undefined); // observed by the caller; avoids an unhandled rejection after stop()
  return {
    won,
    stop() {
      stopped = true;
    },
  };
}

async function oneTakeover(scenario: TakeoverScenario, index: number): Promise<TakeoverRun> {
  const name = `bench-takeover-${scenario.mechanism}-${index}`;
  const held = await scenario.hold(name);
  const { holder } = held;
  try {
    const polling = poll(scenario, name, held, (scenario.ttlSeconds ?? 0) * 1000 + 10_000);
    const early = await Promise.race([polling.won.then(() => true, () => false), sleep(POLL_BEFORE_KILL_MS).then(() => false)]);
    if (early) throw new Error(`the challenger took "${name}" before the holder was killed`);
    let exitedAt = Number.NaN;
    void holder.exited.then(() => {
      exitedAt = performance.now();
    });
    const killedAt = performance.now();
    holder.signal('SIGKILL');
    let win: Win;
    try {
      win = await polling.won;
    } finally {
      polling.stop();
    }
    await holder.exited;
    await scenario.release(name);
    return {
      takeoverMs: round(win.at - killedAt, 2),
      processExitMs: round(exitedAt - killedAt, 2),
      afterExpiryMs: win.afterExpiryMs,
      polls: win.polls,
    };
  } finally {
    await holder.kill();
  }
}

export async function measureTakeover(options: {
  scenario: TakeoverScenario;
  runs: number;
  onRun?: (run: TakeoverRun, index: number) => void;
}): Promise<TakeoverResult> {
  const { scenario } = options;
  try {
    const runs: TakeoverRun[] = [];
    for (let index = 0; index < options.runs; index++) {
      const run = await oneTakeover(scenario, index);
      runs.push(run);
      options.onRun?.(run, index);
    }
    const times = runs.map((run) => run.takeoverMs);
    return {
      mechanism: scenario.mechanism,
      label: scenario.label,
      ttl: scenario.ttlSeconds === null ? null : `${scenario.ttlSeconds}s`,
      freedBy: scenario.freedBy,
      runs,
      medianMs: round(median(times), 2),
      maxMs: round(max(times), 2),
      medianProcessExitMs: round(median(runs.map((run) => run.processExitMs)), 2),
      medianAfterExitMs: round(median(runs.map((run) => run.takeoverMs - run.processExitMs)), 2),
    };
  } finally {
    await scenario.close();
  }
}
