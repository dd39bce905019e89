// The scheduler part of the report: its target checks, tables and prose (text and markdown).
import { MAX_CLAIM_RETRIES, type IdleResult, type SchedulerResults } from './scheduler.js';
import type { TickResult } from './tick-analysis.js';
import type { TargetCheck } from './results.js';
import { max, median, min } from './stats.js';
import type { Table } from './table.js';

/** The start latency (p99, handler start minus slot) issue 12 sets for 10,000 jobs on 4 workers. */
export const START_P99_TARGET_MS = 250;
/** The first tick after the workers start (every deploy) against the steady ones: p99 at most this many times their mean p99. */
export const FIRST_TICK_RATIO_TARGET = 2;
/**
 * An idle worker's statements a minute: its liveness session's checks (one every 5 s: a silent
 * loss of that session must abort its runs in time) and the slow polls that heal a lost
 * notification (schedule changes, run requests, the delivery probe, the live workers' list, the
 * unhandled schedules: one each every 30 s).
 */
export const IDLE_STATEMENTS_TARGET = 24;

const fixed = (value: number, digits: number) => (Number.isFinite(value) ? value.toFixed(digits) : 'n/a');
const integer = (value: number) => (Number.isFinite(value) ? Math.round(value).toLocaleString('en-US') : 'n/a');
const list = (values: readonly number[], digits = 0) => values.map((v) => fixed(v, digits)).join(' ');
const range = (values: readonly number[]) => {
  const lo = min(values);
  const hi = max(values);
  return lo === hi ? integer(lo) : `${integer(lo)}–${integer(hi)}`;
};
const time = (iso: string) => iso.slice(11, 23);
const ratio = (value: number, baseline: number) => (Number.isFinite(value) && baseline > 0 ? `${(value / baseline).toFixed(2)}x` : 'n/a');

/** Statements a worker sent for the tick itself: its claims and the bookkeeping of its runs (not the polls). */
function tickStatements(tick: TickResult): number[] {
  const s = tick.statementsPerWorker;
  return s.total.map((_, w) => (s.claim[w] ?? 0) + (s.finish_runs[w] ?? 0) + (s.renew_leases[w] ?? 0) + (s.record_missed[w] ?? 0));
}

/** The tick's statements may grow with the runs a worker starts, but far slower than one per run. */
const RUNS_PER_STATEMENT = 100;
const tickStatementBudget = (claimed: number) => Math.max(10, Math.ceil(claimed / RUNS_PER_STATEMENT));

function claimErrors(tick: TickResult): number {
  return Object.entries(tick.reasons).reduce((n, [reason, count]) => (reason.startsWith('error:') ? n + count : n), 0);
}

