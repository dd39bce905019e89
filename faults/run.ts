// npm run faults -- [--tier ci|soak] [--seed N] [--seconds N] [--workers N] [--mutant NAME] [--no-skew]
//
// Runs the fault suite on a PostgreSQL server of its own (embedded, so that it can restart
// it), or on DATABASE_URL's server (then without database restarts), prints the report and
// writes it to faults/results/. Exit code: 1 when the run found violations; with --mutant, 1
// when it found NONE (the checker missed a deliberately broken build).
import { parseArgs } from 'node:util';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../src/testing.js';
import { MUTANTS, type MutantName } from './common.js';
import { preset, RESULTS_DIR, runFaultSuite, type Tier } from './harness.js';

const { values } = parseArgs({
  options: {
    tier: { type: 'string', default: 'ci' },
    seed: { type: 'string' },
    seconds: { type: 'string' },
    workers: { type: 'string' },
    mutant: { type: 'string' },
    'no-skew': { type: 'boolean', default: false },
    help: { type: 'boolean', default: false },
  },
});

if (values.help) {
  process.stdout.write(
    [
      'usage: npm run faults -- [--tier ci|soak] [--seed N] [--seconds N] [--workers N] [--mutant NAME] [--no-skew]',
      `  --mutant: one of ${MUTANTS.join(', ')}, or "all" (a short aimed run per mutant; each must find violations)`,
      '  DATABASE_URL: use that server instead of an embedded one (database restarts are then skipped)',
      '',
    ].join('\n'),
  );
  process.exit(0);
}

const tier = values.tier as string;
// 'mutant' alone: the mutation tier's aimed plan against the unbroken library (a control: must pass)
if (tier !== 'ci' && tier !== 'soak' && tier !== 'mutant') {
  process.stderr.write(`--tier must be ci, soak or mutant (got ${tier})\n`);
  process.exit(2);
}
const mutantArg = values.mutant;
if (mutantArg !== undefined && mutantArg !== 'all' && !(MUTANTS as readonly string[]).includes(mutantArg)) {
  process.stderr.write(`--mutant must be one of ${MUTANTS.join(', ')} or all (got ${mutantArg})\n`);
  process.exit(2);
}
const seed = values.seed !== undefined ? Number(values.seed) : Math.floor(Math.random() * 1_000_000);
const positive = (v: string | undefined) => (v === undefined ? undefined : Math.max(1, Number(v)));

let embedded: EmbeddedPostgres | null = null;
let url = process.env.DATABASE_URL;
if (!url) {
  embedded = await startEmbeddedPostgres();
  url = embedded.connectionString;
}

let exitCode = 0;
try {
  const runs: Array<{ tier: Tier; mutant: MutantName | null }> =
    mutantArg === undefined ? [{ tier: tier as Tier, mutant: null }] : (mutantArg === 'all' ? [...MUTANTS] : [mutantArg as MutantName]).map((mutant) => ({ tier: 'mutant' as const, mutant }));
  for (const run of runs) {
    const settings = preset(run.tier, { seconds: positive(values.seconds), workers: positive(values.workers) });
    const report = await runFaultSuite({
      tier: run.tier,
      seed,
      ...settings,
      mutant: run.mutant,
      server: { url, embedded },
      skew: !values['no-skew'],
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
