// `leasehold worker MODULE` loads jobs from ES modules and CommonJS alike, and a module it
// cannot use gets an error that says what to change.
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const TSX = fileURLToPath(new URL('../../node_modules/tsx/dist/esm/index.mjs', import.meta.url));
const LOADER = fileURLToPath(new URL('../fixtures/load-jobs.ts', import.meta.url));

type Loaded = { jobs?: Array<Record<string, unknown>>; handlers?: Record<string, string> | null; error?: string };

/** The CLI's loader on one module, in a separate Node process: resolves with what it loaded or rejects with its error. */
async function load(path: string): Promise<Loaded> {
  const { stdout } = await promisify(execFile)(process.execPath, ['--no-warnings', '--import', TSX, LOADER, path]);
  const result = JSON.parse(stdout) as Loaded;
  if (result.error !== undefined) throw new Error(result.error);
  return result;
}

async function loadJobs(path: string): Promise<Array<Record<string, unknown>>> {
  return (await load(path)).jobs ?? [];
}

const JOB = "{ name: 'nightly', every: '1h', handler: async () => {} }";
let commonjsDir: string;
let moduleDir: string;

beforeAll(async () => {
  // A default `npm init -y` project (CommonJS) and one with "type": "module".
  commonjsDir = await mkdtemp(join(tmpdir(), 'leasehold-cjs-'));
  moduleDir = await mkdtemp(join(tmpdir(), 'leasehold-esm-'));
  await writeFile(join(commonjsDir, 'package.json'), '{ "name": "app", "version": "1.0.0" }\n');
  await writeFile(join(moduleDir, 'package.json'), '{ "name": "app", "version": "1.0.0", "type": "module" }\n');
});
afterAll(async () => {
  await rm(commonjsDir, { recursive: true, force: true });
  await rm(moduleDir, { recursive: true, force: true });
});

async function write(dir: string, file: string, source: string): Promise<string> {
  const path = join(dir, file);
  await writeFile(path, source);
  return path;
}

describe('accepted shapes', () => {
  const cases: Array<[string, 'cjs' | 'esm', string, string]> = [
    ['module.exports = { jobs: [...] }', 'cjs', 'a.js', `module.exports = { jobs: [${JOB}] };`],
    ['module.exports = { jobs } (shorthand)', 'cjs', 'b.js', `const jobs = [${JOB}];\nmodule.exports = { jobs };`],
    ['exports.jobs = [...]', 'cjs', 'c.js', `exports.jobs = [${JOB}];`],
    ['module.exports = [...]', 'cjs', 'd.js', `module.exports = [${JOB}];`],
    ['a .cjs file in an ES module project', 'esm', 'e.cjs', `module.exports = { jobs: [${JOB}] };`],
    ['export const jobs', 'esm', 'f.js', `export const jobs = [${JOB}];`],
    ['export default [...]', 'esm', 'g.js', `export default [${JOB}];`],
    ['export default { jobs }', 'esm', 'h.js', `export default { jobs: [${JOB}] };`],
    ['a .mjs file in a CommonJS project', 'cjs', 'i.mjs', `export const jobs = [${JOB}];`],
  ];
  for (const [title, kind, file, source] of cases) {
    it(title, async () => {
      const path = await write(kind === 'cjs' ? commonjsDir : moduleDir, file, source);
      const jobs = await loadJobs(path);
      expect(jobs).toHaveLength(1);
      expect(jobs[0]).toEqual({ name: 'nightly', every: '1h', handler: 'function' });
    });
  }
});

describe('handlers of jobs defined as data', () => {
  const HANDLERS = "{ 'sync-customer': async () => {}, report: async () => {} }";
  const cases: Array<[string, 'cjs' | 'esm', string, string, number]> = [
    ['export const handlers (no jobs)', 'esm', 'hh1.js', `export const handlers = ${HANDLERS};`, 0],
    ['module.exports = { handlers } (no jobs)', 'cjs', 'hh2.js', `module.exports = { handlers: ${HANDLERS} };`, 0],
    ['export const jobs and handlers', 'esm', 'hh3.js', `export const jobs = [${JOB}];\nexport const handlers = ${HANDLERS};`, 1],
    ['export default { jobs, handlers }', 'esm', 'hh4.js', `export default { jobs: [${JOB}], handlers: ${HANDLERS} };`, 1],
  ];
  for (const [title, kind, file, source, jobCount] of cases) {
    it(title, async () => {
      const path = await write(kind === 'cjs' ? commonjsDir : moduleDir, file, source);
      const loaded = await load(path);
      expect(loaded.jobs).toHaveLength(jobCount);
      expect(loaded.handlers).toEqual({ 'sync-customer': 'function', report: 'function' });
    });
  }

  it('handlers that are not an object say so', async () => {
    const path = await write(moduleDir, 'bad-handlers.js', 'export const handlers = [async () => {}];');
    await expect(loadJobs(path)).rejects.toThrow(/handlers that are not an object of functions/);
  });
});

describe('errors say what to do', () => {
  it('a missing file', async () => {
    await expect(loadJobs(join(commonjsDir, 'nope.js'))).rejects.toThrow(/no such file: .*nope\.js/);
  });

  it('CommonJS in an ES module project', async () => {
    const path = await write(moduleDir, 'cjs-in-esm.js', `module.exports = { jobs: [${JOB}] };`);
    await expect(loadJobs(path)).rejects.toThrow(/module is not defined in ES module scope\. .*"type": "module".*rename it to \.cjs/);
  });

  it('a module without jobs names what it exports and the shapes it may use', async () => {
    const path = await write(commonjsDir, 'other.js', 'exports.tasks = [];');
    await expect(loadJobs(path)).rejects.toThrow(/exports no jobs and no handlers \(it exports: default, tasks\).*module\.exports = \{ jobs, handlers \}/);
  });

  it('an empty list', async () => {
    const path = await write(moduleDir, 'empty.js', 'export const jobs = [];');
    await expect(loadJobs(path)).rejects.toThrow(/empty list of jobs and no handlers/);
  });
});
