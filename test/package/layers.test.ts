// The folders of src/ are layers that point one way: a file imports only from its own folder and
// from the layers below it (type-only imports and import() included), so no two folders depend
// on each other and the lease client, say, cannot come to know the scheduler. The layers are
// listed here from the bottom up; CONTRIBUTING.md "Layers" draws the same list.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, posix, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';

const SRC = fileURLToPath(new URL('../../src/', import.meta.url));

/** Bottom first. A unit is a folder of src/ (`lease/`) or a file directly in it (`errors.ts`); units of one row do not import each other. */
const LAYERS: string[][] = [
  ['errors.ts'],
  ['validate/'],
  ['db/'],
  ['schedule/', 'observe/'],
  ['lease/'],
  ['job/'],
  ['control/'],
  ['client/'],
  ['worker/'],
  ['integrations/', 'monitor/'],
  ['nestjs/', 'dashboard/'],
  ['testing/', 'testing.ts'],
  ['demo/'],
  ['cli/'],
  ['index.ts', 'schema.ts', 'opentelemetry.ts'],
];

interface Import {
  from: string;
  to: string;
}

/** The unit of a path relative to src/. */
function unitOf(file: string): string {
  const [first, ...rest] = file.split('/');
  return rest.length > 0 ? `${first}/` : first!;
}

/** Every import between two files of src/, as paths relative to src/ (imports of packages are left out). */
function sourceImports(): Import[] {
  const files = readdirSync(SRC, { recursive: true, encoding: 'utf8' }).filter((file) => file.endsWith('.ts')).map((file) => file.split(sep).join('/'));
  return files.flatMap((file) =>
    ts
      .preProcessFile(readFileSync(join(SRC, file), 'utf8'), true, true)
      .importedFiles.map((imported) => imported.fileName)
      .filter((name) => name.startsWith('.'))
      .map((name) => ({ from: file, to: posix.normalize(posix.join(dirname(file), name)).replace(/\.js$/, '.ts') })),
  );
}

/** The imports that go to a unit of the same layer or of one above (a unit's imports of itself are its own business). */
function upwardImports(imports: Import[], layers: string[][]): string[] {
  const layerOf = new Map(layers.flatMap((row, index) => row.map((unit) => [unit, index] as const)));
  return imports
    .filter(({ from, to }) => unitOf(from) !== unitOf(to) && (layerOf.get(unitOf(to)) ?? Infinity) >= (layerOf.get(unitOf(from)) ?? -1))
    .map(({ from, to }) => `${from} -> ${to}`);
}

/** Every cycle between units, one path each (unit -> ... -> the same unit); empty when the units form a DAG. */
function unitCycles(imports: Import[]): string[] {
  const edges = new Map<string, Set<string>>();
  for (const { from, to } of imports) {
    const [a, b] = [unitOf(from), unitOf(to)];
    if (a !== b) edges.set(a, (edges.get(a) ?? new Set()).add(b));
  }
  const cycles: string[] = [];
  const done = new Set<string>();
  const path: string[] = [];
  const visit = (unit: string): void => {
    const onPath = path.indexOf(unit);
    if (onPath !== -1) {
      cycles.push([...path.slice(onPath), unit].join(' -> '));
      return;
    }
    if (done.has(unit)) return;
    path.push(unit);
    for (const next of edges.get(unit) ?? []) visit(next);
    path.pop();
    done.add(unit);
  };
  for (const unit of [...edges.keys()].sort()) visit(unit);
  return cycles;
}

/** The rows of the diagram in CONTRIBUTING.md "### Layers", top row first: each row's units. */
function contributingRows(): string[][] {
  const text = readFileSync(new URL('../../CONTRIBUTING.md', import.meta.url), 'utf8');
  const section = /^### Layers\n[\s\S]*?^```\n([\s\S]*?)^```$/m.exec(text)?.[1] ?? '';
  return section
    .split('\n')
    .map((line) => {
      // the units named at the start of a row, before its description
      const words = line.trim().split(/\s+/);
      const end = words.findIndex((word) => !/^[a-z-]+(\/|\.ts)$/.test(word));
      return end === -1 ? words : words.slice(0, end);
    })
    .filter((row) => row.length > 0);
}

describe('the layers of src/', () => {
  const imports = sourceImports();

  it('place every folder and top-level file of src/ exactly once', () => {
    const placed = LAYERS.flat();
    expect(new Set(placed).size, 'placed twice').toBe(placed.length);
    const units = [...new Set(readdirSync(SRC, { recursive: true, encoding: 'utf8' }).filter((file) => file.endsWith('.ts')).map((file) => unitOf(file.split(sep).join('/'))))];
    expect(units.sort()).toEqual([...placed].sort());
  });

  it('are read from real imports, type-only ones included', () => {
    expect(imports.length).toBeGreaterThan(500);
    expect(imports).toContainEqual({ from: 'client/leasehold.ts', to: 'control/job-control.ts' });
    expect(imports.some(({ from, to }) => from === 'lease/types.ts' && to === 'lease/lease.ts')).toBe(true);
  });

  it('import only from the layers below, so no folder cycle is possible', () => {
    expect(upwardImports(imports, LAYERS)).toEqual([]);
    expect(unitCycles(imports)).toEqual([]);
  });

  it('can fail: an import of a layer above, of one beside, and a cycle are all found', () => {
    const probe: Import[] = [
      { from: 'lease/lease.ts', to: 'worker/worker.ts' },
      { from: 'worker/worker.ts', to: 'lease/lease.ts' },
      { from: 'schedule/schedule.ts', to: 'observe/logger.ts' },
      { from: 'lease/lease.ts', to: 'lease/types.ts' },
    ];
    expect(upwardImports(probe, LAYERS)).toEqual(['lease/lease.ts -> worker/worker.ts', 'schedule/schedule.ts -> observe/logger.ts']);
    expect(unitCycles(probe)).toEqual(['lease/ -> worker/ -> lease/']);
  });

  it('are the ones CONTRIBUTING.md draws', () => {
    expect(contributingRows().reverse()).toEqual(LAYERS);
  });
});
