// docs/options.md is generated from the defaults tables and the option types' JSDoc
// (scripts/options-reference.ts): it must be current, state each table's default, and be the one
// page with option tables (a hand-written copy elsewhere would drift from the tables).
import { readdirSync, readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { committedOptionsReference, renderOptionsReference, SECTIONS } from '../../scripts/options-reference.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

describe('docs/options.md', () => {
  const rendered = renderOptionsReference();

  it('is what `npm run options-reference` writes from the current sources', () => {
    expect(committedOptionsReference(), 'docs/options.md is stale: run `npm run options-reference`').toBe(rendered);
  });

  it('states each table default in its section', () => {
    const sections = rendered.split(/^## /m);
    const wrong: string[] = [];
    for (const { heading, settings } of SECTIONS) {
      const text = sections.find((part) => part.startsWith(`${heading}\n`)) ?? '';
      for (const [option, setting] of Object.entries(settings)) {
        if (setting.default === undefined) continue;
        const row = text.split('\n').find((line) => line.startsWith(`| \`${option}\` |`));
        if (row === undefined) continue; // linked from an earlier section ("As in …")
        const value = typeof setting.default === 'string' ? `'${setting.default}'` : String(setting.default);
        if (row.split(' | ')[2] !== `\`${value}\``) wrong.push(`${heading} ${option}: ${row}`);
      }
    }
    expect(wrong).toEqual([]);
  });

  it('is the only page with a table of the library\'s options (docs/cli.md has the commands\')', () => {
    const pages = ['README.md', ...readdirSync(`${ROOT}docs`).filter((p) => p.endsWith('.md') && !['options.md', 'cli.md'].includes(p)).map((p) => `docs/${p}`)];
    const withTables = pages.filter((page) => /^\| option \| default \|/m.test(readFileSync(`${ROOT}${page}`, 'utf8')));
    expect(withTables).toEqual([]);
  });
});
