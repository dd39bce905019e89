// leasehold demo: the same story as `npm run demo` in the repository.
import type { Command } from 'commander';
import { report, type Io } from '../context.js';
import { noteDatabaseUrl } from '../database-errors.js';

export function registerDemo(program: Command, io: Io): void {
  program
    .command('demo')
    .description('watch worker processes share a job on an embedded PostgreSQL (or DATABASE_URL): runs, skips, a takeover, a refused stale write')
    .option('--keep', 'afterwards, keep the database (and embedded server) running for exploring until Ctrl-C')
    .action(async (options: { keep?: boolean }) => {
      try {
        // the demo's server is DATABASE_URL's, when set: messages about it name that
        if (process.env.DATABASE_URL) noteDatabaseUrl(process.env.DATABASE_URL, 'DATABASE_URL');
        const { runDemo } = await import('../../demo/run.js');
        // a second Ctrl-C during the demo's cleanup exits at once
        io.exit(await runDemo({ keep: options.keep === true, onForceQuit: (code) => process.exit(code) }));
      } catch (error) {
        report(io, error, false);
      }
    });
}
