// Loads the jobs for `leasehold worker MODULE`. The module may be an ES module
// (`export const jobs`, `export default [...]`) or CommonJS (`module.exports = { jobs }`,
// `exports.jobs = ...`, `module.exports = [...]`), .ts with tsx installed; every way this can
// fail says what to change.
import { existsSync } from 'node:fs';
import { extname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { JobDefinition, JobOptions } from '../worker/job.js';
import { CliError } from './context.js';
import { EXIT } from './exit-codes.js';

const SHAPES = 'export const jobs = [...] (ES module) or module.exports = { jobs: [...] } (CommonJS)';

export async function loadJobs(modulePath: string): Promise<Array<JobOptions | JobDefinition>> {
  const absolute = resolve(modulePath);
  if (!existsSync(absolute)) throw new CliError(`no such file: ${absolute}`, EXIT.usage);
  if (/\.[cm]?ts$/.test(absolute)) {
    try {
      const api = (await import('tsx/esm/api' as string)) as { register(): void };
      api.register();
    } catch {
      throw new CliError(`loading ${modulePath} needs tsx: npm install -D tsx (or compile it to .js)`, EXIT.usage);
    }
  }
  let module: Record<string, unknown>;
  try {
    module = (await import(pathToFileURL(absolute).href)) as Record<string, unknown>;
  } catch (error) {
    throw new CliError(`could not load ${modulePath}: ${describeLoadError(error, absolute)}`, EXIT.usage);
  }
  // A CommonJS module arrives as `default` (module.exports), its statically visible names beside it.
  const fromDefault = module.default && typeof module.default === 'object' ? (module.default as Record<string, unknown>).jobs : undefined;
  const jobs = module.jobs ?? fromDefault ?? module.default;
  if (!Array.isArray(jobs)) {
    const found = Object.keys(module).filter((name) => name !== '__esModule');
    throw new CliError(
      `${modulePath} exports no list of jobs (it exports: ${found.length ? found.join(', ') : 'nothing'}); write ${SHAPES}, each job { name, cron | every, handler }`,
      EXIT.usage,
    );
  }
  if (jobs.length === 0) throw new CliError(`${modulePath} exports an empty list of jobs`, EXIT.usage);
  return jobs as Array<JobOptions | JobDefinition>;
}

/** The load error's message, with what to do for the two module-format mix-ups. */
function describeLoadError(error: unknown, file: string): string {
  // Node's own advice, when it gives some, follows on later lines: ours replaces it.
  const message = (error instanceof Error ? error.message : String(error)).split('\n')[0] ?? '';
  const extension = extname(file);
  if (error instanceof SyntaxError && /\b(export|import)\b/.test(message)) {
    return `${message}. The file uses ES module syntax but is loaded as CommonJS: rename it to .mjs, add "type": "module" to the nearest package.json, or use module.exports = { jobs }`;
  }
  if (error instanceof ReferenceError && /\b(require|module|exports) is not defined\b/.test(message)) {
    return `${message}. The file uses CommonJS but is loaded as an ES module${extension === '.js' ? ' (the nearest package.json says "type": "module")' : ''}: rename it to .cjs, or use export const jobs = [...]`;
  }
  return message;
}
