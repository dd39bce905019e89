// Aligned tables that fit a width. Each cell is made inert first (inert() in ./format.ts), so a
// cut never lets a control character through. A table that does not fit takes its short headers;
// columns that may shrink are cut with an ellipsis (or wrapped) down to their minimum, least
// important first; when even that does not fit, columns that may be left out are, and a last
// line names them.
import { inert } from './format.js';
import { textWidth, truncate, wrap } from './layout.js';

export interface Column {
  header: string;
  /** A shorter header for a table that does not fit ('SKIPS' for 'SKIPS 24H'): a wide header over narrow values. */
  short?: string;
  /** May be cut to this many columns (never below its header's width). Unset: never cut. */
  shrink?: number;
  /** Continuation lines instead of an ellipsis when cut (explanatory notes). */
  wrap?: boolean;
  /** May be left out when the table cannot fit otherwise. */
  drop?: boolean;
  /** Lower is cut or left out first. @default the later a column, the lower */
  rank?: number;
}

type Cell = string | number | null | undefined;

/** The rows under their headers, fitted to `width` columns (Infinity: as wide as the cells). */
export function table(columns: Array<string | Column>, rows: Cell[][], width = Infinity): string {
  const given = columns.map((c) => (typeof c === 'string' ? { header: c } : c));
  const cells = rows.map((row) => given.map((_, i) => cellText(row[i])));
  const specs = tableWidth(given, cells) <= width ? given : given.map((spec) => ({ ...spec, header: spec.short ?? spec.header }));
  const rank = (i: number) => specs[i]?.rank ?? -i;
  const byRank = (which: (spec: Column) => boolean) => specs.flatMap((spec, i) => (which(spec) ? [i] : [])).sort((a, b) => rank(a) - rank(b));
  const natural = naturalWidths(specs, cells);
  const least = specs.map((spec, i) => (spec.shrink === undefined ? (natural[i] ?? 0) : Math.min(natural[i] ?? 0, Math.max(spec.shrink, textWidth(spec.header)))));
  const shown = specs.map((_, i) => i);
  const span = (widths: number[]) => shown.reduce((sum, i) => sum + (widths[i] ?? 0), 0) + 2 * (shown.length - 1);

  // leave columns out only when even the shrunk table is too wide
  const left: string[] = [];
  for (const i of byRank((spec) => spec.drop === true)) {
    if (span(least) <= width) break;
    shown.splice(shown.indexOf(i), 1);
    left.push(specs[i]?.header ?? '');
  }
  // then cut the shrinkable columns, lowest rank first, each only as far as needed
  const widths = [...natural];
  for (const i of byRank((spec) => spec.shrink !== undefined)) {
    const excess = span(widths) - width;
    if (excess <= 0) break;
    if (shown.includes(i)) widths[i] = Math.max(least[i] ?? 0, (widths[i] ?? 0) - excess);
  }

  const lines: string[] = [];
  const emit = (row: string[]) => {
    const parts = shown.map((i) => {
      const w = widths[i] ?? 0;
      return specs[i]?.wrap ? wrap(row[i] ?? '', w, '').map((line) => truncate(line, w)) : [truncate(row[i] ?? '', w)];
    });
    const height = Math.max(...parts.map((p) => p.length));
    for (let line = 0; line < height; line++) {
      lines.push(parts.map((p, k) => pad(p[line] ?? '', widths[shown[k] ?? 0] ?? 0)).join('  ').trimEnd());
    }
  };
  emit(specs.map((spec) => spec.header));
  for (const row of cells) emit(row);
  if (left.length > 0) lines.push(...wrap(`(left out to fit ${width} columns: ${left.join(', ')}; --wide shows them)`, width));
  return lines.join('\n');
}

function naturalWidths(specs: Column[], cells: string[][]): number[] {
  return specs.map((spec, i) => Math.max(textWidth(spec.header), ...cells.map((row) => textWidth(row[i] ?? ''))));
}

function tableWidth(specs: Column[], cells: string[][]): number {
  return naturalWidths(specs, cells).reduce((sum, w) => sum + w, 0) + 2 * (specs.length - 1);
}

function cellText(cell: Cell): string {
  return cell === null || cell === undefined ? '-' : inert(String(cell));
}

function pad(text: string, width: number): string {
  return text + ' '.repeat(Math.max(0, width - textWidth(text)));
}
