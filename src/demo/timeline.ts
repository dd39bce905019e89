// The demo's live timeline: one line per worker event, with what it means (a buffered start,
// a takeover, a refused stale write) and a note the first time something happens. It also keeps
// what the story and its checks read back: the runs open now, the buffered slots, the writes.
import { jobOf, shorten } from './helpers.js';
import type { EventLog } from './processes.js';
import { slotKey, type MessageOf, type WorkerMessage } from './protocol.js';
import { clockTime, ms, type Story, type Style } from './story.js';

export interface OpenRun {
  worker: string;
  job: string;
  slot: string;
  fence: number;
  at: number;
}

export class Timeline {
  readonly openRuns = new Map<string, OpenRun>();
  readonly bufferedSlots = new Set<string>();
  /** `job#fence` of every run whose fenced write committed. */
  readonly written = new Set<string>();
  private readonly lastFinished = new Map<string, MessageOf<'finished'>>();
  private readonly explained = new Set<string>();
  /** The worker frozen by the story, whose lost lease gets a note. */
  frozenVictim: string | undefined;

  constructor(
    private readonly story: Story,
    private readonly log: EventLog,
    private readonly clock: { localAt(dbTime: number): number },
    /** Where trouble seen in the events goes (the exit code's reasons). */
    private readonly problems: string[],
  ) {}

  private paint(text: string, ...styles: Style[]): string {
    return this.story.paint(text, ...styles);
  }

  show(message: WorkerMessage): void {
    const story = this.story;
    const who = message.worker;
    switch (message.type) {
      case 'ready':
        story.line(who, this.paint(`ready (pid ${message.pid})`, 'dim'), message.at);
        return;
      case 'started': {
        this.openRuns.set(`${message.job}#${message.fence}`, { worker: who, job: message.job, slot: message.slot, fence: message.fence, at: message.at });
        const extras: string[] = [];
        const job = jobOf(message.job);
        if (this.bufferedSlots.has(slotKey(message.job, message.slot))) {
          const released = this.lastFinished.get(message.job);
          extras.push(
            this.paint(
              `buffered slot ${clockTime(message.slot)} started` +
                (released ? ` ${ms(Math.max(0, message.at - released.at))} after ${released.worker} released slot ${clockTime(released.slot)}` : '') +
                ` (${ms(message.at - this.clock.localAt(Date.parse(message.slot)))} after its slot time)`,
              'green',
            ),
          );
        }
        if (job && message.plannedMs >= job.everyMs) extras.push(this.paint(`a slow run: ${ms(message.plannedMs)}, longer than the ${ms(job.everyMs)} interval`, 'yellow'));
        if (message.tookOver) extras.push(this.paint('took the lease over (its holder never released it)', 'green'));
        story.line(who, `${this.event('RUN', 'bold')}${this.runLabel(message.job, message.slot)}  fence ${String(message.fence).padEnd(3)}${extras.length ? ` ${extras.join('; ')}` : ''}`, message.at);
        this.explainOnce('run', 'each slot is claimed by one worker in one statement (leasehold.claim); the fence grows with every run of the job');
        return;
      }
      case 'finished': {
        this.openRuns.delete(`${message.job}#${message.fence}`);
        this.lastFinished.set(message.job, message);
        const wrote = this.written.has(`${message.job}#${message.fence}`);
        const outcome =
          message.outcome === 'succeeded'
            ? `succeeded in ${ms(message.durationMs)}${wrote ? ', row written (fenced)' : ''}`
            : this.paint(`${message.outcome} after ${ms(message.durationMs)}${message.error ? ` (${shorten(message.error.split(';')[0] ?? '', 90)})` : ''}`, 'red');
        story.line(who, `${this.event('DONE')}${this.runLabel(message.job, message.slot)}  fence ${String(message.fence).padEnd(3)} ${outcome}`, message.at);
        return;
      }
      case 'skipped': {
        const held = `held by ${message.holder ?? 'unknown'} (fence ${message.holderFence}${message.holderSlot ? `, slot ${clockTime(message.holderSlot)}` : ''})${
          message.heldMs === null ? '' : ` for ${ms(message.heldMs)}`
        }`;
        if (message.buffered) {
          this.bufferedSlots.add(slotKey(message.job, message.slot));
          story.line(who, `${this.event('BUFFER', 'yellow')}${this.runLabel(message.job, message.slot)}  ${held}: waits, and starts when it is released`, message.at);
          this.explainOnce('buffer', `overlap 'buffer-one': the slot waits in leasehold.buffered; the worker that releases the lease claims it at once`);
        } else {
          story.line(who, `${this.event('SKIP', 'yellow')}${this.runLabel(message.job, message.slot)}  ${held}`, message.at);
          this.explainOnce('skip', `overlap 'skip': the slot does not run; every worker saw it held, one recorded the skip (leasehold.skips) and reported it`);
        }
        return;
      }
      case 'missed':
        story.line(who, `${this.event('MISSED', 'red')}${message.job.padEnd(15)} ${message.slots.map((s) => clockTime(s)).join(', ')}: no worker claimed in time`, message.at);
        return;
      case 'lost': {
        const run = this.openRuns.get(`${message.job}#${message.fence}`);
        story.line(
          who,
          `${this.event('LOST', 'red')}${message.job.padEnd(15)}${run ? ` slot ${clockTime(run.slot)}` : ''}  fence ${String(message.fence).padEnd(3)} ${this.paint(`lease lost (${message.reason}): its AbortSignal fired`, 'red')}`,
          message.at,
        );
        if (who === this.frozenVictim) {
          story.note(this.paint('the handler does not watch the signal (a job stuck in a library call would not either): it carries on to its write', 'dim'));
        }
        return;
      }
      case 'wrote':
        this.written.add(`${message.job}#${message.fence}`);
        return;
      case 'refused':
        this.showRefusal(message);
        return;
      case 'log': {
        // A failed handler is told by its DONE line; anything else at error level is trouble.
        if (message.fields.event === 'run:finished') return;
        const err = typeof message.fields.err === 'string' ? `: ${message.fields.err}` : '';
        this.problems.push(`${who} logged an error: ${message.message}${err}`);
        story.line(who, this.paint(`error logged: ${message.message}${err}`, 'red'), message.at);
        return;
      }
      case 'error':
        this.problems.push(`${who}: ${message.message}`);
        story.line(who, this.paint(`error: ${message.message}`, 'red'), message.at);
        return;
      case 'stopped':
        story.line(who, this.paint('stopped: released its leases, closed its client', 'dim'), message.at);
        return;
    }
  }

