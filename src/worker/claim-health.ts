// Whether a worker's claims work. A claim that fails is logged and tried again at the next slot,
// as it always was. Claims that keep failing for a reason no retry cures — the server is
// read-only, or the role lacks a grant — make the worker failing from the third in a row: the
// `worker:failing` event with the typed error (logged at error level: it says what to fix),
// `Worker.failure`, and failing health probes (src/monitor/health.ts), so that an orchestrator
// restarts the worker, whose start then refuses with the same error, instead of it running
// nothing and logging a line a tick forever. While failing, the per-claim line is written once a
// minute; the next claim that succeeds ends it (`worker:recovered`).
import { performance } from 'node:perf_hooks';
import { DatabaseReadOnlyError, PermissionDeniedError, type LeaseholdError } from '../errors.js';
import type { LeaseholdEmitter } from '../observe/events.js';
import type { Logger } from '../observe/logger.js';

/** Configuration failures in a row that make the worker failing. */
export const FAILING_AFTER = 3;
const REMIND_EVERY_MS = 60_000;

/** The error, when it is one that retrying cannot cure (a server setting or a grant). */
function configurationFailure(error: unknown): LeaseholdError | null {
  return error instanceof DatabaseReadOnlyError || error instanceof PermissionDeniedError ? error : null;
}

export class ClaimHealth {
  #streak = 0;
  #since: Date | null = null;
  #failure: LeaseholdError | null = null;
  #loggedAt = -Infinity;

  constructor(
    private readonly logger: Logger,
    private readonly events: LeaseholdEmitter,
  ) {}

  /** The configuration failure that has failed the last claims, or null. */
  get failure(): LeaseholdError | null {
    return this.#failure;
  }

  succeeded(): void {
    this.#streak = 0;
    this.#since = null;
    if (!this.#failure) return;
    this.#failure = null;
    this.events.emit('worker:recovered');
  }

  /** A claim failed: the error line (once a minute while failing), and maybe the failing state. */
  failed(error: unknown, message: string, fields: Record<string, unknown> = {}): void {
    const configuration = configurationFailure(error);
    // another kind of failure (the server away, a timeout) says nothing either way
    if (configuration) {
      this.#streak++;
      this.#since ??= new Date();
      if (!this.#failure && this.#streak >= FAILING_AFTER) {
        this.#failure = configuration;
        this.#loggedAt = performance.now();
        this.events.emit('worker:failing', { error: configuration, failures: this.#streak, since: this.#since });
        return;
      }
      if (this.#failure) this.#failure = configuration;
    }
    if (this.#failure && performance.now() - this.#loggedAt < REMIND_EVERY_MS) return;
    this.#loggedAt = performance.now();
    this.logger.error({ event: 'claim:failed', err: String(error), ...fields, ...(this.#failure ? { failures: this.#streak } : {}) }, message);
  }
}
