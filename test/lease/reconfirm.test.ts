// leasehold.reconfirm_leases against the database: which leases a holder's new liveness session
// takes back, and why not the others. An earlier server incarnation is stood in for by writing
// holder_incarnation as a restart leaves it (test/lease/restart.test.ts restarts a server for real).
import pg from 'pg';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { freshDatabase } from '../support/db.js';

let url: string;
let session: pg.Client;
let key: string;
let other: pg.Client;

beforeAll(async () => {
  url = await freshDatabase();
  const setup = new pg.Client({ connectionString: url });
  await setup.connect();
  const { migrate } = await import('../../src/schema.js');
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  await migrate(pool);
  await pool.end();
  await setup.end();
  session = new pg.Client({ connectionString: url });
  session.on('error', () => undefined);
  await session.connect();
  key = (await session.query<{ key: string }>('select leasehold.register_liveness()::text as key')).rows[0]!.key;
  other = new pg.Client({ connectionString: url });
  other.on('error', () => undefined);
  await other.connect();
});

afterAll(async () => {
  await session?.end();
  await other?.end();
});

async function grant(name: string, ttl = '30 seconds'): Promise<{ token: string; fence: string }> {
  const { rows } = await other.query(`select token::text, fence::text from leasehold.acquire($1, $2::interval, 'old-holder')`, [name, ttl]);
  return rows[0];
}

/** What a restart leaves: the grant's liveness evidence belongs to an incarnation that is gone. */
async function fromEarlierIncarnation(name: string): Promise<void> {
  await other.query(`update leasehold.leases set holder_incarnation = '1@2000-01-01T00:00:00.000000', holder_key = 42 where name = $1`, [name]);
}

async function reconfirm(on: pg.Client, leases: Array<{ name: string; token: string; fence: string }>, withKey = key) {
  const { rows } = await on.query(
    `select name, reconfirmed, reason from leasehold.reconfirm_leases($1::bigint, $2::text[], $3::uuid[], $4::bigint[], $5::interval[])`,
    [withKey, leases.map((l) => l.name), leases.map((l) => l.token), leases.map((l) => l.fence), leases.map(() => '20 seconds')],
  );
  return rows.map((r) => `${r.name}: ${r.reconfirmed ? 'kept' : r.reason}`);
}

it('takes back what is still the holder\'s from an earlier incarnation, under the new key and incarnation, and says why not the rest', async () => {
  const kept = { name: 'kept', ...(await grant('kept')) };
  await fromEarlierIncarnation('kept');
  const same = { name: 'same', ...(await grant('same')) }; // granted on this incarnation (no liveness key: null evidence)
  await other.query(`update leasehold.leases set holder_incarnation = (select incarnation from leasehold.epoch_source()) where name = 'same'`);
  const taken = { name: 'taken', ...(await grant('taken')) };
  await fromEarlierIncarnation('taken');
  await other.query(`select leasehold.force_release('taken')`);
  await grant('taken');
  const released = { name: 'released', ...(await grant('released')) };
  await other.query(`select leasehold.release('released', $1)`, [released.token]);
  const expired = { name: 'expired', ...(await grant('expired', '100 milliseconds')) };
  await fromEarlierIncarnation('expired');
  await new Promise((resolve) => setTimeout(resolve, 150));
  const unknown = { name: 'unknown', token: kept.token, fence: '1' };
  expect(await reconfirm(session, [kept, same, taken, released, expired, unknown])).toEqual([
    'kept: kept',
    'same: same-incarnation',
    'taken: taken-over',
    'released: released',
    'expired: expired',
    'unknown: unknown',
  ]);
  const { rows } = await other.query(
    `select x.holder_key::text as key, x.holder_incarnation = (select incarnation from leasehold.epoch_source()) as here, l.holder_alive, x.expires_at > now() + interval '15 seconds' as renewed
       from leasehold.lease_status l join leasehold.leases x using (name) where name = 'kept'`,
  );
  expect(rows[0]).toEqual({ key, here: true, holder_alive: true, renewed: true });
});

it('is refused on a session that does not hold the key, and for arrays of different lengths', async () => {
  const lease = { name: 'refused', ...(await grant('refused')) };
  await fromEarlierIncarnation('refused');
  await expect(reconfirm(other, [lease])).rejects.toMatchObject({ code: '42501' });
  await expect(
    session.query(`select * from leasehold.reconfirm_leases($1::bigint, array['a','b'], array[gen_random_uuid()], array[1::bigint], array['1 second'::interval])`, [key]),
  ).rejects.toMatchObject({ code: '22023' });
});
