// One demo worker process: the scheduler runtime (startWorker) with the demo's two jobs.
//
//   nightly-report  every 2s, ttl 3s, overlap 'skip'        usually 0.7 s; a slow run takes 3.2 s
//   sync-invoices   every 3s, ttl 3s, overlap 'buffer-one'  usually 0.3 s; a slow run takes 4.2 s
//
// Which runs are slow is planned by the orchestrator (a `plan` command names the job and the
// slot, and is sent to every worker: whichever claims the slot runs it slowly). Every run ends
// with a fenced write of one row into demo_writes.
//
// It prints nothing but JSON lines on stdout (see protocol.ts), from the worker's events; the
// orchestrator (run.ts) tells the story. Commands come as JSON lines on stdin.
// Environment: DATABASE_URL (the demo database), WORKER_NAME (its holder name).
import { setTimeout as sleep } from 'node:timers/promises';
import { LeaseLostError } from '../errors.js';
import { silentLogger } from '../observe/logger.js';
import type { JobContext } from '../job/job.js';
import { startWorker, type Worker } from '../worker/worker.js';
import { EVENT_JSON } from '../testing/events.js';
import { serveCommands, writeLine } from '../testing/json-lines.js';
import { DEMO_JOBS, toCommand, slotKey, type WorkerCommand, type WorkerEvent } from './protocol.js';

const name = process.env.WORKER_NAME ?? `worker-${process.pid}`;

function emit(event: WorkerEvent): void {
  writeLine({ ...event, worker: name, at: Date.now() });
}

/** `job@slot` → how long that run takes (ms). */
const plans = new Map<string, number>();

function plannedMs(job: string, slot: Date): number {
  return plans.get(slotKey(job, slot)) ?? DEMO_JOBS.find((j) => j.name === job)?.usualMs ?? 500;
}

let worker: Worker | undefined;

/** The job: a slow part, then one fenced write. */
async function handler(ctx: JobContext): Promise<void> {
  // The slow part deliberately does not watch ctx.signal (a real job should pass it to what it
  // calls), so that a holder that lost its lease while frozen still reaches its write: that
  // write is what fencing must refuse. Expiry is not cancellation.
  await sleep(plannedMs(ctx.job, ctx.slot));
  try {
    await ctx.transaction(async (client) => {
      await client.query('insert into demo_writes (job, slot, fence, worker) values ($1, $2, $3, $4)', [ctx.job, ctx.slot, ctx.fence, name]);
    });
    emit({ type: 'wrote', job: ctx.job, slot: ctx.slot.toISOString(), fence: ctx.fence });
  } catch (error) {
    if (!(error instanceof LeaseLostError) || !ctx.lease || !worker) throw error;
    // The refusal may come from the client (the lease's local deadline had passed) before any
    // SQL is sent. Show that the database refuses the stale fence on its own as well: the same
    // insert, guarded only by the SQL check leasehold.holds_lease().
    const guarded = await worker.leasehold.pool.query(
      `insert into demo_writes (job, slot, fence, worker)
       select $1, $4, $3, $5 where leasehold.holds_lease($1, $2, $3)`,
      [ctx.job, ctx.lease.token, ctx.fence, ctx.slot, name],
    );
    emit({
      type: 'refused',
      job: ctx.job,
      slot: ctx.slot.toISOString(),
      fence: ctx.fence,
      reason: error.reason,
      error: `${error.name}: ${error.message}`,
      signalAborted: ctx.signal.aborted,
      sqlRows: guarded.rowCount ?? 0,
    });
    throw error;
  }
}

worker = await startWorker({
  connectionString: process.env.DATABASE_URL,
  holder: name,
  // The timeline comes from the worker's events; error-level log lines (a claim or a
  // finish_run that failed, ...) go to the orchestrator too, which shows them.
  logger: { ...silentLogger(), error: (fields, message) => emit({ type: 'log', level: 'error', message: message ?? '', fields: plain(fields) }) },
  // The orchestrator stops the workers with a command (or kills them); SIGINT from a Ctrl-C in
  // the terminal reaches this process too and is handled below.
  handleSignals: false,
  shutdownGrace: '6s',
  jobs: DEMO_JOBS.map((job) => ({ name: job.name, every: job.everyMs, ttl: job.ttl, overlap: job.overlap, handler })),
});

// lease:acquired comes just before run:started (same tick): remember whether each run took
// its lease over from a holder that never released it.
const tookOver = new Map<string, boolean>();
worker.on('lease:acquired', (lease) => tookOver.set(`${lease.name}#${lease.fence}`, lease.tookOver));
worker.on('run:started', (run) => {
  const key = `${run.job}#${run.fence}`;
  emit({ type: 'started', ...EVENT_JSON['run:started'](run), tookOver: tookOver.get(key) ?? false, plannedMs: plannedMs(run.job, run.slot) });
  tookOver.delete(key);
});
worker.on('run:finished', (run) => emit({ type: 'finished', ...EVENT_JSON['run:finished'](run) }));
worker.on('slot:skipped', (skip) => emit({ type: 'skipped', ...EVENT_JSON['slot:skipped'](skip) }));
worker.on('slot:missed', (missed) => emit({ type: 'missed', ...EVENT_JSON['slot:missed'](missed) }));
worker.on('lease:lost', (lease, error) => emit({ type: 'lost', job: lease.name, ...EVENT_JSON['lease:lost'](lease, error) }));

/** Log fields as JSON can carry them (errors by their message). */
function plain(fields: object): Record<string, unknown> {
  return JSON.parse(JSON.stringify(fields, (_key, value: unknown) => (value instanceof Error ? `${value.name}: ${value.message}` : value))) as Record<string, unknown>;
}

let stopping = false;
async function stop(): Promise<void> {
  if (stopping) return;
  stopping = true;
  try {
    await worker?.stop();
    emit({ type: 'stopped' });
  } catch (error) {
    emit({ type: 'error', message: `stopping: ${String(error)}` });
  }
  process.exit(0);
}

function handle(command: WorkerCommand): void {
  switch (command.cmd) {
    case 'plan':
      plans.set(slotKey(command.job, command.slot), command.ms);
      return;
    case 'stop':
      void stop();
      return;
  }
}

process.on('SIGINT', () => void stop());
process.on('SIGTERM', () => void stop());

serveCommands(
  (line) => {
    const command = toCommand(line);
    if (command) handle(command);
  },
  // The orchestrator is gone: do not linger (liveness frees any lease at once when we exit).
  { onClose: () => void stop() },
);

emit({ type: 'ready', pid: process.pid, holder: worker.holder });
