// The story's phases, in order: runs with a skip and a buffered slot; a worker killed in the
// middle of a slow run (liveness frees its lease at once); a worker frozen past its TTL (its
// late write is refused by the fence); the wind-down. Each waits for the events it expects and
// records what did not happen as a problem (or throws a StoryError when it cannot go on).
import { iso } from './helpers.js';
import { StoryError } from './processes.js';
import { REPORT_JOB, SYNC_JOB, slotKey, type MessageOf } from './protocol.js';
import type { Demo } from './run.js';
import { clockTime, ms } from './story.js';

const DEMO = 'demo';
/** The orchestrator stops (SIGSTOP) or kills a holder this far into a slow run at the latest, or tries the next one. */
const KILL_INTO_RUN_MS = 1_300;
const FREEZE_INTO_RUN_MS = 400;
/** How long the frozen worker stays frozen after the takeover was seen. */
const FROZEN_AFTER_TAKEOVER_MS = 700;
/** A run that starts this long after its slot is not "on time". */
const ON_TIME_MS = 1_000;

export async function phaseSkipAndBuffer(demo: Demo): Promise<void> {
  const story = demo.story;
  story.heading(`1. Runs, a skip and a buffered slot: each slot runs on one worker; a slow run makes the next slot skip (or wait, under buffer-one)`);
  // Both slow runs start at a slot that both jobs share (a multiple of 6 s); in the full
  // story the sync-invoices one comes a slot later.
  const report = demo.nextSlot(REPORT_JOB.everyMs, demo.dbNow() + (demo.quick ? 1_500 : 2_500), (s) => s % 6_000 === 0);
  const sync = demo.quick ? report : report + SYNC_JOB.everyMs;
  demo.plan(REPORT_JOB.name, report, REPORT_JOB.slowMs);
  demo.plan(SYNC_JOB.name, sync, SYNC_JOB.slowMs);
  story.line(
    DEMO,
    `today the ${REPORT_JOB.name} run of slot ${clockTime(report)} will be slow (${ms(REPORT_JOB.slowMs)}, longer than its ${ms(REPORT_JOB.everyMs)} interval), ` +
      `and so will ${SYNC_JOB.name} at ${clockTime(sync)} (${ms(SYNC_JOB.slowMs)}; interval ${ms(SYNC_JOB.everyMs)})`,
  );
  const waitMs = (slot: number, extra: number) => Math.max(0, slot - demo.dbNow()) + extra;
  const skipped = demo.log.first(
    'skipped',
    (m) => m.job === REPORT_JOB.name && m.slot === iso(report + REPORT_JOB.everyMs),
    waitMs(report, 12_000),
    `the skip of ${REPORT_JOB.name} slot ${clockTime(report + REPORT_JOB.everyMs)}`,
  );
  const buffered = demo.log.first(
    'started',
    (m) => m.job === SYNC_JOB.name && m.slot === iso(sync + SYNC_JOB.everyMs),
    waitMs(sync, 15_000),
    `the buffered start of ${SYNC_JOB.name} slot ${clockTime(sync + SYNC_JOB.everyMs)}`,
  );
  skipped.catch(() => undefined);
  buffered.catch(() => undefined);
  await demo.guard(skipped);
  const start = await demo.guard(buffered);
  if (!demo.timeline.bufferedSlots.has(slotKey(start.job, start.slot))) {
    demo.problems.push(`${SYNC_JOB.name} slot ${clockTime(start.slot)} ran, but no worker reported it as buffered`);
  }
  await demo.guard(demo.log.first('finished', (m) => m.job === start.job && m.fence === start.fence, 10_000, 'the end of the buffered run'));
}

