// Only the WAL/xid part of the acquire benchmark: WAL bytes and transaction ids per DECLINED
// leasehold.acquire (the protocol's promise: a losing acquire writes nothing). A quick check to
// run after changing the SQL; `npm run bench` measures the same among everything else.
//   npx tsx bench/declined-wal.ts   (an embedded server: WAL is server-wide, so a shared server
//                                     with other writers shows their WAL too)
import { openBenchDatabase } from './lib/database.js';
import { leaseholdPattern } from './lib/leasehold-sql.js';
import { measureDeclinedWal } from './lib/wal.js';

const database = await openBenchDatabase(process.env.DATABASE_URL);
try {
  const result = await measureDeclinedWal({ pattern: leaseholdPattern, connectionString: database.url, attempts: 500, trials: 5 });
  process.stdout.write(
    `declined leasehold.acquire: ${result.bytesPerDecision} WAL bytes and ${result.xidsPerDecision} xids per decision ` +
      `(median of ${result.trials.length} × ${result.attempts}; trials: ${result.trials.map((t) => `${t.bytes} B/${t.xids} xids`).join(', ')})\n`,
  );
} finally {
  await database.close();
}
