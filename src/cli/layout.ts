// How wide human output may be, and text fitted to it: wrapped at spaces or shortened with an
// ellipsis. JSON output is never fitted (it carries the full values).

/** Human output fits this many columns unless told otherwise: a terminal of 100 shows it unbroken. */
export const DEFAULT_COLUMNS = 100;
/** Below this a layout is useless; a smaller COLUMNS or terminal is read as this. */
const MIN_COLUMNS = 40;

/**
 * Columns standard output may take: unlimited with --wide, else COLUMNS when set, else the
 * terminal's width, else DEFAULT_COLUMNS (a pipe, a file, cron mail).
 */
export function outputColumns(wide: boolean | undefined): number {
  if (wide) return Infinity;
  return columnsFromEnvironment() ?? terminalColumns(process.stdout) ?? DEFAULT_COLUMNS;
}

/**
 * Columns an error message on standard error may take: COLUMNS when set, else the terminal's
 * width. Unlimited otherwise, so that a log collector or cron mail gets one line per error.
 */
export function errorColumns(): number {
  return columnsFromEnvironment() ?? terminalColumns(process.stderr) ?? Infinity;
}

function columnsFromEnvironment(): number | undefined {
  const value = process.env.COLUMNS;
  if (!value || !/^\d+$/.test(value.trim())) return undefined;
  return Math.max(MIN_COLUMNS, Number(value));
}

function terminalColumns(stream: NodeJS.WriteStream): number | undefined {
  return stream.isTTY && stream.columns > 0 ? Math.max(MIN_COLUMNS, stream.columns) : undefined;
}

/** Columns a text takes, counting code points (an emoji is one character, not two UTF-16 units). */
export function textWidth(text: string): number {
  let n = 0;
  for (const _ of text) n++;
  return n;
}

/** `text` in at most `width` columns: cut, with an ellipsis as its last column. */
export function truncate(text: string, width: number): string {
  if (textWidth(text) <= width) return text;
  if (width <= 0) return '';
  return `${[...text].slice(0, width - 1).join('')}…`;
}

/**
 * `text` wrapped at spaces into lines of at most `width` columns, the lines after the first
 * indented by `indent`. A word longer than a line (a URL, a path) stays whole; a number stays
 * with the word after it ("3 skips", "(24 h)"), so a count is never left at the end of a line.
 */
export function wrap(text: string, width: number, indent = '  '): string[] {
  if (textWidth(text) <= width) return [text];
  const words = text.split(/(?<!(?:^|\s)\(?[\d.,%]+) /);
  const lines: string[] = [];
  let line = '';
  for (const word of words) {
    const candidate = line === '' ? word : `${line} ${word}`;
    const limit = lines.length === 0 ? width : width - indent.length;
    if (line !== '' && textWidth(candidate) > limit) {
      lines.push(line);
      line = word;
    } else line = candidate;
  }
  lines.push(line);
  return lines.map((l, i) => (i === 0 ? l : `${indent}${l}`));
}

/** Every line of `text` wrapped to `width` (one paragraph per line). */
export function wrapLines(text: string, width: number, indent = '  '): string {
  return text
    .split('\n')
    .flatMap((line) => wrap(line, width, indent))
    .join('\n');
}
