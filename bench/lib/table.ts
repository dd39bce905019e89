// One table, rendered as aligned plain text (stdout) or as markdown (RESULTS.md).

export interface Table {
  headers: string[];
  /** 'r' right-aligns a column (numbers), 'l' left-aligns it. */
  align: Array<'l' | 'r'>;
  rows: string[][];
}

export function renderText(table: Table): string {
  const widths = table.headers.map((header, column) =>
    Math.max(header.length, ...table.rows.map((row) => (row[column] ?? '').length)),
  );
  const line = (cells: string[]) =>
    cells
      .map((cell, column) => {
        const width = widths[column] ?? cell.length;
        return table.align[column] === 'r' ? cell.padStart(width) : cell.padEnd(width);
      })
      .join('  ')
      .trimEnd();
  const rule = widths.map((width) => '-'.repeat(width)).join('  ');
  return [line(table.headers), rule, ...table.rows.map(line)].join('\n');
}

export function renderMarkdown(table: Table): string {
  const escape = (cell: string) => cell.replace(/\|/g, '\\|');
  const line = (cells: string[]) => `| ${cells.map(escape).join(' | ')} |`;
  const rule = `| ${table.align.map((a) => (a === 'r' ? '---:' : ':---')).join(' | ')} |`;
  return [line(table.headers), rule, ...table.rows.map(line)].join('\n');
}
