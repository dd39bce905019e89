// The fault suite's checker: a pure function of the worker histories, the nemesis log and a
// snapshot of the database taken after the run. Linear in the size of its input (plus sorts).
//
// Order without clocks: test_grants gets one row per fence change of a lease row (a trigger
// installed in the test database, in the granting transaction, while the row is locked FOR
// UPDATE) and test_output one row per accepted write (inside the fenced transaction, while
// the row is locked FOR KEY SHARE). Both take ord = nextval('lh_test_order') under a lock on
// the same lease row, and those locks conflict, so for one job, ord order is the order in
// which grants and writes were serialized — whatever any clock says.
//
// Properties (faults/README.md has the long form):
// (a) fence safety: per job, accepted writes in ord order have non-decreasing fences; no
//     accepted write of fence f comes after (in ord) the grant of a fence > f; grants have
//     strictly increasing fences; the unlocked read-modify-write counter equals the number of
//     accepted writes; a client's view agrees with the database (accepted => row, refused => no
//     row).
// (b) each slot ran at most once: at most one claim (run) and one accepted write per
//     (job, slot); claimed slots strictly increase per job in grant order.
// (c) no slot lost while a healthy worker was up, beyond the bound B after a fault: every slot
//     in the checked window completed, was skipped (recorded), or is excused by a fault;
//     otherwise LOST. And no healthy holder loses its lease to someone else.
// (d) every skip recorded once with its holder: the skip row names holder, fence, slot and age;
//     that run really held the lease then; the slot did not also run; exactly one worker
//     reported it (event + log line naming the holder).
// (e) token-checked release: a lease is released only by its own run, in the transaction that
//     records the run's outcome, after the run's write.
// (f) no write begun after its run's lease was lost is accepted.
// (g), (h): failovers and database clock steps, in ./checker-ha.ts.
//
// Database clock steps move database time against the shared monotonic clock: the checker maps
// database times to monotonic ones per stretch between steps (each step's nemesis record has the
// database time just before and after it).
import { checkFences } from './check/fences.js';
import { buildContext } from './check/context.js';
import { checkNoSlotLost } from './check/lost.js';
import { checkSlotsOnce } from './check/once.js';
import { checkReleases } from './check/releases.js';
import { checkSkips } from './check/skips.js';
import { checkFailoverAndClock, type HaCounts } from './checker-ha.js';
import type { FaultRecord, HistoryLine, JobSpec, ProcessRecord } from './common.js';

export interface DbSnapshot {
  grants: Array<{ job: string; fence: number; holder: string | null; slot: number | null; ord: number }>;
  outputs: Array<{ job: string; slot: number; fence: number; worker: string; ord: number }>;
  counters: Array<{ job: string; n: number }>;
  runs: Array<{ job: string; slot: number; fence: number; holder: string; startedAt: number; finishedAt: number | null; outcome: string; error: string | null }>;
  skips: Array<{
    job: string;
    slot: number;
    holder: string | null;
    holderFence: number | null;
    holderSlot: number | null;
    heldForMs: number | null;
    recordedBy: string;
    recordedAt: number;
  }>;
  missed: Array<{ job: string; slot: number; reason: string; recordedBy: string }>;
  /** Every release (token set to null) of a lease row, with the fence it had then. */
  releases: Array<{ job: string; fence: number; ord: number; txid: string; at: number }>;
  /** Every change of a run's outcome away from 'running', with its transaction. */
  runEnds: Array<{ job: string; fence: number; outcome: string; txid: string }>;
}

export interface CheckConfig {
  jobs: JobSpec[];
  ttlMs: number;
  /** The bound B (ms): how long after a fault's effect ends a slot may still be lost. */
  boundMs: number;
  /** Database epoch ms minus shared monotonic ms (measured by the driver). */
  dbOffsetMs: number;
  /** Slots are checked (property c) between these instants (shared monotonic clock). */
  windowFrom: number;
  windowTo: number;
  /** When the workers were told to stop. */
  stopAt: number;
}

