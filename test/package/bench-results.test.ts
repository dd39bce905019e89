// bench/RESULTS.md is committed (and shipped in the package); the JSON a benchmark run writes
// next to it is not: the page must not send a reader to a committed file that is not there.
// Its History section is written by hand and kept by every run (bench/lib/history.ts).
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { withHistory } from '../../bench/lib/history.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const inGit = existsSync(`${ROOT}.git`);
const git = (...args: string[]) => execFileSync('git', args, { cwd: ROOT, encoding: 'utf8' });

it.skipIf(!inGit)('bench/results/ is ignored, holds no committed JSON, and RESULTS.md says its JSON is local', () => {
  expect(git('ls-files', 'bench/results').trim()).toBe('');
  const page = readFileSync(`${ROOT}bench/RESULTS.md`, 'utf8');
  const paths = [...page.matchAll(/bench\/results\/[\w.-]+\.json/g)].map((m) => m[0]);
  expect(paths.length).toBeGreaterThan(0);
  // every JSON path the page names is one git ignores (it exists only where the run happened)
  expect(git('check-ignore', '--no-index', ...paths).trim().split('\n')).toEqual(paths);
  expect(page).toMatch(/generated JSON is not committed/);
});

// The page's hand-written history (earlier measurements) survives each regeneration.
describe('bench/RESULTS.md history', () => {
  it('a full run keeps the hand-written History section of the page it replaces', () => {
    const previous = '# Benchmark results\n\nold numbers\n\n## Targets\n\nold\n\n## History\n\nwritten by hand\n';
    expect(withHistory('# Benchmark results\n\nnew numbers\n\n## Targets\n\nnew\n', previous)).toBe('# Benchmark results\n\nnew numbers\n\n## Targets\n\nnew\n\n## History\n\nwritten by hand\n');
    expect(withHistory('# new\n', undefined)).toBe('# new\n');
    expect(withHistory('# new\n', '# old, without history\n')).toBe('# new\n');
  });

  it('the committed page has its history, after the generated part', () => {
    const page = readFileSync(`${ROOT}bench/RESULTS.md`, 'utf8');
    const history = page.search(/^## History$/m);
    expect(history).toBeGreaterThan(page.search(/^## Targets$/m));
    expect(page.slice(history)).toMatch(/^### The tick/m);
  });
});
