// The failover table of docs/high-availability.md, read off a fault run's report: the columns of
// the failover test (test/support/failover-checks.ts), counted by the fault suite's checker.
import type { SuiteReport } from './suite-options.js';

export interface FailoverRow {
  /** (g) fence-repeated: a (job, fence) acknowledged to two grants. */
  fencesTwice: number;
  /** (g) fence-backwards: a grant after a failover not above one acknowledged before it. */
  fencesBackwards: number;
  /** (g) released-token-accepted: a released or superseded token accepted by assert_lease. */
  tokensResurrected: number;
  /** Slots started by two runs. */
  slotsTwice: number;
  /** ms during which two workers believed they held one lease. */
  twoBelieversMs: number;
  /** (a) acknowledged-write-missing: fenced writes acknowledged and not in the final database. */
  writesLost: number;
  failovers: number;
  /** Every violation of (a)-(h), the columns' among them. */
  violations: number;
}

export function failoverRow(report: SuiteReport): FailoverRow {
  const kind = (k: string) => report.byKind[k] ?? 0;
  return {
    fencesTwice: kind('fence-repeated'),
    fencesBackwards: kind('fence-backwards'),
    tokensResurrected: kind('released-token-accepted'),
    slotsTwice: report.counts.ha.slotsStartedTwice,
    twoBelieversMs: report.counts.ha.twoBelieversMs,
    writesLost: kind('acknowledged-write-missing'),
    failovers: report.counts.ha.failovers,
    violations: report.violationCount,
  };
}

/** A markdown table, one row per scenario. */
export function formatFailoverTable(rows: Array<[string, FailoverRow]>): string {
  const head = '| scenario | failovers | fences twice | fences backwards | tokens resurrected | slots twice | ms of two believers | acknowledged writes lost | violations (a)-(h) |';
  const lines = rows.map(([label, r]) => `| ${label} | ${r.failovers} | ${r.fencesTwice} | ${r.fencesBackwards} | ${r.tokensResurrected} | ${r.slotsTwice} | ${r.twoBelieversMs} | ${r.writesLost} | ${r.violations} |`);
  return [head, `|${' --- |'.repeat(9)}`, ...lines].join('\n');
}
