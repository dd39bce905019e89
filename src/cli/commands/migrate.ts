// leasehold migrate [--dry-run]: apply pending migrations, or print the complete script that
// would (schema, objects, version rows, grants) for review or for another migration tool.
import type { Command } from 'commander';
import { installScript, latestVersion, migrate, migrations, schemaVersion } from '../../db/migrations.js';
import { databaseUrl, openDatabase, report, type Io } from '../context.js';
import { EXIT } from '../exit-codes.js';

export function registerMigrate(program: Command, io: Io): void {
  program
    .command('migrate')
    .description('create or upgrade the leasehold schema (safe to run from many hosts at once)')
    .option('--dry-run', 'print the install (or upgrade) script that would run, change nothing')
    .option('--json', 'print JSON')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (options: { dryRun?: boolean; json?: boolean; databaseUrl?: string }) => {
      try {
        const db = await openDatabase(databaseUrl(options.databaseUrl), { checkSchema: false });
        try {
          if (options.dryRun) {
            const from = await db.transaction(schemaVersion);
            const pending = migrations().filter((m) => m.version > from);
            const script = pending.length === 0 ? null : installScript(from, latestVersion());
            if (options.json) io.out(JSON.stringify({ from, to: latestVersion(), pending: pending.map((m) => ({ version: m.version, name: m.name, breaking: m.breaking })), script }, null, 2));
            else io.out(script ?? `-- leasehold schema is at version ${from}: nothing to do`);
          } else {
            const result = await migrate(db.pool);
            if (options.json) io.out(JSON.stringify(result));
            else io.out(result.applied.length === 0 ? `leasehold schema is up to date (version ${result.to})` : `migrated leasehold schema from version ${result.from} to ${result.to} (applied ${result.applied.join(', ')})`);
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
