// The classic claim that leasehold replaces, on its own table:
//   BEGIN; SELECT ... FOR UPDATE; (client compares expiry with the database's now())
//   UPDATE ... if free; COMMIT                       — 4 round trips to win, 3 to lose
// and release = UPDATE ... WHERE token matches     — 1 round trip.
// Every decision, winning or losing, locks the row, so it takes a transaction id, waits
// for the current locker and writes WAL that its COMMIT must flush.
import { randomUUID } from 'node:crypto';
import { interval, type ClaimOutcome, type ClaimPattern } from './pattern.js';
import type { Session } from './session.js';

export const CLASSIC_TABLE = 'bench_classic';

export const CREATE_CLASSIC_TABLE = `
  create table if not exists ${CLASSIC_TABLE} (
    name       text primary key,
    token      uuid,
    expires_at timestamptz
  )`;

interface LockedRow {
  token: string | null;
  expires_at: Date | null;
  db_now: Date;
}

export const classicPattern: ClaimPattern = {
  id: 'classic',
  description: `BEGIN; SELECT … FOR UPDATE; UPDATE if expired; COMMIT — 4 round trips to win, 3 to lose; release = UPDATE … WHERE token (+1)`,
  guarantees: 'TTL (database clock), no fence unless one is added; a loser waits for the row lock',
  table: CLASSIC_TABLE,

  async prepare(session: Session, name: string): Promise<void> {
    await session.query(CREATE_CLASSIC_TABLE);
    await session.query(
      `insert into ${CLASSIC_TABLE} (name) values ($1)
       on conflict (name) do update set token = null, expires_at = null`,
      [name],
    );
  },

  async acquire(session: Session, name: string, _holder: string, ttlSeconds: number): Promise<ClaimOutcome> {
    await session.query('begin');
    try {
      const rows = await session.query<LockedRow>(
        `select token, expires_at, now() as db_now from ${CLASSIC_TABLE} where name = $1 for update`,
        [name],
      );
      const row = rows[0];
      if (!row) throw new Error(`no ${CLASSIC_TABLE} row for "${name}"`);
      // Decide in the client, but by the database clock (db_now), not the client's.
      const free = row.token === null || row.expires_at === null || row.expires_at.getTime() <= row.db_now.getTime();
      let token: string | null = null;
      if (free) {
        token = randomUUID();
        await session.query(`update ${CLASSIC_TABLE} set token = $2, expires_at = now() + $3::interval where name = $1`, [
          name,
          token,
          interval(ttlSeconds),
        ]);
      }
      await session.query('commit');
      return { won: free, token, reason: free ? 'acquired' : 'held' };
    } catch (error) {
      await session.client.query('rollback').catch(() => undefined);
      throw error;
    }
  },

  async release(session: Session, name: string, token: string): Promise<boolean> {
    const changed = await session.execute(
      `update ${CLASSIC_TABLE} set token = null, expires_at = null where name = $1 and token = $2`,
      [name, token],
    );
    return changed === 1;
  },
};
