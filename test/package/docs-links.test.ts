// Relative links between the repository's Markdown pages resolve: the file exists, and a
// `#fragment` into a Markdown page names one of its headings (GitHub's anchor rules) or an
// explicit <a id>. Links inside fenced code blocks are not links and are left out.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const PAGES = [
  'README.md',
  'CONTRIBUTING.md',
  'bench/RESULTS.md',
  'faults/README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((page) => page.endsWith('.md'))
    .map((page) => `docs/${page}`),
];

/** The page's text without fenced code blocks. */
function prose(file: string): string {
  return readFileSync(file, 'utf8').replace(/^```[\s\S]*?^```$/gm, '');
}

/** GitHub's heading anchor: lower case, punctuation dropped, spaces to '-', repeats numbered. */
function anchorsOf(file: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  for (const [, heading = ''] of prose(file).matchAll(/^#{1,6}[ \t]+(.*?)[ \t]*#*$/gm)) {
    const slug = heading
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const count = seen.get(slug) ?? 0;
    seen.set(slug, count + 1);
    anchors.add(count === 0 ? slug : `${slug}-${count}`);
  }
  for (const [, id = ''] of prose(file).matchAll(/<a\s+(?:name|id)="([^"]+)"/g)) anchors.add(id);
  return anchors;
}

describe('links between the docs', () => {
  it('the anchor rule matches GitHub on the headings the docs use', () => {
    const file = join(ROOT, 'docs/cli.md');
    expect(anchorsOf(file)).toContain('leasehold-exec---name-name-options----command-args');
    expect(anchorsOf(join(ROOT, 'docs/operating.md'))).toContain('installing-without-node');
  });

  it.each(PAGES)('every relative link in %s resolves, anchors included', (page) => {
    const broken: string[] = [];
    for (const [, target = ''] of prose(join(ROOT, page)).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // https:, mailto:
      const [path = '', fragment] = target.split('#');
      const file = path === '' ? join(ROOT, page) : join(ROOT, dirname(page), decodeURI(path));
      if (!existsSync(file)) broken.push(`${target}: no such file`);
      else if (fragment && file.endsWith('.md') && !anchorsOf(file).has(decodeURIComponent(fragment))) broken.push(`${target}: no such heading`);
    }
    expect(broken).toEqual([]);
  });
});
