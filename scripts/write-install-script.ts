// Writes sql/install/leasehold--N.sql, the complete install script of the current schema
// version N, from the migrations. test/install-script.test.ts fails when it is out of date.
import { writeFileSync } from 'node:fs';
import { installScript, latestVersion } from '../src/db/migrations.js';

const file = new URL(`../sql/install/leasehold--${latestVersion()}.sql`, import.meta.url);
writeFileSync(file, installScript());
process.stdout.write(`wrote sql/install/leasehold--${latestVersion()}.sql\n`);
