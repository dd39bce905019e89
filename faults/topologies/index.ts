// The fault suite on a failover topology of production tools: which scenarios each topology
// has, and one scenario's run (the suite's workers and checker, the nemesis failing over only
// in that scenario's way). Used by faults/run.ts (--tier patroni | pg-auto-failover) and the
// tests test/ha/faults-patroni.test.ts and test/ha/faults-pg-auto-failover.test.ts.
import { runFaultSuite, preset } from '../harness.js';
import type { FailoverMutantName } from '../mutants.js';
import type { SuiteOptions, SuiteReport } from '../suite-options.js';
import type { FailoverHow } from '../topology.js';
import { autoFailoverMissing, AutoFailoverCluster } from './pg-auto-failover.js';
import { PatroniCluster, patroniMissing } from './patroni.js';

export type TopologyName = 'patroni' | 'pg-auto-failover';
export const TOPOLOGIES: readonly TopologyName[] = ['patroni', 'pg-auto-failover'];

export interface Scenario {
  /** The nemesis's failovers, in turn. */
  failovers: FailoverHow[];
  /** Its synchronous setting (synchronous_mode for Patroni, number_sync_standbys 1 for pg_auto_failover). */
  synchronous: boolean;
}

/**
 * The long tier's scenarios. Two failovers in a row: asynchronously, the last replica never
 * streamed from the first promoted node (two forks of one timeline number); synchronously, it
 * was that node's synchronous standby (faults/topologies/patroni.ts).
 */
export function scenarios(topology: TopologyName): Array<[string, Scenario]> {
  const out: Array<[string, Scenario]> = [];
  const kinds: FailoverHow[] = topology === 'patroni' ? ['switchover', 'kill', 'freeze', 'etcd-cut', 'double'] : ['switchover', 'kill', 'freeze'];
  for (const synchronous of [true, false]) {
    for (const how of kinds) {
      out.push([`${how}, ${synchronous ? 'sync' : 'async'}`, { failovers: how === 'double' ? [how] : [how, how], synchronous }]);
    }
  }
  return out;
}

/** The CI tier's one run: a switchover, then a kill (not repaired: the run ends), in synchronous mode. */
export const CI_SCENARIO: Scenario = { failovers: ['switchover', 'kill'], synchronous: true };

/** Why the topology cannot be built on this machine (missing packages), or undefined. */
export function topologyMissing(topology: TopologyName): string | undefined {
  return topology === 'patroni' ? patroniMissing() : autoFailoverMissing();
}

export interface TopologyRun {
  topology: TopologyName;
  scenario: Scenario;
  label: string;
  seed: number;
  mutant: FailoverMutantName | null;
  resultsDir: string | null;
  log: (line: string) => void;
}

export async function runTopologyScenario(run: TopologyRun): Promise<SuiteReport> {
  const { synchronous, failovers } = run.scenario;
  const topology: NonNullable<SuiteOptions['topology']> = (prepare) =>
    run.topology === 'patroni' ? PatroniCluster.create({ synchronous, prepare }) : AutoFailoverCluster.create({ synchronous, prepare });
  const settings = preset(run.topology);
  return runFaultSuite({
    tier: run.topology,
    label: `${run.topology}-${run.label.replace(/[^a-z0-9]+/gi, '-')}`,
    seed: run.seed,
    ...settings,
    nemesis: { ...settings.nemesis, failovers, limit: failovers.length },
    mutant: run.mutant,
    server: { url: '', embedded: null },
    topology,
    skew: false,
    resultsDir: run.resultsDir,
    log: run.log,
  });
}
