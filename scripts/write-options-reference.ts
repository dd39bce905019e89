// Writes docs/options.md from the defaults tables and the option types' JSDoc
// (scripts/options-reference.ts). test/package/options-reference.test.ts fails when it is out of date.
import { writeFileSync } from 'node:fs';
import { renderOptionsReference } from './options-reference.js';

writeFileSync(new URL('../docs/options.md', import.meta.url), renderOptionsReference());
process.stdout.write('wrote docs/options.md\n');
