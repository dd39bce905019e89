// A normalised dump of schema leasehold read from the catalog (pg_dump need not match the
// server's major version): every table, column, constraint, index, trigger, view, function with
// its settings and comment, and the access levels. Two databases with the same dump have the
// same schema; sql/schema-dump.txt is the dump of a fresh install, checked in for review.
import type pg from 'pg';

const QUERIES: Array<[string, (row: Record<string, string | null>) => string]> = [
  [
    `select c.relkind::text as kind, c.relname, c.reloptions::text as options, obj_description(c.oid, 'pg_class') as comment,
            (select string_agg(format('  %s %s%s%s%s%s', a.attname, format_type(a.atttypid, a.atttypmod),
                      case when a.attnotnull then ' not null' else '' end,
                      case when a.attidentity <> '' then ' identity ' || a.attidentity::text else '' end,
                      coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), ''),
                      coalesce(' -- ' || col_description(a.attrelid, a.attnum), '')), E'\\n' order by a.attnum)
               from pg_attribute a left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
              where a.attrelid = c.oid and a.attnum > 0 and not a.attisdropped) as columns
       from pg_class c where c.relnamespace = 'leasehold'::regnamespace and c.relkind in ('r', 'v', 'S', 'c')
      order by c.relkind, c.relname`,
    (r) => `${r.kind} ${r.relname}${r.options ? ` with ${r.options}` : ''}${r.comment ? ` -- ${r.comment}` : ''}\n${r.columns ?? ''}`,
  ],
  [
    `select conrelid::regclass::text as rel, conname, pg_get_constraintdef(oid) as def from pg_constraint
      where connamespace = 'leasehold'::regnamespace and contype <> 'n' order by 1, 2`,
    (r) => `constraint ${r.rel}.${r.conname} ${r.def}`,
  ],
  [
    `select pg_get_indexdef(x.indexrelid) as def from pg_index x join pg_class c on c.oid = x.indrelid
      where c.relnamespace = 'leasehold'::regnamespace order by 1`,
    (r) => `index ${r.def}`,
  ],
  [
    `select pg_get_triggerdef(t.oid) as def from pg_trigger t join pg_class c on c.oid = t.tgrelid
      where c.relnamespace = 'leasehold'::regnamespace and not t.tgisinternal order by 1`,
    (r) => `trigger ${r.def}`,
  ],
  [
    `select c.relname, pg_get_viewdef(c.oid) as def from pg_class c
      where c.relnamespace = 'leasehold'::regnamespace and c.relkind = 'v' order by 1`,
    (r) => `view ${r.relname}\n${r.def}`,
  ],
  [
    `select p.oid::regprocedure::text as sig, pg_get_functiondef(p.oid) as def, obj_description(p.oid, 'pg_proc') as comment,
            array_to_string(array(select unnest(p.proconfig) order by 1), '; ') as config
       from pg_proc p where p.pronamespace = 'leasehold'::regnamespace order by 1`,
    (r) => `function ${r.sig} [${r.config ?? ''}]${r.comment ? ` -- ${r.comment}` : ''}\n${(r.def ?? '').replace(/^ *SET [a-z_]+ TO .*\n/gm, '')}`,
  ],
  [`select object, level from leasehold.access order by 1`, (r) => `access ${r.object} ${r.level}`],
];

/** The dump, first line naming the server's major version (view and function text is printed by it). */
export async function schemaDump(db: pg.Pool | pg.ClientBase): Promise<string> {
  const major = (await db.query<{ v: string }>(`select current_setting('server_version_num') as v`)).rows[0]!.v.slice(0, -4);
  const parts = [`-- schema leasehold as PostgreSQL ${major} prints it (test/support/schema-dump.ts)`];
  for (const [sql, line] of QUERIES) {
    const { rows } = await db.query<Record<string, string | null>>(sql);
    parts.push(...rows.map(line));
  }
  return parts.join('\n') + '\n';
}

/** The major version a dump was printed by. */
export const dumpMajor = (dump: string): string => /PostgreSQL (\d+)/.exec(dump)?.[1] ?? '';