export interface CheckInput {
  history: HistoryLine[];
  faults: FaultRecord[];
  processes: ProcessRecord[];
  db: DbSnapshot;
  config: CheckConfig;
}

export type Property = 'a' | 'b' | 'c' | 'd' | 'e' | 'f' | 'g' | 'h';

export interface Violation {
  property: Property;
  kind: string;
  message: string;
}

export interface Counts {
  faults: Record<string, number>;
  releases: number;
  faultsOnLeaseHolders: number;
  workerProcesses: number;
  runs: number;
  runsByOutcome: Record<string, number>;
  grants: number;
  takeovers: number;
  writes: {
    accepted: number;
    rejectedByServer: number;
    rejectedLocally: number;
    failedBeforeCommit: number;
    indeterminate: number;
    indeterminateCommitted: number;
    indeterminateNotCommitted: number;
    committedUnacknowledged: number;
  };
  staleWritesRefused: number;
  skips: { recorded: number; reported: number; logLines: number };
  missedRecorded: number;
  slots: { checked: number; completed: number; skipped: number; excused: Record<string, number>; lost: number };
  leasesLost: Record<string, number>;
  stalls: number;
  ha: HaCounts;
}

export interface KnownIssue {
  kind: string;
  description: string;
  count: number;
  examples: string[];
}

export interface CheckResult {
  counts: Counts;
  violations: Violation[];
  violationCount: number;
  byProperty: Record<Property, number>;
  /** Violations by kind (all of them, also beyond the listed ones). */
  byKind: Record<string, number>;
  /** Findings of a kind listed in KNOWN_LIBRARY_ISSUES: reported, not counted as violations. */
  knownIssues: KnownIssue[];
}

/**
 * Library bugs this suite found and reported, not fixed yet. A finding of such a kind is
 * listed under "known issues" instead of failing every run; remove the entry once the
 * library is fixed, and it counts as a violation again.
 */
// None at present: 'skipped-slot-ran' (both its wide form and the race of a skip recorded
// while a peer's claim was in flight) is fixed in sql/baseline/1_leases.sql and counts again.
export const KNOWN_LIBRARY_ISSUES: Record<string, string> = {};

const MAX_LISTED = 200;

export function check(input: CheckInput): CheckResult {
  const { processes, db } = input;
  const violations: Violation[] = [];
  const byProperty: Record<Property, number> = { a: 0, b: 0, c: 0, d: 0, e: 0, f: 0, g: 0, h: 0 };
  const known = new Map<string, KnownIssue>();
  const byKind: Record<string, number> = {};
  let violationCount = 0;
  const violate = (property: Property, kind: string, message: string) => {
    const description = KNOWN_LIBRARY_ISSUES[kind];
    if (description !== undefined) {
      const issue = known.get(kind) ?? { kind, description, count: 0, examples: [] };
      issue.count++;
      if (issue.examples.length < 5) issue.examples.push(message);
      known.set(kind, issue);
      return;
    }
    violationCount++;
    byProperty[property]++;
    byKind[kind] = (byKind[kind] ?? 0) + 1;
    if (violations.length < MAX_LISTED) violations.push({ property, kind, message });
  };

  const ctx = buildContext(input);
  const { writes, staleWritesRefused, writeByRun } = checkFences(ctx, violate);
  checkSlotsOnce(ctx, violate);
  const skipRows = checkSkips(ctx, violate);
  const slots = checkNoSlotLost(ctx, violate, skipRows, writeByRun);
  checkReleases(ctx, violate);
  const { faultCounts, faultsOnLeaseHolders, runsByOutcome, takeovers, skipLines, logLines, leasesLost, stalls } = ctx;
  const ha = checkFailoverAndClock(input, violate);
  const counts: Counts = {
    faults: faultCounts,
    releases: db.releases?.length ?? 0,
    faultsOnLeaseHolders,
    workerProcesses: processes.length,
    runs: db.runs.length,
    runsByOutcome,
    grants: db.grants.length,
    takeovers,
    writes,
    staleWritesRefused,
    skips: { recorded: db.skips.length, reported: skipLines.length, logLines },
    missedRecorded: db.missed.length,
    slots,
    leasesLost,
    stalls,
    ha,
  };
  return { counts, violations, violationCount, byProperty, byKind, knownIssues: [...known.values()] };
}

