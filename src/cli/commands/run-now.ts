// leasehold run-now JOB --by NAME [--wait]: one extra run of a job, now, subject to its overlap
// policy (src/control/manual-runs.ts; the workers with a handler for the job run it).
import type { Command } from 'commander';
import { request as requestStatus, runNow, waitForRequest, type RunRequest } from '../../control/manual-runs.js';
import { REQUEST_WAIT_DEFAULTS } from '../../lease/defaults.js';
import { databaseUrl, openDatabase, report, type Io } from '../context.js';
import { shown } from '../defaults.js';
import { EXIT } from '../exit-codes.js';
import { inert } from '../format.js';

export function registerRunNow(program: Command, io: Io): void {
  program
    .command('run-now')
    .alias('trigger')
    .description('run a job once now, besides its schedule (subject to its overlap policy)')
    .argument('<job>', 'job name')
    .requiredOption('--by <name>', 'who asks (recorded with the run and in leasehold.actions)')
    .option('--wait', 'wait for the run to end; exit 0 if it succeeded, 1 if not, 75 if it was skipped')
    .option('--timeout <duration>', 'longest to wait with --wait', shown(REQUEST_WAIT_DEFAULTS.timeout))
    .option('--json', 'print JSON')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .action(async (job: string, options: { by: string; wait?: boolean; timeout: string; json?: boolean; databaseUrl?: string }) => {
      try {
        const db = await openDatabase(databaseUrl(options.databaseUrl));
        try {
          const id = await runNow(db, job, { by: options.by });
          if (!options.wait) {
            const requested = await requestStatus(db, id);
            if (options.json) io.out(JSON.stringify(requested));
            else io.out(inert(`requested run now ${id} of "${job}"; \`leasehold run-now ${job} --by … --wait\` waits for a run, \`leasehold runs ${job}\` shows it`));
            io.exit(EXIT.ok);
            return;
          }
          const result = await waitForRequest(db, id, { timeout: options.timeout });
          if (options.json) io.out(JSON.stringify(result));
          else io.out(inert(describe(result)));
          io.exit(exitCode(result));
        } finally {
          await db.pool.end();
        }
      } catch (error) {
        report(io, error, options.json === true);
      }
    });
}

function exitCode(request: RunRequest): number {
  if (request.state === 'skipped') return EXIT.skipped;
  return request.state === 'done' && request.outcome === 'succeeded' ? EXIT.ok : EXIT.error;
}

function describe(request: RunRequest): string {
  const what = `run now ${request.id} of "${request.job}"`;
  switch (request.state) {
    case 'skipped':
      return `${what} skipped: the lease was held by ${request.skippedFor?.holder ?? 'another run'} (fence ${request.skippedFor?.fence ?? '?'}) and the job's overlap policy is skip`;
    case 'done': {
      const seconds = request.startedAt && request.finishedAt ? ` in ${((request.finishedAt.getTime() - request.startedAt.getTime()) / 1000).toFixed(1)} s` : '';
      return `${what}: ${request.outcome ?? 'ended'} on ${request.decidedBy ?? '?'} (fence ${request.fence ?? '?'})${seconds}${request.error ? `: ${request.error}` : ''}`;
    }
    case 'claimed':
      return `${what} is still running on ${request.decidedBy ?? '?'} (fence ${request.fence ?? '?'}); stopped waiting`;
    default:
      return `${what} is still pending (no worker with a handler for the job took it yet, or it waits for the lease); stopped waiting`;
  }
}
