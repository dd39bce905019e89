// What the server cancels under the role's own statement_timeout (src/db/role-timeout.ts): the
// opening that sets the client's timeout is sent again, and a statement cancelled without saying
// why ("user request", which PostgreSQL also reports for its own timeout) runs once more, pinned,
// without pinning the pool. test/db/server-settings.test.ts runs the same with a 1 ms role timeout.
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { dbHandle } from '../../src/db/handle.js';
import { pinnedReason } from '../../src/db/pinned.js';
import { sendOpening } from '../../src/db/role-timeout.js';
import { client, freshDatabase, rawPool } from '../support/db.js';

const cancel = (message: string) => Object.assign(new Error(message), { code: '57014' });

/** A client whose openings fail with `failures` in turn (each leaves it in an aborted transaction), then succeed. */
function scripted(failures: Error[]): { sent: string[]; client: pg.ClientBase } {
  const sent: string[] = [];
  let status: 'I' | 'T' | 'E' = 'I';
  const query = async ({ text }: { text: string }) => {
    sent.push(text);
    if (text === 'rollback') status = 'I';
    else {
      const failure = failures.shift();
      status = failure ? 'E' : 'T';
      if (failure) throw failure;
    }
    return { rows: [] };
  };
  return { sent, client: { query, getTransactionStatus: () => status } as unknown as pg.ClientBase };
}

describe('sendOpening', () => {
  const opening = 'set local statement_timeout = 5000; begin';

  it('sends an opening the server cancelled again, after rolling back what it began, whatever the message says', async () => {
    const { sent, client } = scripted([cancel('canceling statement due to user request'), cancel('canceling statement due to statement timeout')]);
    await sendOpening(client, opening, 5_000);
    expect(sent).toEqual([opening, 'rollback', opening, 'rollback', opening]);
  });

  it('gives up after the third cancel in a row, and throws any other error at once', async () => {
    const three = scripted([1, 2, 3].map(() => cancel('canceling statement due to user request')));
    await expect(sendOpening(three.client, opening, 5_000)).rejects.toMatchObject({ code: '57014' });
    expect(three.sent.filter((text) => text === opening)).toHaveLength(3);
    const denied = scripted([Object.assign(new Error('permission denied'), { code: '42501' })]);
    await expect(sendOpening(denied.client, opening, 5_000)).rejects.toMatchObject({ code: '42501' });
    expect(denied.sent).toEqual([opening]);
  });
});

describe('a statement cancelled without saying why', () => {
  let url: string;
  beforeAll(async () => {
    url = await freshDatabase();
    await (await client(url, { liveness: false })).close();
  });

  /** Cancels (pg_cancel_backend, "due to user request") the running `select pg_sleep` of `app`, `times` times. */
  async function cancelSleeps(app: string, times: number): Promise<void> {
    const admin = rawPool(url, 1);
    for (let done = 0; done < times; ) {
      const { rows } = await admin.query<{ cancelled: boolean }>(
        `select pg_cancel_backend(pid) as cancelled from pg_stat_activity
          where application_name = $1 and state = 'active' and query like 'select pg_sleep%'`,
        [app],
      );
      if (rows.some((r) => r.cancelled)) {
        done++;
        // the cancelled statement is gone before the next one is looked for
        await new Promise((resolve) => setTimeout(resolve, 100));
      } else await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  it('runs once more, pinned, and the pool stays unpinned; cancelled again, the error is thrown', { timeout: 30_000 }, async () => {
    const app = `lh-cancel-${process.pid}`;
    const pool = new pg.Pool({ connectionString: url, max: 1, application_name: app });
    pool.on('error', () => undefined);
    try {
      const db = dbHandle(pool, { where: 'the test database', timeoutMs: 5_000 });
      const once = db.query<{ x: number }>('select pg_sleep(0.5), 1 as x');
      await cancelSleeps(app, 1);
      expect((await once).rows[0]?.x).toBe(1);
      expect(pinnedReason(pool)).toBeNull();

      const twice = db.query('select pg_sleep(0.5), 1 as x').catch((error: unknown) => error);
      await cancelSleeps(app, 2);
      expect(await twice).toMatchObject({ code: '57014', message: 'canceling statement due to user request' });
      expect(pinnedReason(pool)).toBeNull();
    } finally {
      await pool.end();
    }
  });
});
