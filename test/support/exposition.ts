// Reading Prometheus text exposition (a real scrape) and the metric names docs/metrics.md documents.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

export interface Sample {
  /** name{labels} exactly as scraped (PromQL selector syntax) */
  series: string;
  name: string;
  labels: Record<string, string>;
  value: number;
  type: string;
}

/** Samples of a text exposition, with each family's TYPE (histogram parts typed 'histogram'). */
export function parseExposition(text: string): Sample[] {
  const types = new Map<string, string>();
  const samples: Sample[] = [];
  for (const line of text.split('\n')) {
    const type = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (type) types.set(type[1]!, type[2]!);
    if (!line || line.startsWith('#')) continue;
    const match = /^([a-zA-Z_:][\w:]*)(\{.*\})? (\S+)$/.exec(line);
    if (!match) throw new Error(`unreadable exposition line: ${line}`);
    const [, name, braces = '', raw] = match;
    const labels: Record<string, string> = {};
    for (const [, key, value] of braces.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[key!] = value!.replace(/\\(.)/g, (_m, c: string) => (c === 'n' ? '\n' : c));
    const family = types.has(name!) ? name! : name!.replace(/_(bucket|sum|count)$/, '');
    samples.push({ series: `${name}${braces}`, name: name!, labels, value: Number(raw), type: types.get(family) ?? 'untyped' });
  }
  return samples;
}

/** The metric names of the table in docs/metrics.md, with the series names a histogram adds. */
export function documentedMetricNames(): Set<string> {
  const page = readFileSync(fileURLToPath(new URL('../../docs/metrics.md', import.meta.url)), 'utf8');
  const names = new Set<string>();
  for (const [, name, type] of page.matchAll(/^\| `(leasehold_\w+)` \| (\w+) \|/gm)) {
    names.add(name!);
    if (type === 'histogram') for (const suffix of ['_bucket', '_sum', '_count']) names.add(`${name}${suffix}`);
  }
  return names;
}

/** Every leasehold_* metric name a PromQL expression mentions. */
export function metricNamesIn(expr: string): string[] {
  return [...expr.matchAll(/\bleasehold_\w+/g)].map((m) => m[0]);
}
