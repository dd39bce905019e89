// `npm run faults -- --tier patroni | pg-auto-failover`: the topology's scenarios (all of them,
// or those named by --scenario and --sync), each a fault run of its own, then the failover
// table. Exit code 1 when a run broke (g) (fences, tokens, two believers), or broke anything in
// a synchronous scenario (nothing acknowledged may be lost there); with --mutant, 1 when no run
// broke (g). 2 when the topology cannot be built here.
import { failoverRow, formatFailoverTable, type FailoverRow } from '../failover-table.js';
import { RESULTS_DIR } from '../harness.js';
import type { FailoverMutantName } from '../mutants.js';
import type { FailoverHow } from '../topology.js';
import { CI_SCENARIO, runTopologyScenario, scenarios, topologyMissing, type Scenario, type TopologyName } from './index.js';

export interface TopologyCliOptions {
  topology: TopologyName;
  /** Comma-separated failover kinds, or 'ci' (the CI tier's run); default: every scenario. */
  scenario: string | undefined;
  /** 'on', 'off' or undefined (both). */
  sync: string | undefined;
  mutant: FailoverMutantName | undefined;
  seed: number;
}

export async function runTopologyTier(options: TopologyCliOptions): Promise<number> {
  const out = (line: string) => process.stdout.write(`${line}\n`);
  const missing = topologyMissing(options.topology);
  if (missing) {
    out(`the ${options.topology} topology cannot be built here: ${missing}`);
    return 2;
  }
  let selected: Array<[string, Scenario]>;
  if (options.scenario === 'ci') selected = [['switchover then kill, sync', CI_SCENARIO]];
  else {
    // two failovers in a row without synchronous mode is the scenario with two forks of one
    // timeline number (synchronously the last replica follows the first promotion's timeline)
    const byTimeline = options.mutant === 'fence-by-timeline';
    const kinds = options.scenario?.split(',') ?? (byTimeline ? ['double'] : undefined);
    const sync = options.sync ?? (byTimeline ? 'off' : undefined);
    selected = scenarios(options.topology).filter(
      ([, s]) => (!kinds || kinds.includes(s.failovers[0] as FailoverHow)) && (sync === undefined || s.synchronous === (sync === 'on')),
    );
  }
  if (selected.length === 0) {
    out(`no scenario of ${options.topology} matches --scenario ${options.scenario ?? ''} --sync ${options.sync ?? ''}`);
    return 2;
  }
  const rows: Array<[string, FailoverRow]> = [];
  let failed = false;
  for (const [label, scenario] of selected) {
    const report = await runTopologyScenario({ topology: options.topology, scenario, label, seed: options.seed, mutant: options.mutant ?? null, resultsDir: RESULTS_DIR, log: out });
    const phases = Object.entries(report.phases).map(([k, v]) => `${k} ${(v / 1000).toFixed(1)}`).join(', ');
    out(`\n== ${options.topology}: ${label}${options.mutant ? `, mutant ${options.mutant}` : ''}, seed ${report.seed}, ${(report.durationMs / 1000).toFixed(1)} s (${phases})`);
    for (const note of report.notes) out(`note: ${note}`);
    out(report.summary);
    out(`report: ${report.reportFile}`);
    const row = failoverRow(report);
    rows.push([label, row]);
    const broke = report.byProperty.g > 0 || (scenario.synchronous && report.violationCount > 0);
    if (options.mutant ? report.byProperty.g === 0 : broke) failed = true;
  }
  out(`\n${options.topology}${options.mutant ? `, mutant ${options.mutant}` : ''}, seed ${options.seed}:\n${formatFailoverTable(rows)}`);
  if (failed) out(options.mutant ? `FAIL: the broken build "${options.mutant}" was not caught in every scenario` : 'FAIL: violations (see above)');
  return failed ? 1 : 0;
}
