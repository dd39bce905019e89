// The package as a new user gets it: `npm pack`, installed from the tarball into a fresh ES
// module project and a fresh CommonJS project (dependencies from the registry), a strict
// TypeScript file against the public API type-checked in both, the README's quick starts run
// as written, and the CLI run from the installed package.
import { execFile, spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freshDatabase } from '../support/db.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');
const execFileAsync = promisify(execFile);
/** execFile that fails with the command's output in the message (tsc reports on stdout). */
async function run(file: string, args: string[], options: { cwd: string; env?: NodeJS.ProcessEnv; maxBuffer?: number }) {
  try {
    return await execFileAsync(file, args, options);
  } catch (error) {
    const failed = error as Error & { stdout?: string; stderr?: string };
    failed.message += `\n${failed.stdout ?? ''}\n${failed.stderr ?? ''}`;
    throw failed;
  }
}
const NPM_QUIET = ['--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'];
const PACKAGE = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { exports: Record<string, string | { import: { types: string } }> };
/** The declaration file of each entry point (`./dist/index.d.ts`, …). */
const ENTRY_TYPES = Object.values(PACKAGE.exports).flatMap((target) => (typeof target === 'string' ? [] : [target.import.types]));

/** The README's fenced code blocks of one language, in order. */
function readmeBlocks(language: string): string[] {
  const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');
  return [...readme.matchAll(new RegExp('^```' + language + '\\n([\\s\\S]*?)^```$', 'gm'))].map((match) => match[1] ?? '');
}

// Uses the public API with the types a user would write down; strict, no `any`.
const TYPED_APP = `
import { createLeasehold, startWorker, InvalidArgumentError, type AcquireResult, type JobOptions, type RunResult, type Worker } from 'leasehold';
import { LeaseholdError, SchemaVersionError } from 'leasehold/errors';
import { migrations } from 'leasehold/schema';
import type { RunRequest } from 'leasehold/control';
import type { JobStatus } from 'leasehold/monitor';
import type { DashboardOptions } from 'leasehold/dashboard';
import type { Pool } from 'pg';

// the entry points' types resolve (as ES modules and as CommonJS)
export type Reads = { request: RunRequest; status: JobStatus; dashboard: DashboardOptions };

export async function main(url: string): Promise<string> {
  const leasehold = await createLeasehold({ connectionString: url, holder: 'typed-app' });
  const pool: Pool = leasehold.pool;
  const ran: RunResult<number> = await leasehold.run('typed', { ttl: '10s' }, async (ctx) => ctx.fence);
  const attempt: AcquireResult = await leasehold.acquire('typed', { ttl: '10s' });
  if (attempt.acquired) await attempt.lease.release();
  const job: JobOptions = { name: 'typed-job', every: '1h', handler: async (ctx) => void ctx.signal };
  const worker: Worker = await startWorker({ connectionString: url, jobs: [job] });
  await worker.stop();
  let refused = '';
  try {
    await leasehold.acquire('', { ttl: '10s' });
  } catch (error) {
    // one class, whichever entry point names it
    if (error instanceof InvalidArgumentError && error instanceof LeaseholdError && !(error instanceof SchemaVersionError) && migrations().length > 0) refused = error.code;
  }
  const { rows } = await pool.query<{ one: number }>('select 1 as one');
  await leasehold.close();
  return [ran.ran ? ran.value : 'skipped', attempt.acquired, refused, rows[0]?.one].join(' ');
}
`;

const TSCONFIG = {
  compilerOptions: {
    target: 'ES2022',
    module: 'NodeNext',
    moduleResolution: 'NodeNext',
    strict: true,
    noUncheckedIndexedAccess: true,
    outDir: 'out',
    types: ['node'],
  },
};

let work: string;
let tarball: string;
let esmDir: string;
let cjsDir: string;
let url: string;
const env = (): NodeJS.ProcessEnv => ({ ...process.env, DATABASE_URL: url, NO_COLOR: '1', LEASEHOLD_LOG_LEVEL: 'warn' });