  private showRefusal(refusal: MessageOf<'refused'>): void {
    const newer = this.log.all('started', (m) => m.job === refusal.job && m.fence > refusal.fence).at(-1);
    const now = newer ? `the lease is now fence ${newer.fence}, taken by ${newer.worker}` : 'the lease is no longer held';
    this.story.line(
      refusal.worker,
      this.paint(`stale write from ${refusal.worker} (fence ${refusal.fence}) refused: LeaseLostError (${refusal.reason}); ${now}`, 'red', 'bold'),
      refusal.at,
    );
    this.story.note(
      refusal.reason === 'fence-mismatch'
        ? 'ctx.transaction() sent the write, and the database refused it: leasehold.assert_lease found another token and fence'
        : 'ctx.transaction() refused it before sending any SQL: the lease had been lost (its local deadline passed while frozen)',
    );
    this.story.note(
      refusal.sqlRows === 0
        ? `the database refuses it too: the same insert guarded by leasehold.holds_lease(name, token, ${refusal.fence}) wrote 0 rows`
        : this.paint(`BUT the same insert guarded by leasehold.holds_lease() wrote ${refusal.sqlRows} row(s)!`, 'red', 'bold'),
    );
  }

  /** A note under the line just printed, the first time something happens. */
  private explainOnce(what: string, text: string): void {
    if (this.explained.has(what)) return;
    this.explained.add(what);
    this.story.note(this.paint(text, 'dim'));
  }

  private event(word: string, ...styles: Style[]): string {
    return `${this.paint(word.padEnd(6), ...styles)} `;
  }

  private runLabel(job: string, slot: string): string {
    return `${job.padEnd(15)} slot ${clockTime(slot)}`;
  }
}