export async function phaseKill(demo: Demo, databaseUrl: string): Promise<void> {
  const story = demo.story;
  story.heading(
    `2. A worker is killed (SIGKILL) in the middle of a slow run: its liveness session dies with it, so the next slot runs on time elsewhere, not after the ${ms(REPORT_JOB.ttlMs)} TTL`,
  );
  for (let attempt = 1; ; attempt++) {
    if (attempt > 3) throw new StoryError('could not catch a worker in the middle of a slow run to kill it (3 attempts)');
    // Not at a slot where sync-invoices starts a second after: the victim might hold that run too.
    const slot = demo.nextSlot(REPORT_JOB.everyMs, demo.dbNow() + 1_200, (s) => s % 6_000 !== 2_000);
    const run = await slowRun(demo, slot);
    if (!run) continue;
    const victim = demo.worker(run.worker);
    await demo.sleepUntil(slot + KILL_INTO_RUN_MS);
    const status = await leaseStatus(demo, REPORT_JOB.name);
    if (demo.dbNow() > slot + REPORT_JOB.everyMs - 300 || !victim.alive) {
      story.line(DEMO, demo.paint(`(the demo's own timer fired too late to kill ${victim.name} before the next slot; taking the next slow run)`, 'dim'));
      continue;
    }
    if (status?.holder !== victim.name || status.fence !== run.fence || status.state !== 'held') {
      story.line(DEMO, demo.paint(`(${victim.name} no longer holds the lease of its run; taking the next slow run)`, 'dim'));
      continue;
    }
    const nextSlot = slot + REPORT_JOB.everyMs;
    const leftMs = (status.expiresAt?.getTime() ?? 0) - demo.dbNow();
    const others = [...demo.timeline.openRuns.values()].filter((r) => r.worker === victim.name && r.job !== REPORT_JOB.name);
    story.line(
      DEMO,
      `${demo.paint(`KILL  ${victim.name}`, 'red', 'bold')} (SIGKILL, pid ${victim.pid}) ${ms(Date.now() - run.at)} into its slow run of ${REPORT_JOB.name} slot ${clockTime(slot)} (fence ${run.fence}); ` +
        `its lease has ${ms(leftMs)} of TTL left, the next slot is ${clockTime(nextSlot)}`,
    );
    if (others.length > 0) story.note(`it also held ${others.map((r) => `${r.job} (fence ${r.fence})`).join(', ')}`);
    const takeover = demo.log.first('started', (m) => m.job === REPORT_JOB.name && m.slot === iso(nextSlot), 10_000, `the run of slot ${clockTime(nextSlot)} after the kill`);
    const skipped = demo.log.first('skipped', (m) => m.job === REPORT_JOB.name && m.slot === iso(nextSlot), 10_000, 'a skip');
    takeover.catch(() => undefined);
    skipped.catch(() => undefined);
    const killedAt = Date.now();
    victim.signal('SIGKILL');
    demo.killed = { worker: victim.name, fence: run.fence, slot: run.slot };
    const freedMs = await holderGone(demo, REPORT_JOB.name, victim.name, killedAt, Math.max(100, demo.localAt(nextSlot) - Date.now() - 150));
    story.note(
      freedMs === undefined
        ? demo.paint(`${victim.name}'s liveness session was still there ${ms(Date.now() - killedAt)} after the kill`, 'red')
        : `liveness: ${victim.name}'s session (and its advisory lock) was gone ${freedMs} ms after the kill; leasehold.lease_status shows holder_alive = false`,
    );
    // A supervisor (systemd, Kubernetes) would start a new worker: so does the demo, once the
    // takeover is told (starting a process takes CPU the others need to be on time).
    const replace = () => demo.startWorker(databaseUrl, victim.name);

    const first = await demo.guard(Promise.race([takeover, skipped]));
    if (first.type === 'skipped') {
      demo.problems.push(
        `slot ${clockTime(nextSlot)} was skipped after ${victim.name} was killed (held by ${first.holder}): liveness did not free the lease in time`,
      );
      story.line(DEMO, demo.paint(`slot ${clockTime(nextSlot)} was skipped: the killed worker's lease was not freed by liveness`, 'red', 'bold'));
      demo.replacement = replace();
      demo.replacement.catch(() => undefined);
      return;
    }
    const next = first;
    const afterKillMs = next.at - killedAt;
    const lateMs = Math.round(next.at - demo.localAt(nextSlot));
    const { rows } = await demo.query<{ outcome: string; error: string | null }>('select outcome, error from leasehold.runs where job = $1 and fence = $2', [
      REPORT_JOB.name,
      run.fence,
    ]);
    const recorded = rows[0];
    demo.takeovers.push({
      text: `${next.worker} at the next slot, ${afterKillMs} ms after ${victim.name} was killed${freedMs === undefined ? '' : ` (liveness freed the lease within ${freedMs} ms)`}`,
      job: next.job,
      fence: next.fence,
    });
    story.line(
      DEMO,
      demo.paint(
        `TAKEOVER ${next.worker} ran slot ${clockTime(nextSlot)} on time (+${lateMs} ms), ${afterKillMs} ms after ${victim.name} was killed, ` +
          `${victim.name}'s run recorded as ${recorded?.outcome ?? 'missing'}`,
        'green',
        'bold',
      ),
    );
    story.note(
      `the lease still had ${ms(Math.max(0, leftMs - afterKillMs))} of TTL left: by the TTL alone slot ${clockTime(nextSlot)} would have been skipped` +
        (recorded?.error ? `; leasehold.runs says: ${recorded.error}` : ''),
    );
    if (!next.tookOver) demo.problems.push(`the run of slot ${clockTime(nextSlot)} after the kill was not reported as a takeover`);
    if (next.fence !== run.fence + 1) demo.problems.push(`the takeover after the kill got fence ${next.fence}, expected ${run.fence + 1}`);
    if (lateMs > ON_TIME_MS) demo.problems.push(`the slot after the kill started ${lateMs} ms after its time (more than ${ON_TIME_MS} ms)`);
    if (recorded?.outcome !== 'lost') demo.problems.push(`the killed run (fence ${run.fence}) is recorded as ${recorded?.outcome ?? 'nothing'}, not lost`);
    // The freeze comes next while the new worker starts: it may or may not take part.
    demo.replacement = replace();
    demo.replacement.catch(() => undefined);
    return;
  }
}