/** A short human-readable summary of a check. */
export function formatCounts(result: CheckResult): string {
  const c = result.counts;
  const kv = (record: Record<string, number>) =>
    Object.entries(record)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([k, v]) => `${k} ${v}`)
      .join(', ') || 'none';
  const lines = [
    `faults injected: ${Object.values(c.faults).reduce((a, b) => a + b, 0)} (${kv(c.faults)}); ${c.faultsOnLeaseHolders} hit a lease holder`,
    `worker processes: ${c.workerProcesses}; event-loop stalls > 350 ms: ${c.stalls}`,
    `runs: ${c.runs} (${kv(c.runsByOutcome)}); grants: ${c.grants}; takeovers: ${c.takeovers}; releases: ${c.releases}`,
    `writes: accepted ${c.writes.accepted}, refused by the server ${c.writes.rejectedByServer}, refused locally ${c.writes.rejectedLocally}, failed before commit ${c.writes.failedBeforeCommit}, indeterminate ${c.writes.indeterminate} (committed ${c.writes.indeterminateCommitted}, not ${c.writes.indeterminateNotCommitted}), committed but unacknowledged ${c.writes.committedUnacknowledged}`,
    `stale writes refused: ${c.staleWritesRefused}`,
    `leases lost: ${kv(c.leasesLost)}`,
    `skips: recorded ${c.skips.recorded}, reported ${c.skips.reported}, log lines ${c.skips.logLines}; missed slots recorded: ${c.missedRecorded}`,
    `slots checked: ${c.slots.checked}: completed ${c.slots.completed}, skipped ${c.slots.skipped}, excused ${Object.values(c.slots.excused).reduce((a, b) => a + b, 0)} (${kv(c.slots.excused)}), LOST ${c.slots.lost}`,
    `violations: ${result.violationCount} (a ${result.byProperty.a}, b ${result.byProperty.b}, c ${result.byProperty.c}, d ${result.byProperty.d}, e ${result.byProperty.e}, f ${result.byProperty.f}, g ${result.byProperty.g}, h ${result.byProperty.h})`,
  ];
  if (c.ha.failovers > 0 || c.ha.clockSteps.forward + c.ha.clockSteps.backward > 0) {
    lines.splice(
      -1,
      0,
      `failovers: ${c.ha.failovers}, grants compared across them: ${c.ha.grantsAcrossFailovers}; stale-token probes: refused ${c.ha.probes.refused} (${c.ha.probes.afterFailover} across a failover), failed ${c.ha.probes.failed}, accepted ${c.ha.probes.accepted}; clock steps: forward ${c.ha.clockSteps.forward} (catch-up slots recorded missed: ${c.ha.catchUpSlotsMissed}), backward ${c.ha.clockSteps.backward} (${c.ha.backwardStepsChecked} checked for resumption)`,
    );
  }
  for (const v of result.violations.slice(0, 8)) lines.push(`  (${v.property}) ${v.kind}: ${v.message}`);
  if (result.violationCount > 8) lines.push(`  … ${result.violationCount - 8} more`);
  for (const issue of result.knownIssues) {
    lines.push(`known library issue (reported, not counted): ${issue.kind} × ${issue.count}: ${issue.description}`);
    for (const example of issue.examples.slice(0, 2)) lines.push(`  e.g. ${example}`);
  }
  return lines.join('\n');
}
