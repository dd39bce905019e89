// Builds the package: ES modules and declarations with tsc into dist/, then a CommonJS copy of
// the library (not the CLI, which is ES-only) into dist/cjs/ for require() on Node 20.
// What it ships, and why (package size):
// - the ES build's source maps embed their sources, so a debugger or `node --enable-source-maps`
//   shows the TypeScript with no other file; the sources are in the package once, there.
// - the CommonJS copy has no maps: it is esbuild's file-by-file transpile of the same modules,
//   at the same paths under dist/cjs/, with their names; a second set of maps would embed every
//   source a second time.
// - declarations only for the modules an entry point's types reach (in both builds): the others
//   (the CLI, the demo, internals no public type names) are never read by a compiler.
// - in dist/cjs/ only the modules that an entry point of the package loads.
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, posix, relative, sep } from 'node:path';
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

const ts = require('typescript');
const { exports: subpaths } = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const targets = Object.values(subpaths).filter((conditions) => typeof conditions === 'object');

/**
 * The files under `dir` that `starts` (paths relative to it) reach through relative imports,
 * `import type` and `import()` included; `resolve` turns an import's path into a file's.
 */
function reached(dir, starts, resolve) {
  const seen = new Set();
  const queue = [...starts];
  while (queue.length > 0) {
    const file = queue.pop();
    if (seen.has(file)) continue;
    seen.add(file);
    for (const { fileName } of ts.preProcessFile(readFileSync(join(dir, file), 'utf8'), true, true).importedFiles) {
      if (fileName.startsWith('.')) queue.push(resolve(posix.normalize(posix.join(posix.dirname(file), fileName))));
    }
  }
  return seen;
}

// Declarations: those the entry points' types reach, the rest removed.
const declarations = reached(dist, targets.map((conditions) => relative(dist, join(root, conditions.import.types)).split(sep).join('/')), (path) => path.replace(/\.js$/, '.d.ts'));
for (const file of readdirSync(dist, { recursive: true, encoding: 'utf8' })) {
  if (file.endsWith('.d.ts') && !declarations.has(file.split(sep).join('/'))) rmSync(join(dist, file));
}

const src = join(root, 'src');
const library = reached(src, targets.map((conditions) => relative(cjs, join(root, conditions.require.default)).split(sep).join('/').replace(/\.js$/, '.ts')), (path) => path.replace(/\.js$/, '.ts'));
const esbuild = await import('esbuild');
await esbuild.build({
  entryPoints: [...library].filter((file) => !esOnly.includes(file.split('/')[0] ?? '')).map((file) => join(src, file)),
  outbase: src,
  outdir: cjs,
  format: 'cjs',
  platform: 'node',
  target: 'node20',
  logLevel: 'warning',
  // import.meta does not exist in CommonJS; the one thing the library asks of it is its own URL.
  define: { 'import.meta.url': '__moduleUrl' },
  banner: { js: 'const __moduleUrl = require("node:url").pathToFileURL(__filename).href;' },
});
writeFileSync(join(cjs, 'package.json'), '{ "type": "commonjs" }\n');

// The same declarations describe the CommonJS build; inside dist/cjs they are read as CommonJS.
for (const file of declarations) {
  mkdirSync(dirname(join(cjs, file)), { recursive: true });
  cpSync(join(dist, file), join(cjs, file));
}

// Every subpath the package exports (., ./testing, ./nestjs, …) must exist in both builds.
for (const [subpath, conditions] of Object.entries(subpaths)) {
  if (typeof conditions !== 'object') continue;
  for (const target of [conditions.import?.default, conditions.import?.types, conditions.require?.default, conditions.require?.types]) {
    if (target && !existsSync(join(root, target))) {
      console.error(`build: ${subpath} points to ${target}, which the build did not produce`);
      process.exit(1);
    }
  }
}
