// Writes sql/install/leasehold--N.sql, the complete install script of the current schema
// version N, from the migrations, and removes the scripts of older versions (one install
// script ships: the current one). test/sql/install-script.test.ts fails when it is out of date.
import { mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { installScript, latestVersion } from '../src/db/migrations.js';

const dir = new URL('../sql/install/', import.meta.url);
const name = `leasehold--${latestVersion()}.sql`;
mkdirSync(dir, { recursive: true });
for (const old of readdirSync(dir)) if (/^leasehold--\d+\.sql$/.test(old) && old !== name) rmSync(new URL(old, dir));
writeFileSync(new URL(name, dir), installScript());
process.stdout.write(`wrote sql/install/${name}\n`);
