// An acquisition whose answer is lost is recognised by its retry (the caller's own token), and
// lease-changing statements commit synchronously whatever the session's synchronous_commit.
import { beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { client, connections, freshDatabase, waitFor } from '../support/db.js';

let url: string;
let conns: pg.Client[];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close(); // installs the schema
  conns = await connections(url, 3);
});

type Row = { acquired: boolean; token: string | null; fence: string; holder: string | null; reason: string };
const acquire = async (c: pg.Client, name: string, holder: string, token: string | null = null, ttl = '30 seconds') =>
  (await c.query<Row>('select * from leasehold.acquire($1, $2::interval, $3, null, null, $4::uuid)', [name, ttl, holder, token])).rows[0] as Row;

describe('acquire with the caller\'s token', () => {
  it('hands a held grant back to the same token with the same fence, and to nobody else', async () => {
    const [a, b] = conns as [pg.Client, pg.Client];
    const token = '3f0c5a52-8d7e-4d0c-9a53-0d7b1e2f6a01';
    const first = await acquire(a, 'adopt', 'h1', token);
    expect(first).toMatchObject({ acquired: true, token, fence: '1' });
    // the retry, on another connection, as after a lost answer
    expect(await acquire(b, 'adopt', 'h1', token)).toMatchObject({ acquired: true, token, fence: '1', reason: 'acquired' });
    expect(await acquire(b, 'adopt', 'h2', 'aa0c5a52-8d7e-4d0c-9a53-0d7b1e2f6a01')).toMatchObject({ acquired: false, reason: 'held', holder: 'h1' });
    expect(await acquire(b, 'adopt', 'h2')).toMatchObject({ acquired: false, reason: 'held' });
    await a.query('select leasehold.release($1, $2)', ['adopt', token]);
    // released: the same token is a fresh acquisition with the next fence
    expect(await acquire(b, 'adopt', 'h1', token)).toMatchObject({ acquired: true, fence: '2' });
  });

  it('lets the client adopt its own grant when the first answer never arrives', async () => {
    const leasehold = await client(url, { liveness: false, queryTimeout: '1s' });
    const [blocker, observer] = conns as [pg.Client, pg.Client];
    // Hold the grant's UPDATE back past the client's timeout: the acquire commits only after
    // the client stopped waiting for it and asked again with the same token.
    await blocker.query('begin');
    await blocker.query('lock table leasehold.leases in share mode');
    const pending = leasehold.acquire('lost-answer', { ttl: '30s' });
    await waitFor(async () => {
      const { rows } = await observer.query<{ n: number }>(
        `select count(*)::int as n from pg_stat_activity
          where datname = current_database() and wait_event_type = 'Lock' and query like '%leasehold.acquire%'`,
      );
      return (rows[0]?.n ?? 0) >= 2; // the timed-out first attempt and the retry
    }, 15_000, 20);
    await blocker.query('commit');
    const result = await pending;
    expect(result.acquired, result.acquired ? "" : JSON.stringify(result)).toBe(true);
    if (!result.acquired) return;
    const { rows } = await observer.query<{ token: string; fence: string }>("select token, fence from leasehold.leases where name = 'lost-answer'");
    expect(rows[0]).toEqual({ token: result.lease.token, fence: '1' });
    await result.lease.release();
  }, 30_000);
});

describe('synchronous_commit', () => {
  it('is on at the commit of every lease-changing statement, whatever the session says', async () => {
    const [c] = conns as [pg.Client];
    await c.query('set synchronous_commit = off');
    const settingAfter = async (sql: string, values: unknown[]) => {
      await c.query('begin');
      try {
        const result = await c.query(sql, values);
        const { rows } = await c.query<{ s: string }>("select current_setting('synchronous_commit') as s");
        return { setting: rows[0]?.s, rows: result.rows as Array<Record<string, unknown>> };
      } finally {
        await c.query('commit');
      }
    };
    const grant = await settingAfter('select * from leasehold.acquire($1, $2::interval, $3)', ['sync', '30 seconds', 'h']);
    expect(grant.setting).toBe('on');
    const token = grant.rows[0]?.token as string;
    expect((await settingAfter('select * from leasehold.renew_leases(($1, $2, $3::interval))', ['sync', token, '30 seconds'])).setting).toBe('on');
    expect((await settingAfter('select leasehold.release($1, $2)', ['sync', token])).setting).toBe('on');
    expect((await settingAfter('select * from leasehold.force_release($1)', ['sync'])).setting).toBe('on');
    expect(
      (await settingAfter(
        "select * from leasehold.claim(array['sync'], array[now() - interval '1 minute'], array(select (extract(epoch from t) * 1000)::bigint from unnest(array[interval '30 seconds']) t), array['exclusive'], array[0], 'h', null, true)",
        [],
      )).setting,
    ).toBe('on');
    expect(
      (await settingAfter("select * from leasehold.finish_runs(array['sync'], array[1::bigint], array[null::uuid], array['succeeded'], array[null::text], array[1])", []))
        .setting,
    ).toBe('on');
    // transaction-local: the session's own setting is back afterwards
    expect((await c.query<{ s: string }>("select current_setting('synchronous_commit') as s")).rows[0]?.s).toBe('off');
  });
  it('is on at the commit of a grant by a least-privilege role whose own synchronous_commit is off (SECURITY DEFINER functions keep the pin)', async () => {
    // A role-level setting, as a deployment would make it; the functions run as the schema
    // owner with their own search_path, and the pin must still reach the caller's COMMIT.
    const role = `lh_async_${process.pid}_${Math.random().toString(36).slice(2, 8)}`;
    const [admin] = conns as [pg.Client];
    await admin.query(`create role ${role} login password 'leasehold-test-pw'`);
    await admin.query(`alter role ${role} set synchronous_commit = off`);
    await admin.query('select leasehold.grant_access($1, $2)', [role, 'client']);
    const as = new URL(url);
    as.username = role;
    as.password = 'leasehold-test-pw';
    const c = new pg.Client({ connectionString: as.toString() });
    c.on('error', () => undefined);
    await c.connect();
    try {
      const setting = async () => (await c.query<{ s: string }>("select current_setting('synchronous_commit') as s")).rows[0]?.s;
      expect(await setting()).toBe('off');
      expect((await c.query<{ d: boolean }>("select prosecdef as d from pg_proc where oid = 'leasehold.acquire'::regproc")).rows[0]?.d).toBe(true);
      await c.query('begin');
      const grant = (await c.query<{ acquired: boolean; token: string }>("select * from leasehold.acquire('role-sync', '30 seconds', 'h')")).rows[0];
      expect(grant?.acquired).toBe(true);
      expect(await setting()).toBe('on');
      await c.query('commit');
      await c.query('begin');
      await c.query("select * from leasehold.renew_leases(('role-sync', $1, '30 seconds'))", [grant?.token]);
      expect(await setting()).toBe('on');
      await c.query('commit');
      await c.query('begin');
      await c.query("select leasehold.release('role-sync', $1)", [grant?.token]);
      expect(await setting()).toBe('on');
      await c.query('commit');
      expect(await setting()).toBe('off');
    } finally {
      await c.end().catch(() => undefined);
      // role names are cluster-wide
      await admin.query(`drop owned by ${role} cascade`);
      await admin.query(`drop role ${role}`);
    }
  });
});
