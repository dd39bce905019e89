// `npm run bench`: every benchmark part on one database, in one run.
//   acquire   - leasehold's claim path against the alternatives: the classic SELECT … FOR UPDATE
//               transaction (the baseline), a PostgreSQL advisory lock and a Redis lock (SET NX PX
//               on a private redis-server, when one is installed): contested throughput and
//               latency, WAL per declined acquire, takeover after SIGKILL
//   scheduler - 10,000 jobs due at the same tick on 4 worker processes (claims, statements,
//               start latency, exactly-once in leasehold.runs), and an idle worker's RSS and CPU
//   tick      - 1,000 / 10,000 / 100,000 jobs due at one slot on 4 workers: the previous claim
//               path, the hash-share path and a plain batched UPDATE ... SKIP LOCKED, in one run
//               (bench/tick.bench.ts runs it alone)
//   reads     - the operator's reads (status, runs, job_status, run_history, dashboard API,
//               prune_history) on 100,000 jobs and 10 million runs against their schema-5 forms,
//               and an idle worker's RSS on the compiled package
//   heartbeats - renewal statements per minute for 1,000 running leases on one client: the
//               shared heartbeat against one statement per lease every ttl/3 (the baseline)
//   dashboard - the page in headless Chromium over 10,000 jobs against 50 (the baseline): first
//               paint, longest main-thread task, refresh time, DOM size
// Prints the tables, writes bench/results/*.json (local, ignored by git) and regenerates
// bench/RESULTS.md (committed).
// Settings: environment variables, see bench/lib/config.ts (BENCH_PARTS=heartbeats runs one part);
// parts named on the command line run alone: `npm run bench -- reads`. `npm run bench -- --render
// FILE` writes RESULTS.md again from a complete run's JSON (bench/results/latest.json), measuring nothing.
import { BENCH_PARTS, type BenchPart } from './lib/config.js';
import { renderSaved } from './lib/results.js';
import { runBench } from './lib/run.js';

const named = process.argv.slice(2);
if (named[0] === '--render') {
  const file = named[1];
  if (!file) throw new Error('--render needs the JSON of a complete run, e.g. bench/results/latest.json');
  console.log(`wrote ${await renderSaved(file)}`);
  process.exit(0);
}
const unknown = named.filter((part) => !(BENCH_PARTS as readonly string[]).includes(part));
if (unknown.length > 0) throw new Error(`unknown bench part(s) ${unknown.join(', ')}: choose from ${BENCH_PARTS.join(', ')}`);
await runBench(named.length > 0 ? (named as BenchPart[]) : undefined);
