// The leasehold pattern: leasehold.acquire (one statement, one round trip, read-only when it
// declines) and, for a winner, leasehold.release (one more round trip). Both named statements,
// parsed once per connection, as the library sends them (src/db/prepared.ts).
import { interval, type ClaimOutcome, type ClaimPattern } from './pattern.js';
import type { Session } from './session.js';

interface AcquireRow {
  acquired: boolean;
  token: string | null;
  reason: string;
}

export const leaseholdPattern: ClaimPattern = {
  id: 'leasehold',
  description: 'select * from leasehold.acquire($1, $2::interval, $3) (a named statement) — 1 round trip; a winner then calls leasehold.release (+1)',
  guarantees: 'TTL (database clock), fence, a skip names the holder, a dead holder\'s lease freed at once (liveness)',
  table: 'leasehold.leases',

  async prepare(session: Session, name: string): Promise<void> {
    // The first acquire creates the row; take it once and free it so every measurement
    // starts from an existing, free row, like the classic table.
    const outcome = await leaseholdPattern.acquire(session, name, 'bench-prepare', 30);
    if (outcome.won && outcome.token) await leaseholdPattern.release(session, name, outcome.token);
    await session.query('select leasehold.force_release($1)', [name]);
  },

  async acquire(session: Session, name: string, holder: string, ttlSeconds: number): Promise<ClaimOutcome> {
    const rows = await session.query<AcquireRow>('select * from leasehold.acquire($1, $2::interval, $3)', [name, interval(ttlSeconds), holder], 'bench_acquire');
    const row = rows[0];
    if (!row) throw new Error('leasehold.acquire returned no row');
    return { won: row.acquired, token: row.token, reason: row.reason };
  },

  async release(session: Session, name: string, token: string): Promise<boolean> {
    const rows = await session.query<{ released: boolean }>('select leasehold.release($1, $2) as released', [name, token], 'bench_release');
    return rows[0]?.released === true;
  },
};
