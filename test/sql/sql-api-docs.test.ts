// docs/sql-api.md is the contract of the SQL functions and views of every migration: this file
// checks it against the database, so that the page and sql/*.sql cannot drift apart unnoticed.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { beforeAll, describe, expect, it } from 'vitest';
import { client, freshDatabase, rawPool } from '../support/db.js';

const doc = readFileSync(fileURLToPath(new URL('../../docs/sql-api.md', import.meta.url)), 'utf8');

let url: string;

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
});

/** PostgreSQL's spelling of types and defaults, as the page writes them. */
const normalize = (text: string) =>
  text
    .replace(/timestamp with time zone/g, 'timestamptz')
    .replace(/ DEFAULT NULL::(?:double precision|[\w]+)(?:\[\])?/g, ' = null')
    .replace(/ DEFAULT (\w+)/g, ' = $1')
    .replace(/\bp_/g, '')
    .trim();

/** The page's sections for functions and views: heading text and body up to the next heading. */
function sections(): Array<{ name: string; args: string | undefined; returns: string | undefined; body: string }> {
  const found: Array<{ name: string; args: string | undefined; returns: string | undefined; body: string }> = [];
  const heading = /^### `leasehold\.(\w+)(?:\(([^)]*)\))?(?: → ([\w.[\]]+))?`$/gm;
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

const VIEWS = ['lease_status', 'job_status', 'run_history', 'run_request_status', 'runs'];

/** The level table of "The contract": `| \`a\`, \`b\` | \`level\` ... |` rows, as "name level". */
const levels = () =>
  [...doc.matchAll(/^\| ((?:`\w+`(?:, )?)+) \| `(reader|client|operator)`/gm)].flatMap((m) => [...m[1]!.matchAll(/`(\w+)`/g)].map((n) => `${n[1]} ${m[2]}`));

describe('docs/sql-api.md against the database', () => {
  it('gives every object a non-owner level can use its level, exactly as leasehold.access does', async () => {
    const { rows } = await rawPool(url, 1).query<{ entry: string }>(`select object || ' ' || level as entry from leasehold.access where level <> 'owner'`);
    expect(levels().sort()).toEqual(rows.map((r) => r.entry).sort());
  });

  it('has a section for every function and view a non-owner level can use (the check_* helpers are private), and none for anything else', async () => {
    const { rows } = await rawPool(url, 1).query<{ name: string; kind: string }>(
      `select a.object as name, case when p.oid is not null then 'function' else 'view' end as kind
         from leasehold.access a
         left join pg_proc p on p.proname = a.object and p.pronamespace = 'leasehold'::regnamespace
         left join pg_class c on c.relname = a.object and c.relnamespace = 'leasehold'::regnamespace
        where a.level <> 'owner' and a.object not like 'check\\_%' and (p.oid is not null or c.relkind = 'v')`,
    );
    const documented = new Set(sections().map((s) => s.name));
    for (const row of rows) expect(documented.has(row.name), `a section for ${row.kind} leasehold.${row.name}`).toBe(true);
    const { rows: all } = await rawPool(url, 1).query<{ name: string }>(
      `select proname as name from pg_proc where pronamespace = 'leasehold'::regnamespace
       union select relname from pg_class where relnamespace = 'leasehold'::regnamespace and relkind = 'v'`,
    );
    const existing = new Set(all.map((r) => r.name));
    for (const name of documented) expect(existing.has(name), `leasehold.${name} exists`).toBe(true);
    expect(VIEWS.every((v) => documented.has(v))).toBe(true);
  });

  it('gives each function its real arguments, and each returned column its real name, type and place', async () => {
    const pool = rawPool(url, 1);
    for (const section of sections().filter((s) => !VIEWS.includes(s.name))) {
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
        // a composite result (one row): its table lists the type's columns
        const { rows: fields } = await pool.query<{ column: string }>(
          `select a.attname || ' ' || format_type(a.atttypid, a.atttypmod) as column
             from pg_type t join pg_attribute a on a.attrelid = t.typrelid
            where t.oid = to_regtype($1) and t.typtype = 'c' and a.attnum > 0 and not a.attisdropped order by a.attnum`,
          [real.result],
        );
        if (fields.length > 0) expect(columnsOf(section.body), `columns of ${real.result}`).toEqual(fields.map((f) => normalize(f.column)));
      }
    }
  });

  it('lists the columns of each view in order, with their types', async () => {
    for (const name of VIEWS) {
      const { rows } = await rawPool(url, 1).query<{ column: string }>(
        `select column_name || ' ' || data_type as column from information_schema.columns
          where table_schema = 'leasehold' and table_name = $1 order by ordinal_position`,
        [name],
      );
      const view = sections().find((s) => s.name === name)!;
      expect(columnsOf(view.body), `columns of leasehold.${name}`).toEqual(rows.map((r) => normalize(r.column)));
    }
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
      ['LH001', `select leasehold.renew_leases(($1, gen_random_uuid(), '1 minute'))`, ['a\nb']],
      ['LH002', `select leasehold.acquire('job', $1, 'h')`, ['0 seconds']],
      ['LH002', `select leasehold.renew_leases(('job', gen_random_uuid(), $1))`, ['8 days']],
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