export function schedulerTargets(results: SchedulerResults): TargetCheck[] {
  const { settings, ticks } = results;
  const checks: TargetCheck[] = [];
  const doubled = ticks.reduce((n, t) => n + t.verification.doubled, 0);
  checks.push({
    what: 'slots claimed twice (leasehold.runs rows per (job, slot) > 1)',
    target: '0',
    measured: `${doubled} over ${ticks.length} tick(s) × ${integer(settings.jobs)} jobs`,
    met: doubled === 0,
  });
  checks.push({
    what: `every job's slot claimed exactly once (${integer(settings.jobs)} jobs, ${settings.workers} workers)`,
    target: `${integer(settings.jobs)}/${integer(settings.jobs)} per tick`,
    measured: ticks
      .map((t) => {
        const v = t.verification;
        const missing = v.missing > 0 ? ` (missing ${integer(v.missing)}, of which skipped because the previous run still held the lease: ${integer(v.missingSkipped)})` : '';
        return `${integer(v.exactlyOnce)}/${integer(settings.jobs)}${missing}`;
      })
      .join('; '),
    met: ticks.every((t) => t.verification.exactlyOnce === settings.jobs && t.verification.doubled === 0),
  });
  const p99s = ticks.map((t) => t.startLatencyMs.p99);
  const baselineP99s = results.baselineTicks.map((t) => t.startLatencyMs.p99);
  checks.push({
    what: `handler start p99 (start - slot), ${integer(settings.jobs)} jobs due at once, ${settings.workers} workers, claimAhead 'auto'`,
    target: `<= ${START_P99_TARGET_MS} ms`,
    measured:
      `${p99s.map((p) => `${fixed(p, 0)} ms`).join(', ')}; with claimAhead '0ms' in the same run ${baselineP99s.map((p) => `${fixed(p, 0)} ms`).join(', ')}` +
      ` (ratio of the medians ${ratio(median(p99s), median(baselineP99s))})`,
    met: p99s.length > 0 && p99s.every((p) => p <= START_P99_TARGET_MS),
  });
  checks.push({
    what: `handler start p99, the same ticks with claimAhead '0ms' (every tick claimed at its slot)`,
    target: `<= ${START_P99_TARGET_MS} ms`,
    measured: baselineP99s.map((p) => `${fixed(p, 0)} ms`).join(', '),
    met: baselineP99s.length > 0 && baselineP99s.every((p) => p <= START_P99_TARGET_MS),
  });
  for (const [mode, first, steady] of [
    ["'auto'", results.warmupTicks, p99s],
    ["'0ms'", results.baselineWarmupTicks ?? [], baselineP99s],
  ] as const) {
    const firstP99 = first[0]?.startLatencyMs.p99;
    if (firstP99 === undefined || steady.length === 0) continue;
    const mean = steady.reduce((a, b) => a + b, 0) / steady.length;
    checks.push({
      what: `first tick after the workers started (every deploy): handler start p99 vs the mean of the measured ticks' p99, claimAhead ${mode}`,
      target: `<= ${FIRST_TICK_RATIO_TARGET}x`,
      measured: `${fixed(firstP99, 0)} ms vs ${fixed(mean, 0)} ms (${ratio(firstP99, mean)}; measured ${steady.map((p) => fixed(p, 0)).join(', ')} ms)`,
      met: firstP99 <= FIRST_TICK_RATIO_TARGET * mean,
    });
  }
  const idle = [results.idle, results.idleBaseline];
  checks.push({
    what: 'statements a minute of an idle worker (next slot months away), listening for changes',
    target: `<= ${IDLE_STATEMENTS_TARGET} (its liveness checks, 12, and the slow polls)`,
    measured: idle.map((r) => `${fixed(r.statementsPerMinute, 0)} with ${integer(r.jobs)} job(s)`).join(', '),
    met: idle.every((r) => r.statementsPerMinute <= IDLE_STATEMENTS_TARGET),
  });
  const claimCounts = ticks.flatMap((t) => t.claimStatementsPerWorker);
  const errors = ticks.reduce((n, t) => n + claimErrors(t), 0);
  checks.push({
    what: 'claim statements per worker per tick',
    target: `constant: its share and at most one second pass (+ at most ${MAX_CLAIM_RETRIES} retries of each)`,
    measured: `${range(claimCounts)} (batches: ${ticks.map((t) => t.claimBatches.join(', ')).join('; ')})${errors > 0 ? `; ${errors} failed` : ''}`,
    met: claimCounts.every((n) => n >= 1 && n <= 2 * (1 + MAX_CLAIM_RETRIES)) && errors === 0,
  });
  const perTick = ticks.flatMap(tickStatements);
  const of = (kind: 'finish_runs' | 'renew_leases') => range(ticks.flatMap((t) => t.statementsPerWorker[kind]));
  const claimed = ticks.flatMap((t) => t.claimedPerWorker);
  checks.push({
    what: "statements per worker per tick for its runs (claims, finish_runs, renew_leases, record_missed; not the polls)",
    target: `batched: at most 1 per ${RUNS_PER_STATEMENT} runs claimed (at least 10)`,
    measured: `${range(perTick)} for ${range(claimed)} runs, of which finish_runs ${of('finish_runs')}, renew_leases ${of('renew_leases')}`,
    met: perTick.length > 0 && perTick.every((n, i) => n <= tickStatementBudget(claimed[i] ?? 0)),
  });
  return checks;
}

