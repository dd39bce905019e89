// npm run faults -- [--tier ci|soak|ha] [--seed N] [--seconds N] [--workers N] [--mutant NAME] [--no-skew]
//                    [--replication sync|async] [--failovers kill,freeze,double]
// npm run faults -- --tier patroni|pg-auto-failover [--scenario kill,switchover,...|ci] [--sync on|off] [--mutant NAME]
//
// Runs the fault suite on a PostgreSQL server of its own (embedded, so that it can restart
// it), or on DATABASE_URL's server (then without database restarts), prints the report and
// writes it to faults/results/. Exit code: 1 when the run found violations; with --mutant, 1
// when it found NONE (the checker missed a deliberately broken build). --tier ha runs on a
// primary + standby of its own (failovers, database clock steps); its mutants are the failover
// mutants, run with asynchronous replication unless --replication says otherwise.
import { parseArgs } from 'node:util';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../src/testing.js';
import { MUTANTS, type MutantName } from './common.js';
import { FAILOVER_MUTANTS, type FailoverMutantName } from './mutants.js';
import { preset, RESULTS_DIR, runFaultSuite, type Tier } from './harness.js';
import { runTopologyTier } from './topologies/cli.js';
import { TOPOLOGIES, type TopologyName } from './topologies/index.js';
import type { FailoverHow } from './topology.js';

const { values } = parseArgs({
  options: {
    tier: { type: 'string', default: 'ci' },
    seed: { type: 'string' },
    seconds: { type: 'string' },
    workers: { type: 'string' },
    mutant: { type: 'string' },
    'no-skew': { type: 'boolean', default: false },
    replication: { type: 'string' },
    failovers: { type: 'string' },
    scenario: { type: 'string' },
    sync: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});

if (values.help) {
  process.stdout.write(
    [
      'usage: npm run faults -- [--tier ci|soak|ha] [--seed N] [--seconds N] [--workers N] [--mutant NAME] [--no-skew] [--replication sync|async]',
      `  --mutant: one of ${MUTANTS.join(', ')}, or "all" (a short aimed run per mutant; each must find violations)`,
      `  --tier ha: failovers and clock steps on a primary + standby of its own; --mutant one of ${FAILOVER_MUTANTS.join(', ')} or all`,
      '  --tier ha --failovers kill,freeze,double: the ways to fail over, in turn (default: killed or frozen at random; double: two promotions in a row)',
      `  --tier patroni|pg-auto-failover: the topology's scenarios (faults/topologies/), --scenario e.g. kill,switchover or ci, --sync on|off; --mutant one of ${FAILOVER_MUTANTS.join(', ')}`,
      '  DATABASE_URL: use that server instead of an embedded one (database restarts are then skipped)',
      '',
    ].join('\n'),
  );
  process.exit(0);
}

const tier = values.tier as string;
if ((TOPOLOGIES as readonly string[]).includes(tier)) {
  const mutant = values.mutant;
  if (mutant !== undefined && !(FAILOVER_MUTANTS as readonly string[]).includes(mutant)) {
    process.stderr.write(`--mutant must be one of ${FAILOVER_MUTANTS.join(', ')} (got ${mutant})\n`);
    process.exit(2);
  }
  const seed = values.seed !== undefined ? Number(values.seed) : Math.floor(Math.random() * 1_000_000);
  process.exit(await runTopologyTier({ topology: tier as TopologyName, scenario: values.scenario, sync: values.sync, mutant: mutant as FailoverMutantName | undefined, seed }));
}
// 'mutant' alone: the mutation tier's aimed plan against the unbroken library (a control: must pass)
if (tier !== 'ci' && tier !== 'soak' && tier !== 'mutant' && tier !== 'ha') {
  process.stderr.write(`--tier must be ci, soak, mutant or ha (got ${tier})\n`);
  process.exit(2);
}
const ha = tier === 'ha';
const mutants: readonly string[] = ha ? FAILOVER_MUTANTS : MUTANTS;
const mutantArg = values.mutant;
if (mutantArg !== undefined && mutantArg !== 'all' && !mutants.includes(mutantArg)) {
  process.stderr.write(`--mutant must be one of ${mutants.join(', ')} or all (got ${mutantArg})\n`);
  process.exit(2);
}
const replication = values.replication ?? (ha && mutantArg !== undefined ? 'async' : 'sync');
if (replication !== 'sync' && replication !== 'async') {
  process.stderr.write(`--replication must be sync or async (got ${replication})\n`);
  process.exit(2);
}
const seed = values.seed !== undefined ? Number(values.seed) : Math.floor(Math.random() * 1_000_000);
const positive = (v: string | undefined) => (v === undefined ? undefined : Math.max(1, Number(v)));

let embedded: EmbeddedPostgres | null = null;
let url = process.env.DATABASE_URL ?? '';
// the replicated tier brings its own servers
if (!url && !ha) {
  embedded = await startEmbeddedPostgres();
  url = embedded.connectionString;
}

let exitCode = 0;
try {
  type Mutant = MutantName | FailoverMutantName;
  const runs: Array<{ tier: Tier; mutant: Mutant | null }> =
    mutantArg === undefined
      ? [{ tier: tier as Tier, mutant: null }]
      : (mutantArg === 'all' ? [...(mutants as readonly Mutant[])] : [mutantArg as Mutant]).map((mutant) => ({ tier: ha ? ('ha' as const) : ('mutant' as const), mutant }));
  for (const run of runs) {
    // a failover mutant's run: failovers only (each one loses the commits of its hold-back);
    // fence-by-timeline's: two promotions in a row (two forks of one timeline number)
    const kinds = run.tier === 'ha' && (run.mutant || values.failovers) ? (['failover'] as const) : undefined;
    const failovers = values.failovers?.split(',') ?? (run.mutant === 'fence-by-timeline' ? ['double'] : undefined);
    const settings = preset(run.tier, { seconds: positive(values.seconds), workers: positive(values.workers), kinds: kinds ? [...kinds] : undefined, failovers: failovers as FailoverHow[] | undefined });
    const report = await runFaultSuite({
      tier: run.tier,
      seed,
      ...settings,
      mutant: run.mutant,
      server: { url, embedded },
      skew: !values['no-skew'],
      ha: ha ? { replication, holdBackMs: 1_000 } : null,
      resultsDir: RESULTS_DIR,
      log: (line) => process.stdout.write(`${line}\n`),
    });
    const phases = Object.entries(report.phases).map(([k, v]) => `${k} ${(v / 1000).toFixed(1)}`).join(', ');
    process.stdout.write(`\n== ${run.mutant ? `mutant ${run.mutant}` : `${run.tier} tier`}, seed ${report.seed}, ${(report.durationMs / 1000).toFixed(1)} s (${phases})\n`);
    for (const note of report.notes) process.stdout.write(`note: ${note}\n`);
    process.stdout.write(`${report.summary}\n`);
    process.stdout.write(`report: ${report.reportFile}\n`);
    if (run.mutant) {
      if (report.violationCount === 0) {
        process.stdout.write(`FAIL: the checker found no violation in the broken build "${run.mutant}"\n`);
        exitCode = 1;
      } else {
        process.stdout.write(`ok: the broken build "${run.mutant}" was caught\n`);
      }
    } else if (report.violationCount > 0) {
      process.stdout.write(`FAIL: ${report.violationCount} violation(s); replay with --seed ${report.seed}\n`);
      exitCode = 1;
    }
  }
} finally {
  await embedded?.stop();
}
process.exit(exitCode);
