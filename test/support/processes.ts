// The TypeScript fixtures in test/fixtures (holder.ts, scheduled-worker.ts) as child processes
// that speak JSON lines (src/testing/json-lines.ts): send a command, await its answer, wait
// for an event, signal.
import { fileURLToPath } from 'node:url';
import { JsonLinesProcess, type Line } from '../../src/testing/json-lines.js';

export { JsonLinesProcess, type Line } from '../../src/testing/json-lines.js';

const HOLDER = fileURLToPath(new URL('../fixtures/holder.ts', import.meta.url));
/** test/fixtures/scheduled-worker.ts: a scheduler worker that reports runs and skips as JSON lines. */
export const SCHEDULED_WORKER = fileURLToPath(new URL('../fixtures/scheduled-worker.ts', import.meta.url));

/**
 * Starts a holder (or another fixture `script` that prints a ready line) and waits until it
 * is connected. `env` adds to the environment (e.g. fakeClockEnv() for libfaketime).
 */
export function startFixture(databaseUrl: string, env: Record<string, string> = {}, script = HOLDER): Promise<JsonLinesProcess> {
  return JsonLinesProcess.startScript(script, { DATABASE_URL: databaseUrl, ...env });
}

/**
 * The 'handler' lines (test/fixtures/request-worker.ts) of every process that match, in the
 * order the handlers started, whichever process ran them: the processes share this machine's
 * clock, and taking each process's lines in turn would list one worker's runs first.
 */
export function handlerLines(children: readonly JsonLinesProcess[], match: (l: Line) => boolean): Line[] {
  return children.flatMap((c) => c.lines.filter((l) => l.event === 'handler' && match(l))).sort((x, y) => Number(x.at) - Number(y.at));
}
