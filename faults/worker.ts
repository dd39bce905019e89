// A fault-suite worker process: the public startWorker API running the fault workload, with
// a JSONL history on stdout (see HistoryLine in ./common.ts).
//
// Every run sleeps a random time (not watching its AbortSignal: a handler that does not
// check the signal is exactly the case fencing must handle), then makes one fenced write
// through ctx.transaction: a read-modify-write of its job's counter and a row in
// test_output(job, slot, fence, worker, ord) whose ord = nextval('lh_test_order') is taken
// inside the transaction, that is, while the lease row is locked FOR KEY SHARE, so ord order
// is the order in which writes and grants were serialized on that row.
//
// Environment: DATABASE_URL (the worker's proxy), WORKER (holder name), JOBS (JobSpec[] as
// JSON), SEED, MUTANT ('unfenced-write' makes the write outside the fenced transaction: the
// "unfenced final write" broken variant), QUERY_TIMEOUT, CONNECT_TIMEOUT, PROBE_MS ("min,max":
// after each run, a stale-token probe that many ms later; see the 'probe' history line).
import pg from 'pg';
import {
  DatabaseUnavailableError,
  LeaseLostError,
  OutcomeUnknownError,
  ShutdownError,
  startWorker,
  type JobContext,
  type Logger,
  type Worker,
} from '../src/index.js';
import { EVENT_JSON, reportEvents } from '../src/testing/events.js';
import { writeLine } from '../src/testing/json-lines.js';
import { mono, Rng, sleep, type HistoryLine, type JobSpec, type WriteStatus } from './common.js';

const workerName = process.env.WORKER ?? `w${process.pid}`;
const specs = JSON.parse(process.env.JOBS ?? '[]') as JobSpec[];
const rng = new Rng(Number(process.env.SEED ?? 1) ^ process.pid);
const unfenced = process.env.MUTANT === 'unfenced-write';
const queryTimeoutMs = Number(process.env.QUERY_TIMEOUT ?? 1500);
const connectTimeoutMs = Number(process.env.CONNECT_TIMEOUT ?? 2000);
const url = process.env.DATABASE_URL;
const probeMs = process.env.PROBE_MS ? (process.env.PROBE_MS.split(',').map(Number) as [number, number]) : undefined;

type Omit2<T, K extends PropertyKey> = T extends unknown ? Omit<T, K> : never;
type HistoryEvent = Omit2<HistoryLine, 'worker' | 'mono'>;
function out(line: HistoryEvent): void {
  writeLine({ ...line, worker: workerName, mono: mono() });
}

// The library's log: skip lines become history (property (d) wants a log line naming the
// holder for every skip); warnings and errors go to stderr for the run's log files.
const logger: Logger = {
  debug: () => undefined,
  info: () => undefined,
  warn: (fields, message) => {
    const f = fields as Record<string, unknown>;
    if (f.event === 'slot:skipped') {
      out({ type: 'skip-log', job: String(f.job), slot: String(f.slot), holder: typeof f.holder === 'string' ? f.holder : null, msg: message ?? '' });
    }
    process.stderr.write(`${JSON.stringify({ level: 'warn', msg: message, ...f })}\n`);
  },
  error: (fields, message) => {
    const f = fields as Record<string, unknown>;
    // logged just before run:finished: the release is not acknowledged, so no probe of that token
    if (f.event === 'run:finish-failed') unreleased.add(`${String(f.job)}|${Number(f.fence)}`);
    process.stderr.write(`${JSON.stringify({ level: 'error', msg: message, ...fields })}\n`);
  },
};
const unreleased = new Set<string>();

// The broken variant's write path: a plain transaction on its own pool, no lease check.
const plainPool = unfenced || probeMs ? new pg.Pool({ connectionString: url, max: 4, connectionTimeoutMillis: connectTimeoutMs }) : undefined;
plainPool?.on('error', () => undefined);

