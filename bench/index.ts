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
//   heartbeats - renewal statements per minute for 1,000 running leases on one client: the
//               shared heartbeat against one statement per lease every ttl/3 (the baseline)
// Prints the tables, writes bench/results/*.json (local, ignored by git) and regenerates
// bench/RESULTS.md (committed).
// Settings: environment variables, see bench/lib/config.ts (BENCH_PARTS=heartbeats runs one part).
import { runBench } from './lib/run.js';

await runBench();
