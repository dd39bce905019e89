// Drives the TypeScript fixtures in test/fixtures (holder.ts, scheduled-worker.ts) as child
// processes that speak JSON lines: send a command, await its answer, wait for an event, signal.
import { fileURLToPath } from 'node:url';
import { JsonLinesProcess } from './json-lines.js';

export type { Line } from './json-lines.js';

const HOLDER = fileURLToPath(new URL('../fixtures/holder.ts', import.meta.url));
/** test/fixtures/scheduled-worker.ts: a scheduler worker that reports runs and skips as JSON lines. */
export const SCHEDULED_WORKER = fileURLToPath(new URL('../fixtures/scheduled-worker.ts', import.meta.url));
const TSX = fileURLToPath(new URL('../../node_modules/tsx/dist/esm/index.mjs', import.meta.url));

export class HolderProcess extends JsonLinesProcess {
  /**
   * Starts a holder (or another fixture `script` that prints a ready line) and waits until it
   * is connected. `env` adds to the environment (e.g. LD_PRELOAD for libfaketime).
   */
  static async startFixture(databaseUrl: string, env: Record<string, string> = {}, script = HOLDER): Promise<HolderProcess> {
    return HolderProcess.start(process.execPath, ['--import', TSX, script], { DATABASE_URL: databaseUrl, ...env });
  }
}
