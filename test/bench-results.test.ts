// bench/RESULTS.md is committed (and shipped in the package); the JSON a benchmark run writes
// next to it is not: the page must not send a reader to a committed file that is not there.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../', import.meta.url));
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
