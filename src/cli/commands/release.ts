// leasehold release NAME --force [--by NAME]: the operator override. Frees the lease whoever
// holds it and bumps the fence, so the old holder's fenced writes fail; who did it is recorded
// (leasehold.actions), and the run holding the lease ends lost naming them.
import { userInfo } from 'node:os';
import { createInterface } from 'node:readline/promises';
import type { Command } from 'commander';
import { forceReleaseLease } from '../../control/force-release.js';
import { checkLeaseName } from '../../validate/names.js';
import { CliError, databaseUrl, openDatabase, report, type Io } from '../context.js';
import { EXIT } from '../exit-codes.js';
import { inert } from '../format.js';

export function registerRelease(program: Command, io: Io): void {
  program
    .command('release')
    .description('force-release a lease held by another process (bumps the fence: its fenced writes fail)')
    .argument('<name>', 'lease (job) name')
    .option('--force', 'required: this takes the lease away from whoever holds it')
    .option('-y, --yes', 'do not ask for confirmation')
    .option('--by <name>', 'who releases (recorded in leasehold.actions and in the history of the run it stops; default: the OS user)')
    .option('--json', 'print JSON')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (name: string, options: { force?: boolean; yes?: boolean; by?: string; json?: boolean; databaseUrl?: string }) => {
      try {
        checkLeaseName(name);
        if (!options.force) throw new CliError('release takes the lease away from its holder: pass --force to do it.', EXIT.usage);
        const db = await openDatabase(databaseUrl(options.databaseUrl));
        try {
          const { rows } = await db.query<{ state: string; holder: string | null; fence: string }>(
            'select state, holder, fence from leasehold.lease_status where name = $1',
            [name],
          );
          const current = rows[0];
          if (!current) throw new CliError(`no lease named "${inert(name)}"`, EXIT.error);
          if (!options.yes) {
            if (!process.stdin.isTTY) throw new CliError('not a terminal: pass --yes to confirm the forced release.', EXIT.usage);
            const prompt = createInterface({ input: process.stdin, output: process.stderr });
            const answer = await prompt.question(inert(`Force-release "${name}" (${current.state}, held by ${current.holder ?? 'nobody'}, fence ${current.fence})? [y/N] `));
            prompt.close();
            if (!/^y(es)?$/i.test(answer.trim())) {
              io.err('leasehold: not released');
              io.exit(EXIT.error);
              return;
            }
          }
          const result = await forceReleaseLease(db, name, options.by ?? osUser());
          if (options.json) io.out(JSON.stringify({ name, ...result }));
          else
            io.out(
              inert(
                result.released
                  ? `released "${name}": was held by ${result.previousHolder} (fence ${result.previousFence}); fence is now ${result.fence}, so its fenced writes will fail`
                  : `"${name}" was not held; fence bumped to ${result.fence}`,
              ),
            );
          io.exit(EXIT.ok);
        } finally {
          await db.pool.end();
        }
      } catch (error) {
        report(io, error, options.json === true);
      }
    });
}

/** The operator's name when --by is not given: the OS user running the command. */
function osUser(): string {
  try {
    return userInfo().username || 'unknown';
  } catch {
    return process.env.USER ?? 'unknown'; // no passwd entry for this uid (some containers)
  }
}
