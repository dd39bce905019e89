// The `leasehold` command: one file per subcommand under ./commands.
import { Command, CommanderError } from 'commander';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { processIo, type Io } from './context.js';
import { EXIT } from './exit-codes.js';
import { registerBackfill } from './commands/backfill.js';
import { registerDashboard } from './commands/dashboard.js';
import { registerDashboardUser } from './commands/dashboard-user.js';
import { registerDemo } from './commands/demo.js';
import { registerExec } from './commands/exec.js';
import { registerGrant } from './commands/grant.js';
import { registerMigrate } from './commands/migrate.js';
import { registerPause } from './commands/pause.js';
import { registerRelease } from './commands/release.js';
import { registerRunNow } from './commands/run-now.js';
import { registerRuns } from './commands/runs.js';
import { registerSchedule } from './commands/schedule.js';
import { registerStatus } from './commands/status.js';
import { registerWorker } from './commands/worker.js';

const { version } = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string };
// The CLI page as installed with the package (docs/ ships in it), wherever that is.
const CLI_DOCS = fileURLToPath(new URL('../../docs/cli.md', import.meta.url));

export function buildProgram(io: Io = processIo): Command {
  const program = new Command('leasehold')
    .description('Durable, fenced job leases on PostgreSQL: periodic jobs that never run twice at once.')
    .version(version)
    .exitOverride()
    .configureOutput({ writeOut: (text) => io.out(text), writeErr: (text) => io.err(text) })
    .addHelpText('after', `
Environment: DATABASE_URL (the database, unless --database-url), COLUMNS (the width of human output), LEASEHOLD_LOG_LEVEL.
Exit codes: 0 ok, 1 error, 2 usage, ${EXIT.badUrl} bad database URL, ${EXIT.auth} login refused, ${EXIT.noDatabase} no such database, ${EXIT.unavailable} database unreachable,
${EXIT.skipped} skipped (exec, run-now --wait), ${EXIT.lost} lease lost (exec), ${EXIT.noperm} missing grant, ${EXIT.schema} schema not migrated or too new.
Docs: ${CLI_DOCS}`);
  registerExec(program, io);
  registerWorker(program, io);
  registerStatus(program, io);
  registerSchedule(program, io);
  registerRuns(program, io);
  registerRelease(program, io);
  registerRunNow(program, io);
  registerBackfill(program, io);
  registerPause(program, io);
  registerMigrate(program, io);
  registerGrant(program, io);
  registerDashboard(program, io);
  registerDashboardUser(program, io);
  registerDemo(program, io);
  shortUsageErrors(program, io);
  return program;
}

/** A usage error prints the error and where to read more, not the whole help. */
function shortUsageErrors(command: Command, io: Io, path = 'leasehold'): void {
  command.configureOutput({
    writeOut: (text) => io.out(text),
    writeErr: (text) => io.err(text),
    outputError: (text, write) => write(`${text.trimEnd()}\nsee '${path} --help'\n`),
  });
  for (const sub of command.commands) shortUsageErrors(sub, io, `${path} ${sub.name()}`);
}

/** Parses argv and runs the command; usage errors exit 2. */
export async function main(argv: string[], io: Io = processIo): Promise<void> {
  const program = buildProgram(io);
  for (const command of program.commands) command.exitOverride();
  try {
    await program.parseAsync(argv);
  } catch (error) {
    if (error instanceof CommanderError) {
      io.exit(error.exitCode === 0 ? EXIT.ok : EXIT.usage);
      return;
    }
    throw error;
  }
}
