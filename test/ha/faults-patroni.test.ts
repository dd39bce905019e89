// The fault suite on a Patroni cluster built from Debian's packages (faults/topologies/patroni.ts:
// etcd, three PostgreSQL 15 nodes under Patroni, HAProxy routing by Patroni's REST /primary), in
// synchronous mode: a planned switchover, then the leader's host killed; the suite's workers and
// checker, properties (a)-(g), and the failover table of docs/high-availability.md.
//
// Needs the packages patroni, etcd-server, haproxy and postgresql-15 (.ci/run installs them);
// without them it is skipped, saying which are missing. It brings its own servers, so it runs
// in the embedded pass only, like the other fault suites (FAULTS_FORCE=1 runs it anyway).
// The longer tier: npm run faults -- --tier patroni. FAULTS_SEED=n picks another seed.
import { describe, expect, it } from 'vitest';
import { failoverRow, formatFailoverTable } from '../../faults/failover-table.js';
import { RESULTS_DIR } from '../../faults/harness.js';
import { CI_SCENARIO, runTopologyScenario, topologyMissing } from '../../faults/topologies/index.js';

const secondPass = !!process.env.DATABASE_URL && process.env.FAULTS_FORCE !== '1';
const missing = topologyMissing('patroni');
const skipped = missing ? ` [SKIPPED: ${missing}]` : '';
if (missing && !secondPass) process.stderr.write(`[faults-patroni] skipped: ${missing}\n`);
const seed = Number(process.env.FAULTS_SEED ?? 20_261_205);

describe.skipIf(secondPass)('fault suite on Patroni (etcd, HAProxy)', () => {
  it.skipIf(!!missing)(`synchronous mode, a switchover then the leader killed: no violation of (a)-(g), no fence twice, no token resurrected${skipped}`, async () => {
    const report = await runTopologyScenario({ topology: 'patroni', scenario: CI_SCENARIO, label: 'ci', seed, mutant: null, resultsDir: RESULTS_DIR, log: () => undefined });
    const row = failoverRow(report);
    console.log(`[faults] Patroni, seed ${report.seed}, ${(report.durationMs / 1000).toFixed(1)} s\n${report.summary}\n${formatFailoverTable([['switchover then kill, sync', row]])}`);
    expect(report.violations.map((v) => `(${v.property}) ${v.kind}: ${v.message}`)).toEqual([]);
    expect(report.faults.filter((f) => f.kind === 'failover').map((f) => f.params.how)).toEqual(['switchover', 'kill']);
    expect(row).toMatchObject({ fencesTwice: 0, fencesBackwards: 0, tokensResurrected: 0, slotsTwice: 0, twoBelieversMs: 0, writesLost: 0 });
    // the checks had something to compare: grants on both sides of each failover, dead tokens probed
    expect(report.counts.ha.grantsAcrossFailovers).toBeGreaterThan(0);
    expect(report.counts.ha.probes.refused).toBeGreaterThan(0);
    expect(report.counts.writes.accepted).toBeGreaterThan(10);
  }, 180_000);
});
