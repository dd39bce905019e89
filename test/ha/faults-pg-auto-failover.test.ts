// The fault suite on a pg_auto_failover formation built from Debian's package
// (faults/topologies/pg-auto-failover.ts: a monitor and two PostgreSQL 15 nodes under pg_autoctl,
// the standby in the replication quorum, the clients' address moved to the node the monitor
// makes primary): a planned switchover, then the primary's host killed; the suite's workers and
// checker, properties (a)-(g), and the failover table of docs/high-availability.md.
//
// Needs the package postgresql-15-auto-failover (.ci/run installs it); without it it is
// skipped, saying so. Embedded pass only, like the other fault suites (FAULTS_FORCE=1 runs it
// anyway). The longer tier: npm run faults -- --tier pg-auto-failover.
import { describe, expect, it } from 'vitest';
import { failoverRow, formatFailoverTable } from '../../faults/failover-table.js';
import { RESULTS_DIR } from '../../faults/harness.js';
import { CI_SCENARIO, runTopologyScenario, topologyMissing } from '../../faults/topologies/index.js';

const secondPass = !!process.env.DATABASE_URL && process.env.FAULTS_FORCE !== '1';
const missing = topologyMissing('pg-auto-failover');
const skipped = missing ? ` [SKIPPED: ${missing}]` : '';
if (missing && !secondPass) process.stderr.write(`[faults-pg-auto-failover] skipped: ${missing}\n`);
const seed = Number(process.env.FAULTS_SEED ?? 20_261_206);

describe.skipIf(secondPass)('fault suite on pg_auto_failover (monitor and two nodes)', () => {
  it.skipIf(!!missing)(`a switchover then the primary killed: no violation of (a)-(g), no fence twice, no token resurrected${skipped}`, async () => {
    const report = await runTopologyScenario({ topology: 'pg-auto-failover', scenario: CI_SCENARIO, label: 'ci', seed, mutant: null, resultsDir: RESULTS_DIR, log: () => undefined });
    const row = failoverRow(report);
    console.log(`[faults] pg_auto_failover, seed ${report.seed}, ${(report.durationMs / 1000).toFixed(1)} s\n${report.summary}\n${formatFailoverTable([['switchover then kill, sync', row]])}`);
    expect(report.violations.map((v) => `(${v.property}) ${v.kind}: ${v.message}`)).toEqual([]);
    expect(report.faults.filter((f) => f.kind === 'failover').map((f) => f.params.how)).toEqual(['switchover', 'kill']);
    expect(row).toMatchObject({ fencesTwice: 0, fencesBackwards: 0, tokensResurrected: 0, slotsTwice: 0, twoBelieversMs: 0, writesLost: 0 });
    expect(report.counts.ha.grantsAcrossFailovers).toBeGreaterThan(0);
    expect(report.counts.ha.probes.refused).toBeGreaterThan(0);
    expect(report.counts.writes.accepted).toBeGreaterThan(10);
  }, 240_000);
});