async function writeStatements(client: pg.ClientBase, ctx: JobContext, insideMs: number): Promise<number> {
  // Part of the work inside the transaction: a pause, kill or cut-off now happens while the
  // lease row is locked FOR KEY SHARE (takeovers wait for the idle-in-transaction timeout).
  if (insideMs > 0) await sleep(insideMs);
  const q = (text: string, values: unknown[]) => client.query({ text, values, query_timeout: queryTimeoutMs } as pg.QueryConfig);
  // Read-modify-write without a row lock: a lost increment is a second witness of overlap.
  const counter = await q('select n from test_counter where job = $1', [ctx.job]);
  const n = Number((counter.rows[0] as { n?: number } | undefined)?.n ?? 0);
  await q('update test_counter set n = $2 where job = $1', [ctx.job, n + 1]);
  const inserted = await q(
    `insert into test_output (job, slot, fence, worker, ord) values ($1, $2, $3, $4, nextval('lh_test_order')) returning ord::float8 as ord`,
    [ctx.job, ctx.slot, ctx.fence, workerName],
  );
  return Number((inserted.rows[0] as { ord: number }).ord);
}

async function unfencedWrite(ctx: JobContext, insideMs: number): Promise<number> {
  const client = await (plainPool as pg.Pool).connect();
  client.on('error', () => undefined);
  try {
    await client.query('begin');
    const ord = await writeStatements(client, ctx, insideMs);
    await client.query('commit');
    return ord;
  } catch (error) {
    await client.query('rollback').catch(() => undefined);
    throw error;
  } finally {
    client.release(true);
  }
}

