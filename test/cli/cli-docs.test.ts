// docs/cli.md describes every command and every option that `leasehold COMMAND --help` lists:
// read from the CLI's own definitions (buildProgram), each option's long flag must appear in
// its command's section of the page, and the page names no command the CLI does not have.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Command } from 'commander';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/program.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const page = readFileSync(join(ROOT, 'docs/cli.md'), 'utf8');

/** The text of the section whose heading starts with `leasehold <path>`. */
function section(path: string): string | undefined {
  const parts = page.split(/^## /m);
  return parts.find((part) => part.startsWith(`\`leasehold ${path} `) || part.startsWith(`\`leasehold ${path}\``));
}

/** Every runnable command, as its path below `leasehold` ('schedule preview'). */
function commands(command: Command, prefix = ''): Array<{ path: string; command: Command }> {
  return command.commands
    .filter((sub) => sub.name() !== 'help')
    .flatMap((sub) => {
      const path = `${prefix}${sub.name()}`;
      return sub.commands.length > 0 ? commands(sub, `${path} `) : [{ path, command: sub }];
    });
}

const program = buildProgram();
const all = commands(program);

describe('docs/cli.md', () => {
  it('finds the commands', () => {
    expect(all.map(({ path }) => path)).toEqual(expect.arrayContaining(['exec', 'worker', 'status', 'runs', 'schedule preview', 'release', 'migrate', 'grant', 'dashboard', 'demo']));
  });

  it.each(all.map(({ path, command }) => [path, command] as const))('documents `leasehold %s` and each of its options', (path, command) => {
    const text = section(path);
    expect(text, `no "## \`leasehold ${path} …\`" section`).toBeDefined();
    // --database-url is described once for all commands at the top of the page.
    const flags = command.options.map((option) => option.long).filter((flag): flag is string => flag !== undefined && flag !== '--database-url');
    const missing = flags.filter((flag) => !new RegExp(`${flag}(?![a-z-])`).test(text ?? ''));
    expect(missing).toEqual([]);
  });

  it('has a section for no command the CLI lacks', () => {
    const documented = [...page.matchAll(/^## `leasehold ([a-z-]+(?: [a-z-]+)?)/gm)].map(([, path = '']) => path);
    const known = new Set(all.map(({ path }) => path));
    expect(documented.filter((path) => !known.has(path) && !known.has(path.split(' ')[0] ?? ''))).toEqual([]);
  });

  it('gives the page of the database URL option', () => {
    expect(page.split(/^## /m)[0]).toContain('--database-url');
  });
});