export async function phaseFreeze(demo: Demo): Promise<void> {
  const story = demo.story;
  story.heading(
    `3. A worker is frozen (SIGSTOP) in the middle of a slow run, longer than its ${ms(REPORT_JOB.ttlMs)} TTL: expiry is not cancellation, fencing protects the write`,
  );
  for (let attempt = 1; ; attempt++) {
    if (attempt > 3) throw new StoryError('could not catch a worker in the middle of a slow run to freeze it (3 attempts)');
    // Not at a slot where a sync-invoices run starts too: the victim might still be in it.
    const slot = demo.nextSlot(REPORT_JOB.everyMs, demo.dbNow() + 1_200, (s) => s % 6_000 !== 0);
    const run = await slowRun(demo, slot);
    if (!run) continue;
    const victim = demo.worker(run.worker);
    await demo.sleepUntil(slot + FREEZE_INTO_RUN_MS);
    // Its first heartbeat comes a third of the TTL after the claim: freeze it before that.
    if (demo.dbNow() > slot + REPORT_JOB.ttlMs / 3 - 150 || !victim.alive) {
      story.line(DEMO, demo.paint(`(the demo's own timer fired too late to freeze ${victim.name} before its first heartbeat; taking the next slow run)`, 'dim'));
      continue;
    }
    const takeover = demo.log.first(
      'started',
      (m) => m.job === REPORT_JOB.name && m.fence > run.fence,
      REPORT_JOB.ttlMs + 3 * REPORT_JOB.everyMs + 5_000,
      `a takeover from the frozen ${victim.name}`,
    );
    takeover.catch(() => undefined);
    victim.signal('SIGSTOP');
    demo.timeline.frozenVictim = victim.name;
    const frozenAt = Date.now();
    story.line(
      DEMO,
      `${demo.paint(`STOP  ${victim.name}`, 'yellow', 'bold')} (SIGSTOP, pid ${victim.pid}) ${ms(frozenAt - run.at)} into its slow run of ${REPORT_JOB.name} slot ${clockTime(slot)} (fence ${run.fence}): frozen, no heartbeats`,
    );
    story.note(`its process and its liveness connection stay open, so only its ${ms(REPORT_JOB.ttlMs)} TTL can free the lease`);

    const next = await demo.guard(takeover);
    const { rows } = await demo.query<{ outcome: string }>('select outcome from leasehold.runs where job = $1 and fence = $2', [REPORT_JOB.name, run.fence]);
    demo.takeovers.push({ text: `${next.worker} ${ms(next.at - frozenAt)} into the freeze of ${victim.name}`, job: next.job, fence: next.fence });
    story.line(
      DEMO,
      demo.paint(
        `TAKEOVER ${next.worker} ran slot ${clockTime(next.slot)} (fence ${next.fence}) ${ms(next.at - frozenAt)} into the freeze: ${victim.name}'s lease had expired; its run recorded as ${rows[0]?.outcome ?? 'missing'}`,
        'green',
        'bold',
      ),
    );
    if (!next.tookOver) demo.problems.push(`the run of slot ${clockTime(next.slot)} during the freeze was not reported as a takeover`);
    if (rows[0]?.outcome !== 'lost') demo.problems.push(`the frozen run (fence ${run.fence}) is recorded as ${rows[0]?.outcome ?? 'nothing'}, not lost`);
    await demo.sleep(FROZEN_AFTER_TAKEOVER_MS);

    const wrote = demo.log.first('wrote', (m) => m.worker === victim.name && m.job === REPORT_JOB.name && m.fence === run.fence, 15_000, `the late write of ${victim.name}`);
    const refused = demo.log.first('refused', (m) => m.worker === victim.name && m.job === REPORT_JOB.name && m.fence === run.fence, 15_000, `the late write of ${victim.name}`);
    wrote.catch(() => undefined);
    refused.catch(() => undefined);
    story.line(
      DEMO,
      `${demo.paint(`CONT  ${victim.name}`, 'yellow', 'bold')} (SIGCONT) after ${ms(Date.now() - frozenAt)} frozen, longer than its ${ms(REPORT_JOB.ttlMs)} TTL: its handler resumes where it was and tries its fenced write`,
    );
    victim.signal('SIGCONT');
    const result = await demo.guard(Promise.race([wrote, refused]));
    if (result.type === 'wrote') {
      throw new StoryError(`the stale write of ${victim.name} (fence ${run.fence}) was NOT refused although fence ${next.fence} had been granted`);
    }
    demo.stale = { worker: victim.name, fence: run.fence };
    if (result.sqlRows !== 0) demo.problems.push(`the database accepted a holds_lease()-guarded write under stale fence ${run.fence}`);
    if (!result.signalAborted) demo.problems.push(`${victim.name}'s AbortSignal had not fired when its write was refused`);
    await demo.guard(demo.log.first('finished', (m) => m.worker === victim.name && m.fence === run.fence && m.job === REPORT_JOB.name, 10_000, `the end of ${victim.name}'s stale run`));
    return;
  }
}