async function leasehold(cwd: string, args: string[], options: { allowFailure?: boolean } = {}) {
  const bin = join(cwd, 'node_modules/.bin/leasehold');
  try {
    const { stdout, stderr } = await run(bin, args, { cwd, env: env() });
    return { code: 0, stdout, stderr };
  } catch (error) {
    const failed = error as { code?: number; stdout?: string; stderr?: string };
    if (!options.allowFailure) throw error;
    return { code: failed.code ?? -1, stdout: failed.stdout ?? '', stderr: failed.stderr ?? '' };
  }
}

beforeAll(async () => {
  url = await freshDatabase();
  work = await mkdtemp(join(tmpdir(), 'leasehold-package-'));
  // `npm pack` runs the `prepare` script, which builds dist/ (ES modules and CommonJS).
  const { stdout } = await run('npm', ['pack', '--pack-destination', work, '--json', '--loglevel=error'], { cwd: ROOT, maxBuffer: 16 << 20 });
  const [packed] = JSON.parse(stdout) as Array<{ filename: string }>;
  tarball = join(work, packed!.filename);
  esmDir = join(work, 'esm-app');
  cjsDir = join(work, 'cjs-app');
  await mkdir(esmDir);
  await mkdir(cjsDir);
  // What `npm init -y` writes: no "type", so CommonJS; the other project says "type": "module".
  await writeFile(join(cjsDir, 'package.json'), JSON.stringify({ name: 'cjs-app', version: '1.0.0', private: true }));
  await writeFile(join(esmDir, 'package.json'), JSON.stringify({ name: 'esm-app', version: '1.0.0', private: true, type: 'module' }));
  // @types/node for `process`, as any TypeScript project on Node has.
  await Promise.all([esmDir, cjsDir].map((dir) => run('npm', ['install', tarball, '@types/node@20', ...NPM_QUIET], { cwd: dir })));
}, 240_000);

afterAll(async () => {
  if (work) await rm(work, { recursive: true, force: true });
});

