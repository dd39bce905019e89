// Builds the package: ES modules and declarations with tsc into dist/, then a CommonJS copy of
// the library (not the CLI, which is ES-only) into dist/cjs/ for require() on Node 20.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../', import.meta.url));
const require = createRequire(import.meta.url);
const dist = join(root, 'dist');
const cjs = join(dist, 'cjs');
// The command line and the demo run as ES modules only; they are not part of require('leasehold').
const esOnly = ['cli', 'demo'];

rmSync(dist, { recursive: true, force: true });

const tsc = spawnSync(process.execPath, [require.resolve('typescript/bin/tsc'), '-p', join(root, 'tsconfig.build.json')], {
  stdio: 'inherit',
});
if (tsc.status !== 0) process.exit(tsc.status ?? 1);

/** Files under `dir` (relative paths) whose name ends with `suffix`, outside the ES-only folders. */
function libraryFiles(dir, suffix) {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((file) => file.endsWith(suffix) && !esOnly.includes(file.split(sep)[0] ?? ''))
    .map((file) => join(dir, file));
}

const esbuild = await import('esbuild');
await esbuild.build({
  entryPoints: libraryFiles(join(root, 'src'), '.ts'),
  outbase: join(root, 'src'),
  outdir: cjs,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  sourcemap: true,
  sourcesContent: true,
  logLevel: 'warning',
  // import.meta does not exist in CommonJS; the one thing the library asks of it is its own URL.
  define: { 'import.meta.url': '__moduleUrl' },
  banner: { js: 'const __moduleUrl = require("node:url").pathToFileURL(__filename).href;' },
});
writeFileSync(join(cjs, 'package.json'), '{ "type": "commonjs" }\n');

// The same declarations describe the CommonJS build; inside dist/cjs they are read as CommonJS.
for (const file of libraryFiles(dist, '.d.ts')) {
  const rel = relative(dist, file);
  if (rel.startsWith(`cjs${sep}`)) continue;
  cpSync(file, join(cjs, rel));
}

// Every subpath the package exports (., ./testing, ./nestjs) must exist in both builds.
const { exports: subpaths } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
for (const [subpath, conditions] of Object.entries(subpaths)) {
  if (typeof conditions !== 'object') continue;
  for (const target of [conditions.import?.default, conditions.import?.types, conditions.require?.default, conditions.require?.types]) {
    if (target && !existsSync(join(root, target))) {
      console.error(`build: ${subpath} points to ${target}, which the build did not produce`);
      process.exit(1);
    }
  }
}
