// Takeover after a SIGKILLed holder. A holder child process (test/fixtures/holder.ts) takes a
// lease; a challenger connection in this process polls leasehold.acquire every ~2 ms; the
// holder is SIGKILLed and we time kill -> the challenger's successful acquire.
//   liveness on:  the holder's session advisory lock dies with its connection, so the lease
//                 is free at once although its TTL (30 s) has barely started.
//   liveness off: only the TTL frees it, so the takeover takes about the TTL left.
import { performance } from 'node:perf_hooks';
import { HolderProcess } from '../../test/support/processes.js';
import { Session } from './session.js';
import { max, median, round, sleep } from './stats.js';

export const POLL_INTERVAL_MS = 2;
/** Polling before the kill, to show the lease is held and reach a steady polling rhythm. */
const POLL_BEFORE_KILL_MS = 100;

export interface TakeoverRun {
  /** SIGKILL -> the challenger's successful acquire. */
  takeoverMs: number;
  /**
   * SIGKILL -> this process saw the child exit. The kernel closes the child's sockets only
   * after tearing down its memory, so PostgreSQL cannot notice the death before about then.
   */
  processExitMs: number;
  /** Database time of the successful acquire minus the holder's expires_at (negative: before the TTL ran out). */
  afterExpiryMs: number;
  polls: number;
}

export interface TakeoverResult {
  liveness: boolean;
  ttl: string;
  runs: TakeoverRun[];
  medianMs: number;
  maxMs: number;
  /** Median SIGKILL -> child exit seen (the operating system's share). */
  medianProcessExitMs: number;
  /** Median child exit seen -> challenger's acquire (leasehold's share; can be < 0 by event-loop order). */
  medianAfterExitMs: number;
}

interface AcquireRow {
  acquired: boolean;
  token: string | null;
  reason: string;
  database_time: Date;
}

interface Win {
  at: number;
  databaseTime: Date;
  token: string;
  polls: number;
}

/** Polls leasehold.acquire until it wins, `timeoutMs` passes, or `stop()` is called. */
function poll(challenger: Session, name: string, timeoutMs: number): { won: Promise<Win>; stop(): void } {
  let stopped = false;
  const deadline = performance.now() + timeoutMs;
  const won = (async () => {
    let polls = 0;
    for (;;) {
      if (stopped) throw new Error('polling stopped');
      if (performance.now() > deadline) throw new Error(`the challenger did not get "${name}" within ${timeoutMs} ms`);
      const rows = await challenger.query<AcquireRow>('select * from leasehold.acquire($1, $2::interval, $3)', [
        name,
        '30 seconds',
        'bench-challenger',
      ]);
      const at = performance.now();
      polls++;
      const row = rows[0];
      if (row?.acquired && row.token) return { at, databaseTime: row.database_time, token: row.token, polls };
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

async function oneTakeover(
  connectionString: string,
  challenger: Session,
  liveness: boolean,
  ttlSeconds: number,
  index: number,
): Promise<TakeoverRun> {
  const ttl = `${ttlSeconds}s`;
  const name = `bench-takeover-${liveness ? 'liveness' : 'ttl'}-${index}`;
  const holder = await HolderProcess.startFixture(connectionString, liveness ? {} : { LIVENESS: 'off' });
  try {
    const answer = await holder.send({ cmd: 'acquire', name, ttl });
    if (answer.acquired !== true || typeof answer.expiresAt !== 'string') {
      throw new Error(`the holder did not acquire "${name}": ${JSON.stringify(answer)}`);
    }
    const expiresAt = new Date(answer.expiresAt);
    const polling = poll(challenger, name, ttlSeconds * 1000 + 10_000);
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
    await challenger.query('select leasehold.release($1, $2)', [name, win.token]);
    return {
      takeoverMs: round(win.at - killedAt, 2),
      processExitMs: round(exitedAt - killedAt, 2),
      afterExpiryMs: win.databaseTime.getTime() - expiresAt.getTime(),
      polls: win.polls,
    };
  } finally {
    await holder.kill();
  }
}

export async function measureTakeover(options: {
  connectionString: string;
  liveness: boolean;
  ttlSeconds: number;
  runs: number;
  onRun?: (run: TakeoverRun, index: number) => void;
}): Promise<TakeoverResult> {
  const challenger = await Session.open(options.connectionString, 'bench-challenger');
  try {
    const runs: TakeoverRun[] = [];
    for (let index = 0; index < options.runs; index++) {
      const run = await oneTakeover(options.connectionString, challenger, options.liveness, options.ttlSeconds, index);
      runs.push(run);
      options.onRun?.(run, index);
    }
    const times = runs.map((run) => run.takeoverMs);
    return {
      liveness: options.liveness,
      ttl: `${options.ttlSeconds}s`,
      runs,
      medianMs: round(median(times), 2),
      maxMs: round(max(times), 2),
      medianProcessExitMs: round(median(runs.map((run) => run.processExitMs)), 2),
      medianAfterExitMs: round(median(runs.map((run) => run.takeoverMs - run.processExitMs)), 2),
    };
  } finally {
    await challenger.close();
  }
}
