// docs/sql-api.md is the contract of the SQL functions: this file checks it against the
// database, so that the page and sql/0001_leases.sql cannot drift apart unnoticed.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { client, freshDatabase, rawPool } from './support/db.js';

const doc = readFileSync(fileURLToPath(new URL('../docs/sql-api.md', import.meta.url)), 'utf8');
// the lease protocol (0001) and the batch renewal added to it (0007)
const migration = ['0001_leases', '0007_renew_batch']
  .map((name) => readFileSync(fileURLToPath(new URL(`../sql/${name}.sql`, import.meta.url)), 'utf8'))
  .join('\n');

let url: string;

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
});

/** PostgreSQL's spelling of types and defaults, as the page writes them. */
const normalize = (text: string) =>
  text
    .replace(/timestamp with time zone/g, 'timestamptz')
    .replace(/ DEFAULT NULL::\w+/g, ' = null')
    .replace(/\bp_/g, '')
    .trim();

/** The page's sections for functions and views: heading text and body up to the next heading. */
function sections(): Array<{ name: string; args: string | undefined; returns: string | undefined; body: string }> {
  const found: Array<{ name: string; args: string | undefined; returns: string | undefined; body: string }> = [];
  const heading = /^### `leasehold\.(\w+)(?:\(([^)]*)\))?(?: → ([\w.]+))?`$/gm;
  for (const match of doc.matchAll(heading)) {
    const start = (match.index ?? 0) + match[0].length;
    const rest = doc.slice(start);
    const end = rest.search(/^##/m);
    found.push({ name: match[1]!, args: match[2], returns: match[3], body: end === -1 ? rest : rest.slice(0, end) });
  }
  return found;
}

/** Rows `| \`column\` | type | ...` of the first column table in a section. */
const columnsOf = (body: string) => [...body.matchAll(/^\| `(\w+)` \| ([a-z][a-z ]*) \|/gm)].map((m) => `${m[1]} ${m[2]}`);

describe('docs/sql-api.md against the database', () => {
  it('documents every function of sql/0001_leases.sql and sql/0007_renew_batch.sql except the private check_* helpers', () => {
    const created = [...migration.matchAll(/^create function leasehold\.(\w+)/gm)].map((m) => m[1]!).filter((n) => !n.startsWith('check_'));
    const documented = sections().map((s) => s.name);
    expect(new Set(documented)).toEqual(new Set([...created, 'lease_status']));
  });

  it('gives each function its real arguments, and each returned column its real name, type and place', async () => {
    const pool = rawPool(url, 1);
    for (const section of sections().filter((s) => s.name !== 'lease_status')) {
      const { rows } = await pool.query<{ args: string; result: string }>(
        `select pg_get_function_arguments(p.oid) as args, pg_get_function_result(p.oid) as result
           from pg_proc p join pg_namespace n on n.oid = p.pronamespace
          where n.nspname = 'leasehold' and p.proname = $1`,
        [section.name],
      );
      expect(rows, `leasehold.${section.name} exists once`).toHaveLength(1);
      const real = rows[0]!;
      expect(section.args, `arguments of leasehold.${section.name}`).toBe(normalize(real.args));
      const table = /^TABLE\((.*)\)$/.exec(real.result);
      if (table) {
        expect(columnsOf(section.body), `columns of leasehold.${section.name}`).toEqual(normalize(table[1]!).split(', '));
      } else {
        expect(section.returns, `result of leasehold.${section.name}`).toBe(normalize(real.result));
      }
    }
  });

  it('lists the columns of leasehold.lease_status in order, with their types', async () => {
    const { rows } = await rawPool(url, 1).query<{ column: string }>(
      `select column_name || ' ' || data_type as column from information_schema.columns
        where table_schema = 'leasehold' and table_name = 'lease_status' order by ordinal_position`,
    );
    const view = sections().find((s) => s.name === 'lease_status')!;
    expect(columnsOf(view.body)).toEqual(rows.map((r) => normalize(r.column)));
  });

  it('raises the documented SQLSTATEs with the documented messages', async () => {
    const messages = (code: string) => {
      const row = new RegExp(`^\\| \`${code}\` \\| (.*?) \\|`, 'm').exec(doc);
      expect(row, `a row for ${code} in the error table`).not.toBeNull();
      return [...row![1]!.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);
    };
    const pattern = (message: string) =>
      new RegExp(`^${message.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace(/…/g, '.*').replace(/\bNAME\b/g, '.+').replace(/\b[NM]\b/g, '\\d+')}$`);
    const pool = rawPool(url, 1);
    const raised = async (sql: string, values: unknown[]) => {
      try {
        await pool.query(sql, values);
      } catch (error) {
        return error as { code: string; message: string; detail?: string; hint?: string };
      }
      throw new Error(`no error from ${sql}`);
    };
    const cases: Array<[string, string, unknown[]]> = [
      ['LH001', `select leasehold.acquire($1, '1 minute', 'h')`, ['']],
      ['LH001', `select leasehold.acquire($1, '1 minute', 'h')`, ['x'.repeat(201)]],
      ['LH001', `select leasehold.renew($1, gen_random_uuid(), '1 minute')`, ['a\nb']],
      ['LH002', `select leasehold.acquire('job', $1, 'h')`, ['0 seconds']],
      ['LH002', `select leasehold.renew('job', gen_random_uuid(), $1)`, ['8 days']],
      ['LH004', `select leasehold.acquire('job', '1 minute', $1)`, ['']],
    ];
    for (const [code, sql, values] of cases) {
      const error = await raised(sql, values);
      expect(error.code).toBe(code);
      expect(messages(code).some((m) => pattern(m).test(error.message)), `"${error.message}" is documented for ${code}`).toBe(true);
    }

    const { rows } = await pool.query<{ token: string; fence: string }>(`select token, fence from leasehold.acquire('lost', '1 minute', 'first')`);
    await pool.query(`select leasehold.force_release('lost')`);
    await pool.query(`select leasehold.acquire('lost', '1 minute', 'second')`);
    const lost = await raised(`select leasehold.assert_lease('lost', $1, $2)`, [rows[0]!.token, rows[0]!.fence]);
    const [message, , , hint] = messages('LH003');
    expect(lost.code).toBe('LH003');
    expect(lost.message).toMatch(pattern(message!));
    expect(lost.hint).toBe(hint);
    expect(lost.detail).toMatch(pattern('fence is now M, held by …'));
    expect(doc).toContain('`fence is now M, held by H`');

    // Held, but last confirmed in an earlier epoch (set by hand: this server has no failover):
    // the detail's documented first words and the other hint, which tells the caller to renew.
    const { rows: held } = await pool.query<{ token: string; fence: string }>(`select token, fence from leasehold.acquire('unconfirmed', '1 minute', 'first')`);
    await pool.query(`update leasehold.leases set epoch = epoch - 1 where name = 'unconfirmed'`);
    const unconfirmed = await raised(`select leasehold.assert_lease('unconfirmed', $1, $2)`, [held[0]!.token, held[0]!.fence]);
    const prefix = 'a database failover happened since the lease was last confirmed';
    expect(doc).toContain(`\`${prefix}\``);
    expect(unconfirmed.code).toBe('LH003');
    expect(unconfirmed.message).toMatch(pattern(message!));
    expect(unconfirmed.detail).toMatch(new RegExp(`^${prefix} \\(epoch \\d+, now \\d+\\): renew it, or roll back if it is lost$`));
    expect(unconfirmed.hint).toBe(messages('LH003')[5]);
    expect(unconfirmed.hint).toMatch(/renew the lease/);
    // the same row with a wrong token: no failover detail, no invitation to renew
    const wrong = await raised(`select leasehold.assert_lease('unconfirmed', gen_random_uuid(), $1)`, [held[0]!.fence]);
    expect([wrong.detail, wrong.hint]).toEqual(['the token does not match the lease', hint]);
    expect(doc).toContain('`the token does not match the lease`');
  });
});
