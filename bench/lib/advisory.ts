// A PostgreSQL session advisory lock as the claim:
//   select pg_try_advisory_lock(k)     — 1 round trip, never waits
//   select pg_advisory_unlock(k)       — release (+1)
// k is a fixed bigint derived from the lease name. No row, no TTL (the lock lives exactly as
// long as the session that took it), no fence, and a loser learns nothing about the holder.
// It needs a session that stays on one server backend: not through a transaction pooler such
// as PgBouncer in transaction mode.
import { createHash } from 'node:crypto';
import type { ClaimOutcome, ClaimPattern } from './pattern.js';
import type { Session } from './session.js';
import { sleep } from './stats.js';

/** The advisory-lock key of a name: the first 8 bytes of its SHA-256, as a signed bigint (text). */
export function advisoryKey(name: string): string {
  return createHash('sha256').update(`leasehold-bench:${name}`).digest().readBigInt64BE(0).toString();
}

export const TRY_ADVISORY_LOCK = 'select pg_try_advisory_lock($1::bigint) as locked';

export const advisoryPattern: ClaimPattern = {
  id: 'advisory',
  description: 'select pg_try_advisory_lock(k) — 1 round trip; a winner then calls pg_advisory_unlock(k) (+1)',
  guarantees: 'no TTL (held until unlocked or the session ends), no fence, a loser learns nothing; needs a direct session (not through PgBouncer)',
  table: null,

  async prepare(session: Session, name: string): Promise<void> {
    // Nothing to create. The lock must be free: every earlier holder's session has ended (a
    // backend releases its locks as it exits, just after its client saw the socket close).
    for (let attempt = 0; ; attempt++) {
      const rows = await session.query<{ holders: number }>(
        `select count(*)::int as holders from pg_locks
          where locktype = 'advisory' and objsubid = 1 and granted
            and ((classid::bigint << 32) | objid::bigint) = $1::bigint`,
        [advisoryKey(name)],
      );
      if ((rows[0]?.holders ?? 0) === 0) return;
      if (attempt >= 100) throw new Error(`the advisory lock of "${name}" is still held`);
      await sleep(20);
    }
  },

  async acquire(session: Session, name: string): Promise<ClaimOutcome> {
    const key = advisoryKey(name);
    const rows = await session.query<{ locked: boolean }>(TRY_ADVISORY_LOCK, [key]);
    const won = rows[0]?.locked === true;
    // The "token" is the key: a session advisory lock belongs to the session, not to a secret.
    return { won, token: won ? key : null, reason: won ? 'acquired' : 'held' };
  },

  async release(session: Session, _name: string, token: string): Promise<boolean> {
    const rows = await session.query<{ unlocked: boolean }>('select pg_advisory_unlock($1::bigint) as unlocked', [token]);
    return rows[0]?.unlocked === true;
  },
};