/** Sleeps `ms`; ignores lease loss (on purpose), returns false early on shutdown. */
function work(ms: number, signal: AbortSignal): Promise<boolean> {
  return new Promise((resolve) => {
    const onAbort = () => {
      if (signal.reason instanceof ShutdownError) {
        clearTimeout(timer);
        resolve(false);
      }
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    signal.addEventListener('abort', onAbort);
    if (signal.aborted) onAbort();
  });
}

function describe(error: unknown): string {
  if (error instanceof LeaseLostError) return error.reason;
  if (error instanceof Error) return `${error.name}: ${error.message}`.slice(0, 300);
  return String(error).slice(0, 300);
}

// The tokens of this worker's runs, for the probes (read from the lease row while the run holds it:
// the public API does not hand tokens to handlers, and the probe is a deliberate misuse).
const tokens = new Map<string, string>();
const runKey = (job: string, fence: number) => `${job}|${fence}`;

async function rememberToken(ctx: JobContext): Promise<void> {
  if (!plainPool) return;
  try {
    const { rows } = await plainPool.query<{ token: string | null }>({
      text: 'select token::text as token from leasehold.leases where name = $1 and fence = $2',
      values: [ctx.job, ctx.fence],
      query_timeout: queryTimeoutMs,
    } as pg.QueryConfig);
    const token = rows[0]?.token;
    if (token) tokens.set(runKey(ctx.job, ctx.fence), token);
  } catch {
    // no probe for this run
  }
}

/** A fenced check with a finished run's token, some time after it ended. */
function probeLater(job: string, fence: number): void {
  const token = tokens.get(runKey(job, fence));
  tokens.delete(runKey(job, fence));
  if (!token || !probeMs || !plainPool) return;
  const endedMono = mono();
  const timer = setTimeout(() => {
    void plainPool
      .query({ text: 'select leasehold.assert_lease($1, $2::uuid, $3)', values: [job, token, fence], query_timeout: queryTimeoutMs } as pg.QueryConfig)
      .then(
        () => out({ type: 'probe', job, fence, status: 'accepted', reason: null, endedMono }),
        (error: unknown) => {
          const code = (error as { code?: string }).code;
          out({ type: 'probe', job, fence, status: code === 'LH003' ? 'refused' : 'failed', reason: describe(error), endedMono });
        },
      );
  }, rng.between(...probeMs));
  timer.unref();
}

async function handler(ctx: JobContext, spec: JobSpec): Promise<void> {
  await rememberToken(ctx);
  const plannedMs = Math.round(rng.between(spec.minMs, spec.maxMs));
  // 30 % of runs spend up to 0.4 TTL of their time inside the fenced transaction
  const insideMs = rng.next() < 0.3 ? Math.round(Math.min(plannedMs / 2, spec.ttlMs * 0.4)) : 0;
  out({ type: 'start', job: ctx.job, slot: ctx.slot.toISOString(), fence: ctx.fence, plannedMs, wall: Date.now() });
  if (!(await work(plannedMs - insideMs, ctx.signal))) throw ctx.signal.reason;
  const afterLost = ctx.signal.aborted;
  const slot = ctx.slot.toISOString();
  try {
    const ord = unfenced ? await unfencedWrite(ctx, insideMs) : await ctx.transaction((client) => writeStatements(client, ctx, insideMs));
    out({ type: 'write', job: ctx.job, slot, fence: ctx.fence, status: 'accepted', ord, reason: null, afterLost });
  } catch (error) {
    // OutcomeUnknownError: the COMMIT got no answer. LeaseLostError: refused, locally when the
    // lease was already known lost (afterLost), else by assert_lease in the database (the error
    // may still name a local reason: the deadline can fire while the refusal is on its way).
    // Anything else failed before COMMIT was sent.
    const status: WriteStatus = error instanceof OutcomeUnknownError ? 'indeterminate' : error instanceof LeaseLostError ? 'rejected' : 'failed';
    out({ type: 'write', job: ctx.job, slot, fence: ctx.fence, status, ord: null, reason: describe(error), afterLost });
    throw error;
  }
}

// Event-loop stalls (SIGSTOP, an overloaded machine) make this process unhealthy for a
// while; the checker needs to know.
let lastBeat = mono();
const stallTimer = setInterval(() => {
  const now = mono();
  if (now - lastBeat > 350) out({ type: 'stall', from: lastBeat, to: now });
  lastBeat = now;
}, 50);
stallTimer.unref();

let worker: Worker | undefined;
for (let attempt = 1; !worker; attempt++) {
  try {
    worker = await startWorker({
      connectionString: url,
      holder: workerName,
      logger,
      queryTimeout: queryTimeoutMs,
      connectTimeout: connectTimeoutMs,
      shutdownGrace: '3s',
      // FAULT_CLAIM_AHEAD: the workers' claimAhead ('300ms': every tick claimed ahead); unset: the default
      ...(process.env.FAULT_CLAIM_AHEAD ? { claimAhead: process.env.FAULT_CLAIM_AHEAD } : {}),
      jobs: specs.map((spec) => ({
        name: spec.name,
        every: spec.everyMs,
        ttl: spec.ttlMs,
        overlap: 'skip' as const,
        catchUp: 'latest' as const,
        handler: (ctx: JobContext) => handler(ctx, spec),
      })),
    });
  } catch (error) {
    out({ type: 'start-failed', error: describe(error) });
    // The database may be restarting or this worker's proxy cutting it off: try again.
    if (!(error instanceof DatabaseUnavailableError) && attempt > 3) process.exit(2);
    if (attempt > 40) process.exit(2);
    await sleep(250);
  }
}
const w = worker;
// The history's event lines: the shared JSON forms (src/testing/events.ts), under the
// history's names; lease events also name their job.
w.on('lease:acquired', (lease) => out({ type: 'grant', job: lease.name, ...EVENT_JSON['lease:acquired'](lease) }));
w.on('run:finished', (run) => {
  // only a token whose release the database acknowledged is dead for sure
  const released = !unreleased.delete(runKey(run.job, run.fence));
  if (!released) tokens.delete(runKey(run.job, run.fence));
  const token = tokens.get(runKey(run.job, run.fence));
  out({ type: 'end', ...EVENT_JSON['run:finished'](run), ...(token ? { token } : {}) });
  probeLater(run.job, run.fence);
});
reportEvents(w, { 'slot:skipped': 'skip', 'slot:missed': 'missed', 'liveness:lost': 'liveness-lost' }, (type, fields) => out({ type, ...fields } as HistoryEvent));
w.on('lease:lost', (lease, error) => out({ type: 'lost', job: lease.name, ...EVENT_JSON['lease:lost'](lease, error) }));
out({ type: 'ready', pid: process.pid, wall: Date.now() });

await w.stopped;
out({ type: 'stopped' });
await plainPool?.end().catch(() => undefined);
process.exit(0);
