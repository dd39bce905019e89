// Loads what `leasehold worker MODULE` runs: jobs defined in code (`export const jobs`,
// `export default [...]`), handlers of jobs defined as data (`export const handlers = { name:
// fn }`), or both. ES modules or CommonJS (`module.exports = { jobs, handlers }`,
// `exports.jobs = ...`, `module.exports = [...]`), .ts with tsx installed; every way this can
// fail says what to change.
import { existsSync } from 'node:fs';
import { extname, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { DataJobHandler } from '../worker/job-feed.js';
import type { JobDefinition, JobOptions } from '../job/job.js';
import { CliError } from './context.js';
import { EXIT } from './exit-codes.js';

const SHAPES =
  'export const jobs = [...] and/or export const handlers = { name: async (ctx) => ... } (ES module), ' +
  'or module.exports = { jobs, handlers } (CommonJS)';

export interface WorkerModule {
  jobs: Array<JobOptions | JobDefinition>;
  /** Handlers of jobs defined as data (leasehold schedule define --handler NAME); undefined when the module exports none. */
  handlers: Record<string, DataJobHandler> | undefined;
}

export async function loadJobs(modulePath: string): Promise<WorkerModule> {
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
  const exported = module.default && typeof module.default === 'object' && !Array.isArray(module.default) ? (module.default as Record<string, unknown>) : {};
  const jobs = module.jobs ?? exported.jobs ?? (Array.isArray(module.default) ? module.default : undefined);
  const handlers = module.handlers ?? exported.handlers;
  const found = Object.keys(module).filter((name) => name !== '__esModule');
  if (jobs !== undefined && !Array.isArray(jobs)) throw new CliError(`${modulePath} exports jobs that are not a list; write ${SHAPES}`, EXIT.usage);
  if (handlers !== undefined && (handlers === null || typeof handlers !== 'object' || Array.isArray(handlers))) {
    throw new CliError(`${modulePath} exports handlers that are not an object of functions; write ${SHAPES}`, EXIT.usage);
  }
  const handlerCount = handlers ? Object.keys(handlers).length : 0;
  if ((jobs?.length ?? 0) === 0 && handlerCount === 0) {
    throw new CliError(
      jobs === undefined && handlers === undefined
        ? `${modulePath} exports no jobs and no handlers (it exports: ${found.length ? found.join(', ') : 'nothing'}); write ${SHAPES}, each job { name, cron | every, handler }`
        : `${modulePath} exports an empty list of jobs and no handlers`,
      EXIT.usage,
    );
  }
  return { jobs: (jobs ?? []) as Array<JobOptions | JobDefinition>, handlers: handlerCount > 0 ? (handlers as Record<string, DataJobHandler>) : undefined };
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
