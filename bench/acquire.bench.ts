// The acquire part alone (leasehold's claim path against the classic transaction, an advisory
// lock and a Redis lock): contested acquire + release throughput and latency, WAL per declined
// acquisition, takeover after a SIGKILLed holder. Prints the tables and writes
// bench/results/acquire-<date>.json; `npm run bench` (bench/index.ts) runs every part and
// regenerates bench/RESULTS.md.
// Settings: see bench/lib/config.ts (BENCH_SECONDS, ...).
import { runBench } from './lib/run.js';

await runBench(['acquire']);