describe('the tarball', () => {
  it('holds both builds with their declarations; the ES build has maps with their sources, the CommonJS copy none', async () => {
    const installed = join(esmDir, 'node_modules/leasehold');
    for (const file of ['dist/index.js', 'dist/index.d.ts', 'dist/cjs/index.js', 'dist/cjs/index.d.ts', 'dist/cjs/testing.js', 'dist/nestjs/index.js', 'dist/nestjs/index.d.ts', 'dist/cjs/nestjs/index.js', 'dist/cjs/nestjs/index.d.ts', 'dist/cli/main.js', 'sql']) {
      expect(existsSync(join(installed, file)), file).toBe(true);
    }
    expect(JSON.parse(readFileSync(join(installed, 'dist/cjs/package.json'), 'utf8'))).toEqual({ type: 'commonjs' });
    expect(existsSync(join(installed, 'src'))).toBe(false);
    const files = await readdir(join(installed, 'dist'), { recursive: true });
    const maps = files.filter((file) => file.endsWith('.map'));
    // one map for each ES module (each with its sources: the package's only copy of them)
    expect(maps.sort()).toEqual(files.filter((file) => file.endsWith('.js') && !file.startsWith('cjs')).map((file) => `${file}.map`).sort());
    for (const map of maps) {
      const parsed = JSON.parse(readFileSync(join(installed, 'dist', map), 'utf8')) as { sources: string[]; sourcesContent?: unknown[] };
      expect(parsed.sourcesContent?.length, map).toBe(parsed.sources.length);
    }
  });

  it('holds the Prometheus rules, the Grafana dashboard and the Kubernetes examples', () => {
    const installed = join(esmDir, 'node_modules/leasehold');
    for (const file of ['deploy/prometheus/leasehold.rules.yml', 'deploy/grafana/leasehold-dashboard.json', 'examples/kubernetes/worker-deployment.yaml', 'examples/kubernetes/cronjob.yaml', 'dist/opentelemetry.js', 'dist/cjs/opentelemetry.js', 'dist/opentelemetry.d.ts']) {
      expect(existsSync(join(installed, file)), file).toBe(true);
    }
  });

  it('holds every file that the README and docs link to', () => {
    const installed = join(esmDir, 'node_modules/leasehold');
    const pages = ['README.md', ...readdirSync(join(installed, 'docs')).filter((page) => page.endsWith('.md')).map((page) => `docs/${page}`)];
    const missing: string[] = [];
    for (const page of pages) {
      const text = readFileSync(join(installed, page), 'utf8');
      for (const [, target] of text.matchAll(/\]\(([^)#\s]+)(?:#[^)]*)?\)/g)) {
        if (!target || /^[a-z]+:/.test(target)) continue;
        if (!existsSync(join(installed, page, '..', target))) missing.push(`${page} -> ${target}`);
      }
    }
    expect(missing).toEqual([]);
  });

  it('public declarations reach no `any` and nothing of the CLI or demo, and are the only ones shipped', () => {
    const dist = join(esmDir, 'node_modules/leasehold/dist');
    // Every declaration file reachable from the entry points.
    const reached = new Set<string>();
    const queue = ENTRY_TYPES.map((types) => types.replace(/^\.\/dist\//, ''));
    while (queue.length > 0) {
      const file = queue.pop()!;
      if (reached.has(file)) continue;
      reached.add(file);
      const text = readFileSync(join(dist, file), 'utf8');
      for (const [, target] of text.matchAll(/(?:from |import\()['"](\.[^'"]+)\.js['"]/g)) queue.push(join(file, '..', `${target}.d.ts`));
    }
    expect(reached.size).toBeGreaterThan(10);
    // no other declarations are shipped, and the CommonJS build has the same ones
    const declarations = (base: string) => readdirSync(base, { recursive: true, encoding: 'utf8' }).filter((file) => file.endsWith('.d.ts') && !file.startsWith('cjs')).sort();
    expect(declarations(dist)).toEqual([...reached].sort());
    expect(declarations(join(dist, 'cjs'))).toEqual([...reached].sort());
    for (const file of reached) {
      expect(file, file).not.toMatch(/^(cli|demo)\//);
      const text = readFileSync(join(dist, file), 'utf8');
      expect(text, file).not.toMatch(/[:<,(|]\s*any\b/);
    }
  });
});

describe('every entry point', () => {
  // leasehold/nestjs and leasehold/opentelemetry need their optional peers: tested below
  const plain = Object.keys(PACKAGE.exports).filter((subpath) => !['./package.json', './nestjs', './opentelemetry'].includes(subpath));

  it('loads with import and with require, with the same names and the same classes', async () => {
    const specifiers = plain.map((subpath) => subpath.replace(/^\./, 'leasehold'));
    const list = `const s = ${JSON.stringify(specifiers)};`;
    const print = 'console.log(JSON.stringify(Object.fromEntries(s.map((x, i) => [x, Object.keys(m[i]).sort()]))));';
    const esm = await run(process.execPath, ['--input-type=module', '-e', `${list} const m = await Promise.all(s.map((x) => import(x))); ${print}`], { cwd: esmDir });
    const cjs = await run(process.execPath, ['-e', `${list} const m = s.map((x) => require(x)); ${print}`], { cwd: cjsDir });
    const loaded = JSON.parse(esm.stdout) as Record<string, string[]>;
    expect(Object.keys(loaded).sort()).toEqual([...specifiers].sort());
    for (const [specifier, keys] of Object.entries(loaded)) expect(keys.length, specifier).toBeGreaterThan(0);
    expect(JSON.parse(cjs.stdout)).toEqual(loaded);
    // leasehold/errors and the root hand out one class, in either build
    const same = "require('leasehold').LeaseLostError === require('leasehold/errors').LeaseLostError";
    expect((await run(process.execPath, ['-e', `console.log(${same})`], { cwd: cjsDir })).stdout.trim()).toBe('true');
    const sameEsm = "const [a, b] = await Promise.all([import('leasehold'), import('leasehold/errors')]); console.log(a.LeaseLostError === b.LeaseLostError)";
    expect((await run(process.execPath, ['--input-type=module', '-e', sameEsm], { cwd: esmDir })).stdout.trim()).toBe('true');
  });
});

describe('an ES module project', () => {
  it('type-checks a strict TypeScript file against the public API and runs it', async () => {
    await writeFile(join(esmDir, 'app.ts'), TYPED_APP);
    await writeFile(join(esmDir, 'main.ts'), "import { main } from './app.js';\nconsole.log(await main(process.env.DATABASE_URL!));\n");
    // The README's quick start, type-checked in the same strict run.
    const [quickStart] = readmeBlocks('ts');
    expect(quickStart).toContain("from 'leasehold'");
    await writeFile(join(esmDir, 'quick-start.ts'), quickStart!);
    await writeFile(join(esmDir, 'tsconfig.json'), JSON.stringify({ ...TSCONFIG, files: ['app.ts', 'main.ts', 'quick-start.ts'] }));
    await run(process.execPath, [TSC, '-p', '.'], { cwd: esmDir });
    const { stdout } = await run(process.execPath, ['out/main.js'], { cwd: esmDir, env: env() });
    expect(stdout.trim()).toMatch(/^\d+ true INVALID_ARGUMENT 1$/);
  });

  it("runs the README's ES module quick start as written (type-checked above)", async () => {
    const first = await run(process.execPath, ['out/quick-start.js'], { cwd: esmDir, env: env() });
    expect(first.stdout).toMatch(/^report written under fence \d+$/m);
  });

  it('imports leasehold/testing', async () => {
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', "import * as t from 'leasehold/testing'; console.log(Object.keys(t).sort().join(','))"], { cwd: esmDir });
    expect(stdout.trim()).toBe('createTestDatabase,freePort,startEmbeddedPostgres');
  });
});

describe('leasehold/opentelemetry', () => {
  it('the main entry, in both builds, imports nothing of @opentelemetry', async () => {
    const installed = join(esmDir, 'node_modules/leasehold/dist');
    for (const [entry, pattern] of [
      ['index.js', /from '(\.[^']+)'/g],
      ['cjs/index.js', /require\("(\.[^"]+)"\)/g],
    ] as const) {
      const seen = new Set<string>();
      const queue: string[] = [entry];
      while (queue.length > 0) {
        const file = queue.pop()!;
        if (seen.has(file)) continue;
        seen.add(file);
        const text = readFileSync(join(installed, file), 'utf8');
        expect(text, file).not.toContain('@opentelemetry');
        for (const [, target] of text.matchAll(pattern)) queue.push(join(file, '..', target!.endsWith('.js') ? target! : `${target}.js`));
      }
      expect(seen.size, entry).toBeGreaterThan(20);
    }
    // (prom-client depends on @opentelemetry/api itself, so it is usually installed anyway: what
    // matters is that leasehold does not load it unless leasehold/opentelemetry is imported)
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', "import { createLeasehold } from 'leasehold'; console.log(typeof createLeasehold)"], { cwd: esmDir });
    expect(stdout.trim()).toBe('function');
  });

  it('with @opentelemetry/api installed, imports and requires instrument()', { timeout: 120_000 }, async () => {
    await Promise.all([esmDir, cjsDir].map((dir) => run('npm', ['install', '@opentelemetry/api@1.9', ...NPM_QUIET], { cwd: dir })));
    const esm = await run(process.execPath, ['--input-type=module', '-e', "import { instrument } from 'leasehold/opentelemetry'; console.log(typeof instrument)"], { cwd: esmDir });
    expect(esm.stdout.trim()).toBe('function');
    const cjs = await run(process.execPath, ['-e', "console.log(typeof require('leasehold/opentelemetry').instrument)"], { cwd: cjsDir });
    expect(cjs.stdout.trim()).toBe('function');
  });
});

describe('leasehold/nestjs', () => {
  const NEST = ['@nestjs/common@^12', '@nestjs/core@^12', '@nestjs/schedule@^12', 'reflect-metadata@^0.2', 'rxjs@^7'];
  const EXPORTS = 'LEASEHOLD_CLIENT,LeaseContext,Leased,LeaseholdJob,LeaseholdModule,nestLogger';

  it('the main entry loads no Nest package, in either build', async () => {
    // CommonJS: nothing of Nest in the module cache after require('leasehold') (Nest is not even installed here)
    const script = "require('leasehold'); console.log(Object.keys(require.cache).filter((k) => /@nestjs|reflect-metadata|rxjs/.test(k)).length)";
    expect((await run(process.execPath, ['-e', script], { cwd: cjsDir })).stdout.trim()).toBe('0');
    // ES modules: no file reachable from dist/index.js imports one
    const dist = join(cjsDir, 'node_modules/leasehold/dist');
    const reached = new Set<string>();
    const queue = ['index.js'];
    while (queue.length > 0) {
      const file = queue.pop()!;
      if (reached.has(file)) continue;
      reached.add(file);
      const text = readFileSync(join(dist, file), 'utf8');
      expect(text, file).not.toMatch(/from '(@nestjs|reflect-metadata|rxjs)/);
      for (const [, target] of text.matchAll(/from '(\.[^']+\.js)'/g)) queue.push(join(file, '..', target!));
    }
    expect(reached.size).toBeGreaterThan(10);
  });

  it('without Nest installed, importing it names the missing package', async () => {
    const failed = await run(process.execPath, ['-e', "require('leasehold/nestjs')"], { cwd: cjsDir }).catch((error: Error) => error);
    expect(String(failed)).toMatch(/@nestjs\/common|reflect-metadata/);
  });

  it('with Nest from the registry, import and require both give the module and decorators', { timeout: 180_000 }, async () => {
    await run('npm', ['install', ...NEST, ...NPM_QUIET], { cwd: esmDir });
    const esm = await run(process.execPath, ['--input-type=module', '-e', "import * as n from 'leasehold/nestjs'; console.log(Object.keys(n).sort().join(','))"], { cwd: esmDir });
    expect(esm.stdout.trim()).toBe(EXPORTS);
    const cjs = await run(process.execPath, ['-e', "console.log(Object.keys(require('leasehold/nestjs')).sort().join(','))"], { cwd: esmDir });
    expect(cjs.stdout.trim()).toBe(EXPORTS);
    // the types resolve for both conditions, strict
    const typed = "import { LeaseholdModule, Leased, type LeasedContext } from 'leasehold/nestjs';\nimport type { DynamicModule } from '@nestjs/common';\nexport const m: DynamicModule = LeaseholdModule.forRoot({ holder: 'typed' });\nexport const d: MethodDecorator = Leased({ ttl: '1m' });\nexport const use = (ctx: LeasedContext): string => ctx.idempotencyKey;\n";
    await writeFile(join(esmDir, 'nest-typed.ts'), typed);
    await writeFile(join(esmDir, 'tsconfig.nest.json'), JSON.stringify({ ...TSCONFIG, files: ['nest-typed.ts'] }));
    await run(process.execPath, [TSC, '-p', 'tsconfig.nest.json', '--noEmit'], { cwd: esmDir });
  });
});

describe('a CommonJS project (npm init)', () => {
  it("runs the README's CommonJS example as written", async () => {
    const example = readmeBlocks('js').find((block) => block.includes("require('leasehold')"));
    expect(example).toBeDefined();
    await writeFile(join(cjsDir, 'example.js'), example!);
    const { stdout, stderr } = await run(process.execPath, ['example.js'], { cwd: cjsDir, env: env() });
    expect(stdout, stderr).toMatch(/^imported under fence \d+$/m);
  });

  it('require() gives the same classes as the typed errors it throws, and leasehold/testing', async () => {
    const script = `
      const leasehold = require('leasehold');
      const testing = require('leasehold/testing');
      let code = '';
      try { leasehold.parseSchedule({ every: 'soon' }); } catch (e) { code = (e instanceof leasehold.InvalidArgumentError) + ':' + e.code; }
      console.log(typeof leasehold.createLeasehold, typeof testing.startEmbeddedPostgres, code, require('leasehold/schema').migrations().length > 0);
    `;
    const { stdout } = await run(process.execPath, ['-e', script], { cwd: cjsDir });
    expect(stdout.trim()).toBe('function function true:INVALID_ARGUMENT true');
  });

  it('type-checks the strict TypeScript file as CommonJS (module nodenext) and runs it', async () => {
    await writeFile(join(cjsDir, 'app.ts'), TYPED_APP);
    await writeFile(join(cjsDir, 'main.ts'), "import { main } from './app';\nmain(process.env.DATABASE_URL!).then((line) => console.log(line));\n");
    await writeFile(join(cjsDir, 'tsconfig.json'), JSON.stringify({ ...TSCONFIG, files: ['app.ts', 'main.ts'] }));
    await run(process.execPath, [TSC, '-p', '.'], { cwd: cjsDir });
    expect(readFileSync(join(cjsDir, 'out/app.js'), 'utf8')).toContain('require("leasehold")');
    const { stdout } = await run(process.execPath, ['out/main.js'], { cwd: cjsDir, env: env() });
    expect(stdout.trim()).toMatch(/^\d+ true INVALID_ARGUMENT 1$/);
  });
});

describe('the installed command', () => {
  it('--help ends with the installed docs page', async () => {
    const { stdout } = await leasehold(cjsDir, ['--help']);
    const docs = /^Docs: (.+)$/m.exec(stdout)?.[1];
    expect(docs).toBe(join(cjsDir, 'node_modules/leasehold/docs/cli.md'));
    expect(existsSync(docs!)).toBe(true);
  });

  it('exec runs a command under a lease, and status shows the jobs', async () => {
    const exec = await leasehold(cjsDir, ['exec', '--name', 'package-exec', '--ttl', '30s', '--', process.execPath, '-e', "console.log('inside')"]);
    expect(exec.stdout).toContain('inside');
    const status = await leasehold(cjsDir, ['status']);
    expect(status.stdout).toContain('package-exec');
  });

  it('worker runs the jobs of a CommonJS module (module.exports = { jobs }) until SIGTERM', { timeout: 60_000 }, async () => {
    await writeFile(
      join(cjsDir, 'jobs.js'),
      "module.exports = { jobs: [{ name: 'package-worker', every: '1s', ttl: '10s', handler: async (ctx) => console.log('ran fence ' + ctx.fence) }] };\n",
    );
    const worker = spawn(join(cjsDir, 'node_modules/.bin/leasehold'), ['worker', './jobs.js'], { cwd: cjsDir, env: env(), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    worker.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    worker.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => worker.on('exit', (code) => resolve(code)));
    const deadline = Date.now() + 30_000;
    while (!/ran fence \d+/.test(output) && Date.now() < deadline && worker.exitCode === null) await new Promise((r) => setTimeout(r, 200));
    expect(output).toMatch(/ran fence \d+/);
    worker.kill('SIGTERM');
    expect(await exited, output).toBe(0);
  });

  it('worker names what a module without jobs exports, and exits 2', async () => {
    await writeFile(join(cjsDir, 'no-jobs.js'), 'exports.tasks = [];\n');
    const noJobs = await leasehold(cjsDir, ['worker', './no-jobs.js'], { allowFailure: true });
    expect(noJobs.code).toBe(2);
    expect(noJobs.stderr).toMatch(/exports no jobs and no handlers \(it exports: default, tasks\)/);
  });
});
