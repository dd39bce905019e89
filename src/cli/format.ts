// Human output: aligned tables and short durations.
import { formatDuration } from '../validate/duration.js';

export function table(headers: string[], rows: Array<Array<string | number | null | undefined>>): string {
  const cells = [headers, ...rows.map((row) => row.map((cell) => (cell === null || cell === undefined ? '-' : String(cell))))];
  const widths = headers.map((_, i) => Math.max(...cells.map((row) => (row[i] ?? '').length)));
  return cells.map((row) => row.map((cell, i) => (cell ?? '').padEnd(widths[i] ?? 0)).join('  ').trimEnd()).join('\n');
}

export function seconds(value: number | null | undefined): string {
  if (value === null || value === undefined) return '-';
  // whole seconds from 10 s on, tenths below: enough for a table
  return formatDuration(value >= 10 ? Math.round(value) * 1000 : Math.round(value * 10) * 100);
}

export function percent(ratio: number | null | undefined): string {
  return ratio === null || ratio === undefined ? '-' : `${Math.round(ratio * 100)}%`;
}

export function time(date: Date | null | undefined): string {
  return date ? date.toISOString().replace('.000Z', 'Z') : '-';
}
