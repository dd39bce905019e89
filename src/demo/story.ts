// Prints the demo's story: one line per event, in aligned columns
//    12.345s  worker-2   RUN   nightly-report  slot 14:03:22  fence 5  ...
// Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org).

export type Style = 'bold' | 'dim' | 'red' | 'green' | 'yellow' | 'blue' | 'magenta' | 'cyan' | 'grey';

const CODES: Record<Style, [number, number]> = {
  bold: [1, 22],
  dim: [2, 22],
  red: [31, 39],
  green: [32, 39],
  yellow: [33, 39],
  blue: [34, 39],
  magenta: [35, 39],
  cyan: [36, 39],
  grey: [90, 39],
};

export function colourWanted(stream: NodeJS.WriteStream = process.stdout): boolean {
  if (process.env.NO_COLOR !== undefined && process.env.NO_COLOR !== '') return false;
  if (process.env.TERM === 'dumb') return false;
  return stream.isTTY === true;
}

const ACTOR_WIDTH = 9;
const CLOCK_WIDTH = 8;

export class Story {
  private readonly actorStyles = new Map<string, Style>();

  constructor(
    private readonly startedAt: number,
    private readonly write: (text: string) => void = (text) => void process.stdout.write(text),
    readonly colour: boolean = colourWanted(),
  ) {}

  /** Gives an actor (a worker's name) its own colour. */
  setActorStyle(actor: string, style: Style): void {
    this.actorStyles.set(actor, style);
  }

  paint(text: string, ...styles: Style[]): string {
    if (!this.colour || styles.length === 0) return text;
    return styles.reduce((out, style) => `\u001b[${CODES[style][0]}m${out}\u001b[${CODES[style][1]}m`, text);
  }

  /** Seconds since the demo started, right-aligned: " 12.345s". */
  clock(at: number = Date.now()): string {
    return `${((at - this.startedAt) / 1000).toFixed(3)}s`.padStart(CLOCK_WIDTH);
  }

  /** One line of the story. `text` may already contain colour. */
  line(actor: string, text: string, at: number = Date.now()): void {
    const style = this.actorStyles.get(actor);
    const who = actor.padEnd(ACTOR_WIDTH);
    this.write(`${this.paint(this.clock(at), 'grey')}  ${style ? this.paint(who, style) : who} ${text}\n`);
  }

  /** A continuation line under the previous one (no time, no actor). */
  note(text: string): void {
    this.write(`${' '.repeat(CLOCK_WIDTH + 2 + ACTOR_WIDTH + 1)}${text}\n`);
  }

  heading(text: string): void {
    this.write(`\n${this.paint(text, 'bold')}\n`);
  }

  plain(text = ''): void {
    this.write(`${text}\n`);
  }
}

/** "2.5 s", "312 ms" */
export function ms(value: number): string {
  return Math.abs(value) < 1000 ? `${Math.round(value)} ms` : `${(value / 1000).toFixed(1)} s`;
}

/** A slot as the wall-clock time of day it stands for: "14:03:22" (local time). */
export function clockTime(at: Date | string | number): string {
  const date = new Date(at);
  const two = (n: number) => String(n).padStart(2, '0');
  const base = `${two(date.getHours())}:${two(date.getMinutes())}:${two(date.getSeconds())}`;
  const millis = date.getMilliseconds();
  return millis === 0 ? base : `${base}.${String(millis).padStart(3, '0')}`;
}
