// The TypeScript in docs/integrations.md type-checks, strict, against the sources (as
// `leasehold` and its entry points), with the scheduler packages it names: the NestJS
// examples with experimentalDecorators as Nest projects compile, the others as they are.
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const doc = readFileSync(join(ROOT, 'docs/integrations.md'), 'utf8');

/** Each entry point of package.json's "exports" (`leasehold`, `leasehold/monitor`, …) as its source file, for tsconfig `paths`. */
const ENTRY_SOURCES = Object.fromEntries(
  Object.entries(JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')).exports as Record<string, string | { import: { default: string } }>)
    .filter((entry): entry is [string, { import: { default: string } }] => typeof entry[1] !== 'string')
    .map(([subpath, target]) => [subpath.replace(/^\./, 'leasehold'), [target.import.default.replace(/^\.\/dist\//, '../../src/').replace(/\.js$/, '.ts')]]),
);

/** The ```ts blocks of the section under `## heading`. */
function blocks(heading: string): string[] {
  const start = doc.indexOf(`\n## ${heading}\n`);
  const end = doc.indexOf('\n## ', start + 1);
  const section = doc.slice(start, end === -1 ? undefined : end);
  return [...section.matchAll(/^```ts\n([\s\S]*?)^```$/gm)].map((m) => m[1] ?? '');
}

async function typeCheck(files: Record<string, string>, decorators: boolean): Promise<void> {
  const dir = await mkdtemp(join(ROOT, 'test', '.docs-check-'));
  try {
    for (const [name, text] of Object.entries(files)) await writeFile(join(dir, name), text);
    const tsconfig = {
      extends: '../../tsconfig.json',
      compilerOptions: {
        noEmit: true,
        experimentalDecorators: decorators,
        paths: ENTRY_SOURCES,
      },
      include: [],
      files: Object.keys(files),
    };
    await writeFile(join(dir, 'tsconfig.json'), JSON.stringify(tsconfig));
    await promisify(execFile)(process.execPath, [join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', dir], { cwd: ROOT }).catch((error: Error & { stdout?: string }) => {
      throw new Error(`${error.message}\n${error.stdout ?? ''}`);
    });
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

describe('docs/integrations.md', () => {
  it('the "Any scheduler" examples (leased() with node-cron, croner, toad-scheduler, setInterval) type-check', { timeout: 120_000 }, async () => {
    const examples = blocks('Any scheduler');
    expect(examples.length).toBeGreaterThanOrEqual(5);
    await typeCheck({ 'any-scheduler.ts': `${examples.join('\n')}\nexport {};\n` }, false);
  });

  it('the NestJS examples type-check with experimentalDecorators', { timeout: 120_000 }, async () => {
    const examples = blocks('NestJS');
    expect(examples.length).toBeGreaterThanOrEqual(2);
    await typeCheck(Object.fromEntries(examples.map((text, i) => [`nest-${i}.ts`, text])), true);
  });

  // Their `jobs` stands for the reader's job definitions.
  it.each(['OpenTelemetry', 'Kubernetes'])('the %s examples type-check', { timeout: 120_000 }, async (heading) => {
    const examples = blocks(heading);
    expect(examples.length).toBeGreaterThanOrEqual(1);
    const files = examples.map((text, i) => [`${heading.toLowerCase()}-${i}.ts`, `declare const jobs: import('leasehold').JobOptions[];\n${text}\nexport {};\n`]);
    await typeCheck(Object.fromEntries(files), false);
  });
});
