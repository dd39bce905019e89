// Database clock steps, for real: a PostgreSQL server of this test's own runs under libfaketime
// with its offset read from a file (changed while a worker and a lease holder are running).
// The database clock is the authority: a +1 h step expires every lease at once and jumps over
// 3,600 slots that never existed; a -30 s step must not stop scheduling.
import { expect, it } from 'vitest';
import { createLeasehold, startWorker, type Leasehold, type Logger, type Worker } from '../../src/index.js';
import { createMetrics } from '../../src/monitor/index.js';
import { sleep, waitFor } from '../support/db.js';
import { steppedServer } from '../support/stepped-server.js';

// the server's clock offset from real time, e.g. '+3600s', is read on every clock call
const server = steppedServer('leasehold-clock-');

interface Line {
  level: string;
  event?: string;
  [key: string]: unknown;
}

function collectingLogger(lines: Line[]): Logger {
  const at = (level: string) => (fields: object, msg?: string) => void lines.push({ level, msg, ...fields });
  return { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
}

// With liveness on, its ping notices the step; with liveness off (PgBouncer setups), the
// client's clock probe and the worker's claims do.
it.skipIf(!server.libfaketime).each([{ liveness: true }, { liveness: false }])('follows +1 h and -30 s steps of the database clock while a worker runs, liveness $liveness (uses libfaketime)', async ({ liveness }) => {
  const url = server.url;
  server.set('+0s');
  const suffix = liveness ? 'live' : 'nolive';
  const lines: Line[] = [];
  const logger = collectingLogger(lines);
  const runs: Date[] = [];
  const missed: Date[] = [];
  const allRuns: Date[] = [];
  // a failed wait says which one, with the clock log lines so far
  const until = <T,>(label: string, check: () => T, ms: number, every?: number) =>
    waitFor(check, ms, every).catch(() => {
      const clockLines = lines.filter((l) => String(l.event).startsWith('clock') || l.event === 'lease:lost' || l.event === 'slot:not-due');
      throw new Error(`${label}: not within ${ms} ms; log: ${JSON.stringify(clockLines).slice(0, 3_000)}`);
    });
  let holder: Leasehold | undefined;
  let worker: Worker | undefined;
  try {
    holder = await createLeasehold({ connectionString: url, logger, queryTimeout: '1s', liveness });
    worker = await startWorker({
      connectionString: url,
      logger,
      queryTimeout: '1s',
      liveness,
      handleSignals: false,
      shutdownGrace: '2s',
      jobs: [
        { name: `every-second-${suffix}`, every: '1s', ttl: '10s', handler: async (ctx) => void runs.push(ctx.slot) },
        // the catch-up policy bounds what runs of the slots a step jumped over
        { name: `none-${suffix}`, every: '1s', ttl: '10s', catchUp: 'none', handler: async () => undefined },
        { name: `all-${suffix}`, every: '10s', ttl: '10s', catchUp: { all: 2 }, handler: async (ctx) => void allRuns.push(ctx.slot) },
      ],
    });
    const metrics = createMetrics();
    metrics.observe(worker);
    metrics.observe(holder);
    worker.on('slot:missed', (event) => missed.push(...event.slots));
    const steps: number[] = []; // as the lease holder saw them
    holder.on('clock:step', (step) => steps.push(step.deltaMs));
    const workerSteps: number[] = [];
    let workerNoticed = 0; // database time at which the worker noticed the forward step
    worker.on('clock:step', (step) => {
      workerSteps.push(step.deltaMs);
      if (step.deltaMs > 0 && !workerNoticed) workerNoticed = step.databaseTime.getTime();
    });

    // A lease with a 10-minute ttl: its next heartbeat is 200 s away.
    const acquired = await holder.acquire(`long-lease-${suffix}`, { ttl: '10m', heartbeat: true });
    if (!acquired.acquired) throw new Error('expected to acquire');
    const { lease } = acquired;
    await until('first runs', () => runs.length >= 3, 15_000);

    // +1 hour, stepped 2-4 s into a 10 s period (the offset keeps the phase): the { all: 2 } job's
    // catch-up claims then do not meet its next regular slot, which would take the slot guard
    // past the older one (slots are claimed once, in order)
    await until('a step away from the 10 s boundary', () => Date.now() % 10_000 >= 2_000 && Date.now() % 10_000 < 4_000, 15_000, 20);
    const stepped = Date.now();
    server.set('+3600s');
    await until('lease lost after +1h', () => lease.lost, 10_000, 20);
    const lostAfterMs = Date.now() - stepped;
    expect(lease.lostReason?.reason).toBe('clock-step');
    expect(lease.signal.aborted).toBe(true);
    expect(lostAfterMs).toBeLessThan(8_000); // the liveness ping or clock probe (every 1 s) notices, not the heartbeat in 200 s
    expect(steps[0]).toBeGreaterThan(3_590_000);
    expect(steps[0]).toBeLessThan(3_610_000);
    const runsBeforeStep = runs.length;
    await until('runs after +1h', () => runs.some((slot) => slot.getTime() > stepped + 3_590_000) && runs.length >= runsBeforeStep + 3, 15_000);
    await until('step-slots line', () => lines.some((l) => l.event === 'clock:step-slots'), 10_000);
    const slotsLine = lines.find((l) => l.event === 'clock:step-slots');
    expect(slotsLine).toMatchObject({ level: 'warn', job: `every-second-${suffix}`, catchUp: "'latest'" });
    expect(Number(slotsLine?.slots)).toBeGreaterThan(3_000);
    await until('step-slots lines of 3 jobs', () => lines.filter((l) => l.event === 'clock:step-slots').length >= 3, 10_000);
    const byJob = (job: string) => lines.find((l) => l.event === 'clock:step-slots' && l.job === job);
    expect(byJob(`every-second-${suffix}`)).toMatchObject({ running: 1 });
    expect(byJob(`none-${suffix}`)).toMatchObject({ running: 0, catchUp: "'none'" });
    expect(byJob(`all-${suffix}`)).toMatchObject({ running: 2, catchUp: '{ all: 2 }' });
    // the { all: 2 } job (every 10 s) runs its two newest jumped-over slots, both at or before
    // the moment the worker noticed the step; its regular slots come after that moment
    const caughtUp = () => allRuns.filter((slot) => slot.getTime() > stepped + 3_000_000 && slot.getTime() <= workerNoticed + 500);
    await until('catch-up { all: 2 } runs', () => workerNoticed > 0 && caughtUp().length >= 2, 15_000);
    expect(lines.some((l) => l.event === 'clock:step' && l.level === 'warn' && Number(l.deltaMs) > 3_590_000)).toBe(true);
    // not 3,600 (or 1,000) missed slots that never existed
    expect(missed.length).toBeLessThan(10);

    // -30 seconds: slots already claimed come again later by the database clock; scheduling
    // must go on (pause ~30 s of slots that ran, then continue), not stop silently.
    const back = Date.now();
    server.set('+3570s');
    // (the holder has no lease left, so without liveness only the worker reads the clock now)
    await until('worker sees -30s', () => workerSteps.some((delta) => delta < -25_000 && delta > -35_000), 10_000);
    await until('step-back line', () => lines.some((l) => l.event === 'clock:step-back'), 10_000);
    const lastBefore = Math.max(...runs.map((slot) => slot.getTime()));
    // the first new run is a slot after the last one that ran (slots are claimed once), on
    // the database's new time, so about 30 s after the step
    await until('runs resume after -30s', () => runs.some((slot) => slot.getTime() > lastBefore), 50_000, 100);
    const resumedAfterMs = Date.now() - back;
    expect(resumedAfterMs).toBeLessThan(45_000);
    const runsAtResume = runs.length;
    await until('runs go on after -30s', () => runs.length >= runsAtResume + 3, 15_000);
    expect(missed.length).toBeLessThan(10);

    const text = await metrics.metrics();
    expect(text).toMatch(/leasehold_clock_steps_total\{direction="forward"\} [1-9]/);
    expect(text).toMatch(/leasehold_clock_steps_total\{direction="backward"\} [1-9]/);
    // eslint-disable-next-line no-console
    console.log(
      `clock steps (liveness ${liveness}): lease lost ${lostAfterMs} ms after +1h; ${Number(slotsLine?.slots)} slots inside the step, ${missed.length} recorded missed; ` +
        `runs resumed ${resumedAfterMs} ms after -30s`,
    );
  } finally {
    await worker?.stop();
    await holder?.close();
    await sleep(10);
  }
}, 180_000);
