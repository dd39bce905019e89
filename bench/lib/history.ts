// bench/RESULTS.md has two parts: the numbers of the latest full run, which every full
// `npm run bench` rewrites, and below the "History" heading the earlier measurements (before and
// after comparisons of past changes, runs on other hosts), written by hand and kept by every run
// as they are. So the benchmark's history lives on one page, next to the current numbers.

/** The heading that starts the hand-written part. */
export const HISTORY_HEADING = '## History';

/** The generated page followed by the hand-written history of the page it replaces (if any). */
export function withHistory(generated: string, previous: string | undefined): string {
  const start = previous === undefined ? -1 : previous.search(/^## History$/m);
  if (start === -1) return generated;
  return `${generated.replace(/\n*$/, '\n')}\n${previous!.slice(start)}`;
}
