// The install script of a schema version for the benchmarks that compare schemas: the library's
// own (28 on) or a pre-release one kept as a test fixture (4, 22 and 27).
import { readFileSync } from 'node:fs';
import { BASELINE_VERSION, installScript } from '../src/db/migrations.js';

export const PRERELEASE_SCHEMAS = [4, 22, 27];

export function schemaScript(version: number): string {
  if (version >= BASELINE_VERSION) return installScript(0, version);
  if (!PRERELEASE_SCHEMAS.includes(version)) throw new Error(`no install script for schema ${version} (pre-release ones: ${PRERELEASE_SCHEMAS.join(', ')})`);
  return readFileSync(new URL(`../test/fixtures/prerelease/leasehold--${version}.sql`, import.meta.url), 'utf8');
}
