// The tick part alone: 1,000 / 10,000 / 100,000 jobs due at one slot on 4 workers, the previous
// claim path, the new one and a plain batched UPDATE ... SKIP LOCKED, in one run (see
// bench/lib/tick-scale.ts). Settings: BENCH_TICK_JOBS, BENCH_TICK_WORKERS, BENCH_TICK_ROUNDS.
import { runBench } from './lib/run.js';

await runBench(['tick']);
