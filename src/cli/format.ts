// Human output: short durations and times, and stored text made inert for a terminal (tables
// are in ./table.ts, widths in ./layout.ts).
import { formatDuration } from '../validate/duration.js';

// Characters a terminal acts on or hides: C0/C1 controls (ESC starts CSI/OSC sequences that
// can retitle the window, plant hyperlinks or clear the screen), DEL, line separators,
// bidirectional controls and invisible format characters.
const UNSAFE =
  /[\u0000-\u001f\u007f-\u009f\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufeff\uffa0\ufff9-\ufffb\u{e0000}-\u{e007f}]/gu;

/**
 * Makes text from the database (names, holders, run errors) safe to print: every control,
 * bidirectional or invisible character is shown as an escape (`\x1b`, `\n`, `\u202e`), so it
 * is seen rather than obeyed. Every human output line with stored text goes through here;
 * JSON output does not (JSON.stringify escapes controls itself and must stay exact).
 */
export function inert(text: string): string {
  return text.replace(UNSAFE, (char) => {
    const code = char.codePointAt(0) ?? 0;
    if (char === '\n') return '\\n';
    if (char === '\r') return '\\r';
    if (char === '\t') return '\\t';
    if (code <= 0xff) return `\\x${code.toString(16).padStart(2, '0')}`;
    return code <= 0xffff ? `\\u${code.toString(16).padStart(4, '0')}` : `\\u{${code.toString(16)}}`;
  });
}

/**
 * A duration in seconds with the precision that matters at its size: '0.4ms', '340ms',
 * '12.3s', '4m5s', '2h10m'.
 */
export function seconds(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return '-';
  const ms = value * 1000;
  if (ms < 0) return `-${seconds(-value)}`;
  if (ms < 1) return `${Math.round(ms * 10) / 10}ms`;
  if (ms < 999.5) return `${Math.round(ms)}ms`;
  if (ms < 59_950) return `${(Math.round(ms / 100) / 10).toFixed(1)}s`;
  if (ms < 3_600_000) return formatDuration(Math.round(ms / 1000) * 1000);
  return formatDuration(Math.round(ms / 60_000) * 60_000);
}

export function percent(ratio: number | null | undefined): string {
  return ratio === null || ratio === undefined ? '-' : `${Math.round(ratio * 100)}%`;
}

export function time(date: Date | null | undefined): string {
  return date ? date.toISOString().replace('.000Z', 'Z') : '-';
}
