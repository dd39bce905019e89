// One demo worker process. It competes for the "nightly-report" lease with leasehold.run():
// every `intervalMs` it tries to run a job that takes `jobMs` (longer than the interval), and
// the job ends with a fenced write of one row into report_runs.
//
// It prints nothing but JSON lines on stdout (see protocol.ts); the orchestrator
// (lease-demo.ts) tells the story. Commands come as JSON lines on stdin.
// Environment: DATABASE_URL (the demo database), WORKER_NAME (its holder name).
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLeasehold, LeaseLostError, silentLogger, type RunContext } from '../src/index.js';
import { LEASE_NAME, parseCommand, type WorkerCommand, type WorkerEvent } from './protocol.js';

const name = process.env.WORKER_NAME ?? `worker-${process.pid}`;

function emit(event: WorkerEvent): void {
  process.stdout.write(`${JSON.stringify({ ...event, worker: name, at: Date.now() })}\n`);
}

const leasehold = await createLeasehold({
  connectionString: process.env.DATABASE_URL,
  holder: name,
  logger: silentLogger(),
});

// Whether each acquisition took the lease over from a holder that never released it, as the
// database reports it (the lease:acquired event comes before run() calls the job).
const tookOver = new Map<number, boolean>();
leasehold.on('lease:acquired', (lease) => {
  if (lease.name === LEASE_NAME) tookOver.set(lease.fence, lease.tookOver);
});

let ttl = '5s';
let jobMs = 2500;
let stopping = false;
const stopRequested = new AbortController();

/** The job: a slow report, then one fenced write. */
async function job(ctx: RunContext): Promise<void> {
  // The slow part. It deliberately does not watch ctx.signal (a real job should pass it to
  // whatever supports it) so that a holder that lost its lease still reaches its write:
  // that write is what fencing must refuse. The timer is set before 'started' is reported,
  // so a process frozen right after that report is frozen in the middle of this wait.
  const slowPart = sleep(jobMs);
  emit({ type: 'started', fence: ctx.fence, ttl, jobMs, tookOver: tookOver.get(ctx.fence) ?? false });
  tookOver.delete(ctx.fence);
  ctx.signal.addEventListener(
    'abort',
    () => {
      const reason: unknown = ctx.signal.reason;
      const why = reason instanceof LeaseLostError ? reason.reason : 'unknown';
      if (why !== 'released') emit({ type: 'lost', fence: ctx.fence, reason: why });
    },
    { once: true },
  );

  await slowPart;

  try {
    await ctx.transaction(async (client) => {
      await client.query('insert into report_runs (fence, worker, finished_at) values ($1, $2, now())', [ctx.fence, name]);
    });
    emit({ type: 'wrote', fence: ctx.fence });
  } catch (error) {
    if (!(error instanceof LeaseLostError)) throw error;
    // The refusal above may come from the client (the lease's local deadline passed) before
    // any SQL is sent. Show that the database refuses the stale fence on its own as well:
    // the same insert, guarded only by the SQL check leasehold.holds_lease().
    const guarded = await leasehold.pool.query(
      `insert into report_runs (fence, worker, finished_at)
       select $3, $4, now() where leasehold.holds_lease($1, $2, $3)`,
      [LEASE_NAME, ctx.lease.token, ctx.fence, name],
    );
    const cause: unknown = error.cause;
    const detail =
      typeof cause === 'object' && cause !== null && 'detail' in cause && typeof cause.detail === 'string' ? cause.detail : null;
    emit({
      type: 'refused',
      fence: ctx.fence,
      reason: error.reason,
      detail,
      signalAborted: ctx.signal.aborted,
      sqlRows: guarded.rowCount ?? 0,
    });
  }
}

async function loop(intervalMs: number, offsetMs: number): Promise<void> {
  await sleep(offsetMs, undefined, { signal: stopRequested.signal }).catch(() => undefined);
  while (!stopping) {
    const triedAt = Date.now();
    let ran = false;
    try {
      const result = await leasehold.run(LEASE_NAME, { ttl }, job);
      if (result.ran) {
        ran = true;
        const lost = result.lost instanceof LeaseLostError ? result.lost.reason : result.lost ? 'renew-failed' : null;
        emit({ type: 'finished', fence: result.fence, lost });
      } else {
        const { skipped } = result;
        const now = skipped.databaseTime.getTime();
        emit({
          type: 'skipped',
          reason: skipped.reason,
          holder: skipped.holder,
          fence: skipped.fence,
          heldMs: skipped.since ? now - skipped.since.getTime() : null,
          leftMs: skipped.until ? skipped.until.getTime() - now : null,
        });
      }
    } catch (error) {
      emit({ type: 'error', message: error instanceof Error ? `${error.name}: ${error.message}` : String(error) });
    }
    // After a run, give the others a full interval before trying again; after a skip, keep
    // the cadence. A little jitter keeps the workers from trying in lockstep.
    const next = (ran ? Date.now() : triedAt) + intervalMs + Math.round((Math.random() - 0.5) * 200);
    await sleep(Math.max(0, next - Date.now()), undefined, { signal: stopRequested.signal }).catch(() => undefined);
  }
}

let running: Promise<void> | undefined;

async function stop(): Promise<void> {
  if (stopping) return;
  stopping = true;
  stopRequested.abort();
  await running;
  await leasehold.close();
  emit({ type: 'stopped' });
  process.exit(0);
}

function handle(command: WorkerCommand): void {
  switch (command.cmd) {
    case 'start':
      ttl = command.ttl;
      jobMs = command.jobMs;
      running ??= loop(command.intervalMs, command.offsetMs);
      return;
    case 'configure':
      ttl = command.ttl;
      return;
    case 'stop':
      void stop();
      return;
  }
}

emit({ type: 'ready', pid: process.pid });

const input = createInterface({ input: process.stdin });
input.on('line', (line) => {
  const command = parseCommand(line);
  if (command) handle(command);
});
// The orchestrator is gone: do not linger (the liveness session frees any lease at once).
input.on('close', () => {
  if (!stopping) process.exit(0);
});