function claimsTable(ticks: readonly TickResult[]): Table {
  return {
    headers: ['tick (UTC)', 'tick -> last claim ms', 'incl. empty retries ms', 'tick -> first sent ms', 'batch ms per worker', 'rows back -> last start ms per worker', 'GC until the last start ms per worker', 'claim statements per worker', 'jobs per statement', 'claimed per worker'],
    align: ['l', 'r', 'r', 'r', 'l', 'l', 'l', 'l', 'l', 'l'],
    rows: ticks.map((t) => [
      time(t.slot),
      fixed(t.wallMs, 1),
      fixed(t.lastClaimStatementMs, 1),
      fixed(t.firstClaimSentMs, 1),
      list(t.batchMs),
      list(t.startSpanMs ?? []),
      list(t.gcMs ?? []),
      list(t.claimStatementsPerWorker),
      t.claimBatches.map((b) => b || '-').join(' '),
      list(t.claimedPerWorker),
    ]),
  };
}

function runsTable(ticks: readonly TickResult[], jobs: number): Table {
  return {
    headers: ['tick (UTC)', 'start p50 ms', 'start p99 ms', 'start max ms', 'recorded vs real start, abs. p99 / max ms', 'runs recorded by ms', 'runs not recorded', 'statements per worker', 'for its runs', 'finish_runs per worker', 'polls per worker', 'exactly once', 'missing (skipped)', 'doubled', 'recorded succeeded'],
    align: ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'l', 'l', 'l', 'l', 'r', 'r', 'r', 'r'],
    rows: ticks.map((t) => [
      time(t.slot),
      fixed(t.startLatencyMs.p50, 1),
      fixed(t.startLatencyMs.p99, 1),
      fixed(t.startLatencyMs.max, 1),
      t.recordedStartErrorMs ? `${fixed(t.recordedStartErrorMs.p99, 1)} / ${fixed(t.recordedStartErrorMs.max, 1)}` : '-',
      fixed(t.lastFinishMs, 0),
      integer(t.finishFailed),
      list(t.statementsPerWorker.total),
      list(tickStatements(t)),
      list(t.statementsPerWorker.finish_runs),
      list(t.statementsPerWorker.poll),
      `${integer(t.verification.exactlyOnce)}/${integer(jobs)}`,
      `${integer(t.verification.missing)} (${integer(t.verification.missingSkipped)})`,
      integer(t.verification.doubled),
      integer(t.verification.succeeded),
    ]),
  };
}

function probeTable(results: SchedulerResults): Table {
  return {
    headers: ['run', 'jobs', 'claimed', 'round trip ms', 'claim on the server ms', 'part 1: claim ms', 'part 2: report unclaimed ms', 'part 2 matches jobs to runs with'],
    align: ['r', 'r', 'r', 'r', 'r', 'r', 'r', 'l'],
    rows: results.probe.runs.map((run, index) => [
      String(index + 1),
      integer(run.jobs),
      integer(run.claimed),
      fixed(run.roundTripMs, 1),
      run.serverMs === null ? '?' : fixed(run.serverMs, 1),
      run.claimPartMs === null ? '?' : fixed(run.claimPartMs, 1),
      run.reportPartMs === null ? '?' : fixed(run.reportPartMs, 1),
      run.reportPartJoin ?? '?',
    ]),
  };
}

