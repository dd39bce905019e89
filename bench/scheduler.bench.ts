// The scheduler part alone: 10,000 jobs due at the same tick on 4 worker processes, one claim
// of all jobs with auto_explain, and an idle worker's RSS and CPU. Prints the tables and writes
// bench/results/scheduler-<date>.json; `npm run bench` (bench/index.ts) runs every part and
// regenerates bench/RESULTS.md. Settings: see bench/lib/config.ts (BENCH_SCHED_*, BENCH_IDLE_SECONDS).
import { runBench } from './lib/run.js';

await runBench(['scheduler']);
