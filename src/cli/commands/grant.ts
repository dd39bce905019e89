// leasehold grant ROLE --as reader|client|operator [--namespace PREFIX] [--print | --revoke]:
// gives a database role one access level of the schema (docs/security.md), bound to a name prefix
// with --namespace (services sharing one database). The statements come from the schema
// (leasehold.grant_statements); run it as the schema owner.
import { Option, type Command } from 'commander';
import { databaseUrl, openDatabase, report, type Io } from '../context.js';
import { EXIT } from '../exit-codes.js';

const LEVELS = ['reader', 'client', 'operator'] as const;

interface GrantOptions {
  as: (typeof LEVELS)[number];
  namespace?: string;
  print?: boolean;
  revoke?: boolean;
  json?: boolean;
  databaseUrl?: string;
}

export function registerGrant(program: Command, io: Io): void {
  program
    .command('grant')
    .description('grant a database role an access level: reader (views), client (leases, jobs, exec), operator (reader + force-release, prune)')
    .argument('<role>', 'existing database role (create it first)')
    .addOption(new Option('--as <level>', 'access level').choices(LEVELS).makeOptionMandatory())
    .option('--namespace <prefix>', "bind the role to names starting with this prefix (e.g. 'billing:'); repeat the command for more")
    .option('--print', 'print the GRANT statements, change nothing')
    .option('--revoke', 'take the level away instead')
    .option('--json', 'print JSON')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL; connect as the schema owner)')
    .action(async (role: string, options: GrantOptions) => {
      try {
        const db = await openDatabase(databaseUrl(options.databaseUrl));
        try {
          if (options.revoke) {
            const { rows } = await db.query<{ left: number }>('select leasehold.revoke_access($1, $2) as left', [role, options.as]);
            const left = rows[0]?.left ?? 0;
            if (options.json) io.out(JSON.stringify({ role, level: options.as, revoked: true, levelsLeft: left }));
            else io.out(`revoked leasehold ${options.as} access from ${role} (${left} other level${left === 1 ? '' : 's'} kept)`);
          } else {
            const { rows } = options.print
              ? await db.query<{ statement: string }>('select s as statement from leasehold.grant_statements($1, $2) s', [role, options.as])
              : await db.query<{ statement: string }>('select s as statement from leasehold.grant_access($1, $2, $3) s', [role, options.as, options.namespace ?? null]);
            const statements = rows.map((row) => `${row.statement};`);
            if (options.print && options.namespace !== undefined) {
              statements.push(`insert into leasehold.namespaces (role, prefix) values (${quote(role)}, ${quote(options.namespace)}) on conflict do nothing;`);
            }
            const scope = options.namespace === undefined ? '' : ` in namespace ${options.namespace}`;
            if (options.json) io.out(JSON.stringify({ role, level: options.as, namespace: options.namespace ?? null, applied: !options.print, statements }, null, 2));
            else io.out(options.print ? statements.join('\n') : `${statements.join('\n')}\n-- granted leasehold ${options.as} access to ${role}${scope}`);
          }
          io.exit(EXIT.ok);
        } finally {
          await db.pool.end();
        }
      } catch (error) {
        report(io, error, options.json === true);
      }
    });
}

/** A SQL string literal. */
function quote(text: string): string {
  return `'${text.replace(/'/g, "''")}'`;
}