export async function phaseWindDown(demo: Demo): Promise<void> {
  await demo.sleep(demo.quick ? 500 : 1_500);
  demo.story.heading('4. Wind down');
  if (demo.replacement) await demo.guard(demo.replacement);
  demo.story.line(DEMO, 'asking every worker to stop: finish its runs, release its leases, close its client and exit');
  await demo.guard(Promise.all(demo.live().map((w) => w.stop(SYNC_JOB.slowMs + 8_000))));
  demo.woundDown = true;
}

/**
 * Plans a slow nightly-report run at `slot` and waits for its start. Undefined when it did
 * not start slow (say the plan reached no worker in time) or its worker is gone.
 */
async function slowRun(demo: Demo, slot: number): Promise<MessageOf<'started'> | undefined> {
  demo.plan(REPORT_JOB.name, slot, REPORT_JOB.slowMs);
  const run = await demo.guard(
    demo.log.first(
      'started',
      (m) => m.job === REPORT_JOB.name && m.slot === iso(slot),
      Math.max(0, slot - demo.dbNow()) + 8_000,
      `the run of ${REPORT_JOB.name} slot ${clockTime(slot)}`,
    ),
  );
  if (run.plannedMs !== REPORT_JOB.slowMs) return undefined;
  const worker = demo.life.workers.find((w) => w.name === run.worker);
  return worker?.alive && !worker.exitExpected ? run : undefined;
}

/** Polls lease_status until `holder` no longer holds `name` or its liveness session is gone; ms since `since`, or undefined after `limitMs`. */
async function holderGone(demo: Demo, name: string, holder: string, since: number, limitMs: number): Promise<number | undefined> {
  const deadline = Date.now() + limitMs;
  for (;;) {
    const status = await leaseStatus(demo, name);
    if (status?.holder !== holder || status.holderAlive === false || status.state !== 'held') return Date.now() - since;
    if (Date.now() > deadline) return undefined;
    await demo.sleep(5);
  }
}

async function leaseStatus(demo: Demo, name: string) {
  return (await demo.life.observer?.leases())?.find((lease) => lease.name === name);
}