function idleTable(results: SchedulerResults): Table {
  const row = (r: IdleResult): string[] => [
    integer(r.jobs),
    r.schedule,
    integer(r.startMs),
    fixed(r.rssStartMiB, 1),
    fixed(r.rssEndMiB, 1),
    fixed(r.heapUsedEndMiB, 1),
    fixed(r.rssAfterGcMiB, 1),
    fixed(r.heapUsedAfterGcMiB, 1),
    fixed(r.cpuMsPerMinute, 0),
    fixed(r.cpuPercent, 2),
    fixed(r.statementsPerMinute, 1),
  ];
  return {
    headers: ['jobs', 'schedule', 'startWorker ms', 'RSS start MiB', 'RSS end MiB', 'heap used MiB', 'RSS after GC MiB', 'heap after GC MiB', 'CPU ms/min', 'CPU % of a core', 'statements/min'],
    align: ['r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: [row(results.idle), row(results.idleBaseline)],
  };
}

function setupLine(results: SchedulerResults): string {
  const s = results.settings;
  return (
    `${integer(s.jobs)} jobs, all \`every: '${s.everySeconds}s'\` (so all due at every tick), on ${s.workers} worker processes ` +
    `(bench/fixtures/tick-worker.ts: startWorker() with default options, ${results.workerBuild === 'dist' ? 'from the compiled package (dist/)' : 'from the sources through tsx'}; the handler only notes when it started); ` +
    `${s.warmupTicks} tick(s) after all workers were ready left alone, then ${s.measuredTicks} measured. ` +
    `startWorker() took ${list(results.workerStartMs)} ms; RSS after the ticks ${list(results.workerRssMiB, 1)} MiB. ` +
    `Times run from the slot instant (database time, mapped to the local clock: local - database = ${fixed(results.clockOffsetMs, 2)} ms).`
  );
}

function finishErrorsLine(results: SchedulerResults): string | null {
  const entries = Object.entries(results.finishErrors);
  if (entries.length === 0) return null;
  return `runs whose finish_runs statement failed during the ticks (warm-up included): ${entries.map(([message, n]) => `${integer(n)} × ${message}`).join('; ')}`;
}

function warmupLine(results: SchedulerResults): string | null {
  const describe = (ticks: readonly TickResult[]) =>
    ticks
      .map((t) => `${time(t.slot)} last claim ${fixed(t.wallMs, 0)} ms, start p99 ${fixed(t.startLatencyMs.p99, 0)} ms, exactly once ${integer(t.verification.exactlyOnce)}, runs recorded by ${fixed(t.lastFinishMs, 0)} ms, runs not recorded ${integer(t.finishFailed)}`)
      .join('; ');
  const parts = [
    ...(results.warmupTicks.length > 0 ? [`claimAhead 'auto': ${describe(results.warmupTicks)}`] : []),
    ...((results.baselineWarmupTicks ?? []).length > 0 ? [`claimAhead '0ms': ${describe(results.baselineWarmupTicks ?? [])}`] : []),
  ];
  return parts.length === 0 ? null : `The first tick(s) after the workers started, not in the tables: ${parts.join('. ')}.`;
}

/** The scheduler sections as plain text, for stdout. */
export function schedulerText(results: SchedulerResults, render: (table: Table) => string): string[] {
  const lines = [
    `Scheduler: ${setupLine(results).replace(/`/g, '')}`,
    'Claims: "tick -> last claim" ends when the last claim statement that claimed a slot returned; batch = a worker\'s first (full) statement',
    render(claimsTable(results.ticks)),
    '',
    'Runs: start = handler start - slot; statements per worker = everything sent from 1 s before the tick to 1 s before the next',
    render(runsTable(results.ticks, results.settings.jobs)),
    '',
    "Baseline, the same workers with claimAhead '0ms' (every tick claimed at its slot), measured first in the same run:",
    render(claimsTable(results.baselineTicks)),
    render(runsTable(results.baselineTicks, results.settings.jobs)),
  ];
  const warmup = warmupLine(results);
  if (warmup) lines.push(warmup);
  const failures = finishErrorsLine(results);
  if (failures) lines.push(failures);
  if (results.probe.runs.length > 0 || results.probe.note) {
    lines.push('', `One claim of all ${integer(results.settings.jobs)} jobs (all free), alone on the database, with auto_explain timing the statements inside leasehold.claim`);
    if (results.probe.runs.length > 0) lines.push(render(probeTable(results)));
    if (results.probe.note) lines.push(results.probe.note);
  }
  lines.push('', `Idle worker: next slot months away; sampled for ${fixed(results.idle.windowSeconds, 0)} s, CPU = user + system`, render(idleTable(results)));
  return lines;
}

/** The scheduler sections as markdown, for RESULTS.md. */
export function schedulerMarkdown(results: SchedulerResults, render: (table: Table) => string): string[] {
  const s = results.settings;
  const lines = [
    '## Scheduler: many jobs due at the same tick',
    '',
    `${setupLine(results)}`,
    '',
    'Each worker claims its hash share of the due jobs with one `leasehold.claim` statement and, once every slot of it is decided ' +
      '(claimed ahead: once its runs are marked started), reports its digest (`report_share`); after twice as long as the claim took, ' +
      'it asks which peers reported their shares as it sees them (`reported_shares`) and claims the others with a second statement ' +
      '(none when every worker reported; a slot already claimed costs a primary-key probe). Both go with the claims in "statements ' +
      'per worker". Rows a peer was still committing come back as `holder-committing` and are retried 25, 100 and 400 ms ' +
      'later. "tick -> last claim" ends when the last statement that claimed a slot returned to its worker; "incl. empty retries" ' +
      'also waits for the second passes and retries that found every job taken. "batch ms" is each worker\'s first statement, client side; ' +
      '"rows back -> last start" runs from its rows back (parsed) to the last of its handlers starting: starting the runs; "GC" is the worker\'s garbage collection from the slot to the last handler start of the tick.',
    '',
    render(claimsTable(results.ticks)),
    '',
    'Start latency = handler start minus slot, every run of the tick. Statements per worker: everything the worker sent from 1 s ' +
      'before the tick to 1 s before the next (pg.Client.prototype.query counted in the worker process); "for its runs" counts ' +
      'its claims, `finish_runs`, `renew_leases` and `record_missed`; "polls" the schedule changes, run requests, the delivery ' +
      'probe of notifications (each every 30 s while notifications arrive), the live workers\' list and the unhandled schedules, which an idle worker sends too. Runs that end together are recorded (and their ' +
      'leases released) by one `finish_runs` statement of up to 2,000; a statement that fails leaves those leases held until their ' +
      `TTL (30 s) runs out, and a tick within that time skips the job ("skipped"). The last columns come from \`leasehold.runs\`: rows per (job, slot) for all ${integer(s.jobs)} jobs, ` +
      'and how many of them were recorded as succeeded (a run whose finish failed stays `running` until the next claim marks it `lost`).',
    '',
    render(runsTable(results.ticks, s.jobs)),
    '',
    "### Baseline: the same workers with `claimAhead: '0ms'`",
    '',
    'Measured first in the same run, on the same database: every tick claimed at its slot, as before claiming ahead existed ' +
      '(docs/scheduler.md "Claim ahead"). The default, `\'auto\'`, above, claims each worker\'s share ahead once a share took long to claim and start; ' +
      'a negative "tick -> last claim" there means its claims returned before the slot.',
    '',
    render(claimsTable(results.baselineTicks)),
    '',
    render(runsTable(results.baselineTicks, s.jobs)),
    '',
  ];
  const warmup = warmupLine(results);
  if (warmup) lines.push(warmup, '');
  const failures = finishErrorsLine(results);
  if (failures) lines.push(failures, '');
  if (results.probe.runs.length > 0 || results.probe.note) {
    lines.push(
      '### Where one claim of all jobs spends its time',
      '',
      `After the ticks, with the workers stopped: the worker's claim call (\`SchedulerStore.claim\`) for all ${integer(s.jobs)} jobs, all free, ` +
        'alone on the database, on a connection with `auto_explain` logging the duration of each statement inside `leasehold.claim` ' +
        '(part 1 locks the free leases and updates them, each with its run in flight; part 2 reports why the other jobs were not claimed, matching ' +
        'them against the runs part 1 started). Round trip = call to parsed rows in the client.',
      '',
    );
    if (results.probe.runs.length > 0) lines.push(render(probeTable(results)), '');
    if (results.probe.note) lines.push(results.probe.note, '');
  }
  lines.push(
    '## Scheduler: an idle worker',
    '',
    `One worker holding ${integer(s.jobs)} job definitions whose next slot is months away (${results.idle.schedule.replace(/'/g, '`')}), ` +
      `and one holding a single definition, sampled over the same ${fixed(results.idle.windowSeconds, 0)} s (after 2 s to settle). ` +
      'CPU = `process.cpuUsage()` user + system per minute of wall time; "after GC" is sampled after a forced full collection at the end.',
    '',
    render(idleTable(results)),
    '',
  );
  return lines;
}
