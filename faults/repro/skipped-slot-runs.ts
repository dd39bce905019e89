// Reproduction of a library bug the fault suite found: under overlap 'skip', a slot that
// claim_slots() recorded as skipped can still be claimed and run afterwards, by any claim
// for that slot that comes after the holder released (a worker whose tick was late, a retry
// after 'holder-committing', the catch-up claim of a worker that just started). A skip does
// not advance the lease's last_slot, so the slot guard (slot > last_slot) lets it through.
//
//   npx tsx faults/repro/skipped-slot-runs.ts      (exit code 1 while the bug is there)
//
// Deterministic, no timing involved: three claim_slots() calls stand for three workers.
import pg from 'pg';
import { createLeasehold, silentLogger } from '../../src/index.js';
import { createTestDatabase, startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/testing.js';

let server: EmbeddedPostgres | undefined;
let url = process.env.DATABASE_URL;
if (!url) {
  server = await startEmbeddedPostgres();
  url = server.connectionString;
}
const db = await createTestDatabase(url, 'leasehold_repro');
const setup = await createLeasehold({ connectionString: db.url, liveness: false, logger: silentLogger() });
await setup.close();
const client = new pg.Client({ connectionString: db.url });
await client.connect();
let failed = false;
try {
  await client.query(`select * from leasehold.register_jobs(array['report'], array['1s'], array[null::text], array[1000::bigint],
                      array[30000::bigint], array['skip'], array['latest'], 'setup')`);
  const claim = async (worker: string, slot: string) => {
    const { rows } = await client.query<{ claimed: boolean; reason: string; skip_recorded: boolean; token: string | null; fence: string | null }>(
      `select claimed, reason, skip_recorded, token, fence from leasehold.claim_slots(array['report'], array[$1::timestamptz],
         array['30 seconds'::interval], array['exclusive'], array[0], $2)`,
      [slot, worker],
    );
    return rows[0] as { claimed: boolean; reason: string; skip_recorded: boolean; token: string | null; fence: string | null };
  };
  // one base for all slots: recomputed per call, a second boundary between calls moved slot 1
  const base = Math.floor(Date.now() / 1000) * 1000 - 10_000;
  const t = (s: number) => new Date(base + s * 1000).toISOString();

  const a = await claim('worker-a', t(0)); // A runs slot 0 (a long run)
  const b = await claim('worker-b', t(1)); // B's tick for slot 1: held by A -> skip recorded
  await client.query(`select * from leasehold.finish_runs(array['report'], array[$1::bigint], array[$2::uuid], array['succeeded'],
                      array[null::text], array[1])`, [a.fence, a.token]); // A finishes
  const c = await claim('worker-c', t(1)); // C's claim for slot 1 comes late (late tick, retry, catch-up)
  const { rows: skips } = await client.query('select slot, holder from leasehold.skips');
  const { rows: runs } = await client.query('select slot, fence::int, holder from leasehold.runs order by fence');
  console.log('A claims slot 0:', a.claimed, `(fence ${a.fence})`);
  console.log('B claims slot 1:', b.claimed, b.reason, 'skip recorded:', b.skip_recorded);
  console.log('C claims slot 1 after A finished:', c.claimed, c.reason);
  console.log('leasehold.skips:', skips);
  console.log('leasehold.runs:', runs);
  if (b.skip_recorded && c.claimed) {
    failed = true;
    console.log('BUG: slot 1 was recorded as skipped ("the slot does not run") and then claimed and run by worker-c.');
  } else {
    console.log('ok: a slot recorded as skipped is not claimed again.');
  }
} finally {
  await client.end();
  await db.drop();
  await server?.stop();
}
process.exit(failed ? 1 : 0);
