// The client a user holds (createLeasehold): the lease calls turned into typed methods, and
// `control` for jobs as data. Every decision is made by the database. It sits above lease/ and
// control/ so that neither knows of the other: opening it (pools, schema, liveness) is in
// lease/connect.ts; the leases it holds, their shared heartbeat and what happens to all of them
// at once are in lease/tracker.ts.
import type pg from 'pg';
import { timedQuery } from '../db/connection.js';
import { dbHandle } from '../db/handle.js';
import { forceReleaseLease } from '../control/force-release.js';
import { jobControl, type JobControl } from '../control/job-control.js';
import { ClosedError, InvalidArgumentError, LeaseLostError } from '../errors.js';
import type { LeaseholdEvents } from '../observe/events.js';
import { parseBoundedDuration } from '../validate/duration.js';
import { checkActor, checkLeaseName } from '../validate/names.js';
import { checkOptionKeys } from '../validate/options.js';
import { callAcquire, type AcquireRow } from '../lease/acquire-call.js';
import { openClient, type ClientKind, type ClientParts } from '../lease/connect.js';
import { describeSkip, translateSqlError } from '../lease/describe-skip.js';
import { parseFence } from '../lease/fence.js';
import type { Lease } from '../lease/lease.js';
import { ACQUIRE_DEFAULTS } from '../lease/defaults.js';
import { ACQUIRE_OPTION_KEYS, FORCE_RELEASE_OPTION_KEYS, RUN_OPTION_KEYS } from '../lease/option-keys.js';
import type { ReplicationReport } from '../db/replication.js';
import { runRecorder } from '../lease/run-history.js';
import { readyToStart } from '../lease/start-check.js';
import type { LeaseRuntime } from '../lease/runtime.js';
import { attachTracker, releasedRemotely, type LeaseTracker } from '../lease/tracker.js';
import type { AcquireOptions, AcquireResult, ForceReleaseOptions, LeaseholdOptions, LeaseStatus, NotAcquired, RunContext, RunOptions, RunResult, SkipReason } from '../lease/types.js';

export { describeSkip } from '../lease/describe-skip.js';
export type { LeaseholdOptions } from '../lease/types.js';


// Set by Leasehold's static block: the one way to make a client (createLeasehold).
let construct: (parts: ClientParts) => Leasehold;

export class Leasehold {
  readonly holder: string;
  /** What the server said at start about replication (null if it could not be read): docs/high-availability.md. */
  readonly replication: ReplicationReport | null;
  readonly #parts: ClientParts;
  readonly #tracker: LeaseTracker;
  readonly #runtime: LeaseRuntime;
  #closed = false;
  #control: JobControl | undefined;
  #clockProbe: NodeJS.Timeout | undefined;

  private constructor(parts: ClientParts) {
    this.#parts = parts;
    this.#tracker = parts.tracker;
    this.#runtime = parts.tracker.runtime;
    this.holder = parts.holder;
    this.replication = parts.replication;
    const report = parts.replication;
    // after createLeasehold() has resolved, so that listeners added right after it hear it
    if (report?.warning || report?.epochWarning) setImmediate(() => parts.events.emit('replication:warning', report));
    // Without a liveness session nothing reads the database clock between heartbeats, so a
    // step would go unnoticed until then: read it while leases are held, as the ping would.
    if (!parts.liveness) {
      const { clock, queryTimeoutMs } = this.#runtime;
      this.#clockProbe = setInterval(() => {
        if (this.#tracker.size > 0) clock.sync(1).catch(() => undefined);
      }, Math.max(1_000, Math.min(5_000, queryTimeoutMs)));
      this.#clockProbe.unref();
    }
  }

  static {
    construct = (parts) => new Leasehold(parts);
  }

  /** Subscribes to an event; returns the unsubscribe function. */
  on<E extends keyof LeaseholdEvents>(event: E, listener: (...args: LeaseholdEvents[E]) => void): () => void {
    return this.#parts.events.on(event, listener);
  }

  /** Acts on jobs as data: schedules defined at run time, pause and resume, run now, backfill. */
  get control(): JobControl {
    this.#throwIfClosed();
    this.#control ??= jobControl(this.#runtime);
    return this.#control;
  }

  /** The pool fenced transactions run on (yours, if you passed one). */
  get pool(): pg.Pool {
    return this.#runtime.workPool;
  }

  /**
   * Tries to take the lease `name` for `ttl`. One statement, one round trip; never waits for
   * the current holder. Not getting it is a normal result, not an error.
   */
  async acquire(name: string, options: AcquireOptions): Promise<AcquireResult> {
    this.#throwIfClosed();
    checkLeaseName(name);
    if (!options || typeof options !== 'object') throw new InvalidArgumentError('options', 'acquire(name, { ttl }) needs a ttl, e.g. { ttl: "30s" }.');
    checkOptionKeys(options, ACQUIRE_OPTION_KEYS, 'acquire()');
    const heartbeat = options.heartbeat === true;
    const parsed = parseAcquireOptions(options, heartbeat);
    const result = await this.#take(name, parsed);
    if (result.acquired && heartbeat) this.#tracker.keepAlive(result.lease, parsed.heartbeatMs);
    return result;
  }

  async #take(name: string, { ttlMs, slot }: ParsedAcquire): Promise<AcquireResult> {
    const holderKey = this.#tracker.livenessKey();
    let answer: { row: AcquireRow; sentAt: number };
    try {
      answer = await callAcquire(this.#runtime, { name, ttlMs, holder: this.holder, holderKey, slot });
    } catch (error) {
      throw translateSqlError(error);
    }
    const { row, sentAt } = answer;
    const { events } = this.#parts;
    if (row.acquired && row.token && row.expires_at && row.acquired_at) {
      const lease = this.#tracker.track({
        name,
        token: row.token,
        fence: parseFence(row.fence),
        holder: this.holder,
        holderKey,
        acquiredAt: row.acquired_at,
        expiresAt: row.expires_at,
        slot,
        ttlMs,
        sentAt,
      });
      if (events.wants('lease:acquired')) {
        events.emit('lease:acquired', { name, fence: lease.fence, holder: this.holder, slot, expiresAt: row.expires_at, tookOver: row.took_over });
      }
      return { acquired: true, lease };
    }
    const skipped: NotAcquired = {
      acquired: false,
      name,
      reason: row.reason as SkipReason,
      holder: row.holder,
      since: row.acquired_at,
      until: row.expires_at,
      fence: parseFence(row.fence),
      lastSlot: row.last_slot,
      databaseTime: row.database_time,
    };
    events.emit('lease:skipped', skipped);
    return { ...skipped };
  }

  /**
   * Acquires `name`, runs `handler` with a heartbeat every ttl/3 and an AbortSignal that
   * fires if the lease is lost, and releases the lease when the handler settles. When the
   * lease is held elsewhere, the handler does not run: the skip is logged at warn level
   * (naming the holder) and returned.
   */
  async run<T>(name: string, options: RunOptions, handler: (context: RunContext) => Promise<T>): Promise<RunResult<T>> {
    if (typeof handler !== 'function') throw new InvalidArgumentError('handler', 'run(name, options, handler) needs a handler function.');
    checkOptionKeys(options, RUN_OPTION_KEYS, 'run()');
    const { history = ACQUIRE_DEFAULTS.history.default, ...acquireOptions } = options ?? ({} as RunOptions);
    this.#throwIfClosed();
    checkLeaseName(name);
    const parsed = parseAcquireOptions(acquireOptions, true);
    const result = await this.#take(name, parsed);
    const { logger, events } = this.#parts;
    if (!result.acquired) {
      // run() tells the operator why the handler did not run; a plain acquire() leaves that to its caller
      logger.warn(
        {
          event: 'lease:skipped',
          lease: name,
          reason: result.reason,
          holder: result.holder,
          holderFence: result.fence,
          since: result.since?.toISOString(),
          heldMs: result.since ? result.databaseTime.getTime() - result.since.getTime() : null,
        },
        describeSkip(result),
      );
      return { ran: false, skipped: result };
    }
    const lease = this.#tracker.keepAlive(result.lease, parsed.heartbeatMs);
    const recorder = history ? await runRecorder(this.#runtime.controlPool, lease, logger, this.#runtime.queryTimeoutMs) : null;
    let failure: { error: unknown } | null = null; // what the handler threw, if it did
    try {
      // a stall between the grant and here (a pause, a slow history insert) may have outlived the lease
      if (!(await readyToStart(lease))) throw lease.lostReason ?? new LeaseLostError(name, lease.fence, 'expired');
      const value = await handler({
        signal: lease.signal,
        fence: lease.fence,
        idempotencyKey: lease.idempotencyKey,
        slot: lease.slot,
        lease,
        transaction: (fn) => lease.transaction(fn),
      });
      return lease.lostReason ? { ran: true, value, fence: lease.fence, lost: lease.lostReason } : { ran: true, value, fence: lease.fence };
    } catch (error) {
      failure = { error };
      throw error;
    } finally {
      if (await recorder?.finish(failure)) {
        // the history's finishing statement released it
        releasedRemotely(lease);
        events.emit('lease:released', { name: lease.name, fence: lease.fence, holder: lease.holder, slot: lease.slot }, true);
      } else {
        await lease.release().catch((error: unknown) => {
          logger.warn({ event: 'lease:release-failed', lease: name, err: String(error) }, 'release failed; the lease ends by its TTL');
        });
      }
    }
  }

  /** Every lease with its state, holder, fence and time left (leasehold.lease_status). */
  async leases(): Promise<LeaseStatus[]> {
    this.#throwIfClosed();
    const { rows } = await timedQuery<{
      name: string;
      state: LeaseStatus['state'];
      holder: string | null;
      fence: string;
      acquired_at: Date | null;
      expires_at: Date | null;
      seconds_left: number | null;
      holder_alive: boolean | null;
      last_slot: Date | null;
      released_at: Date | null;
    }>(this.#runtime.controlPool, 'select * from leasehold.lease_status order by name', [], this.#runtime.queryTimeoutMs, this.#runtime.where);
    return rows.map((row) => ({
      name: row.name,
      state: row.state,
      holder: row.holder,
      fence: parseFence(row.fence),
      acquiredAt: row.acquired_at,
      expiresAt: row.expires_at,
      secondsLeft: row.seconds_left,
      holderAlive: row.holder_alive,
      lastSlot: row.last_slot,
      releasedAt: row.released_at,
    }));
  }

  /**
   * Operator override: frees `name` whoever holds it and bumps the fence, so the old
   * holder's fenced writes fail. Waits for an open fenced transaction on it to finish.
   * `by` (who does it, e.g. an operator's name): recorded in `leasehold.actions`, and the run
   * holding the lease is recorded `lost`, naming it; without it the login role is recorded.
   */
  async forceRelease(name: string, options: ForceReleaseOptions = {}): Promise<{ released: boolean; previousHolder: string | null; previousFence: number | null; fence: number | null }> {
    this.#throwIfClosed();
    checkLeaseName(name);
    if (options !== undefined && options !== null && (typeof options !== 'object' || Array.isArray(options))) {
      throw new InvalidArgumentError('options', 'forceRelease(name, options): options must be an object such as { by: \'alice\' }.');
    }
    const { by } = options ?? {};
    checkOptionKeys(options ?? {}, FORCE_RELEASE_OPTION_KEYS, 'forceRelease()');
    if (by !== undefined) checkActor(by, 'by');
    const db = dbHandle(this.#runtime.controlPool, { where: this.#runtime.where, timeoutMs: this.#runtime.queryTimeoutMs });
    const result = await forceReleaseLease(db, name, by ?? null);
    // (fences as numbers, as every other log line has them)
    this.#parts.logger.warn(
      { event: 'lease:force-released', lease: name, previousHolder: result.previousHolder, previousFence: result.previousFence, fence: result.fence, ...(by === undefined ? {} : { by }) },
      `lease "${name}" force-released${by === undefined ? '' : ` by ${by}`}`,
    );
    return result;
  }

  /** Releases held leases (best effort), stops the liveness session and closes owned pools. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#clockProbe);
    await this.#tracker.close();
    await this.#parts.liveness?.close();
    await Promise.allSettled(this.#parts.ownedPools.map((pool) => pool.end()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  #throwIfClosed(): void {
    if (this.#closed) throw new ClosedError();
  }
}

interface ParsedAcquire {
  ttlMs: number;
  slot: Date | null;
  heartbeatMs: number;
}

function parseAcquireOptions(options: Omit<AcquireOptions, 'heartbeat'>, heartbeat: boolean): ParsedAcquire {
  if (!options || typeof options !== 'object') throw new InvalidArgumentError('options', 'acquire(name, { ttl }) needs a ttl, e.g. { ttl: "30s" }.');
  const ttlMs = parseBoundedDuration(options.ttl, 'ttl', ACQUIRE_DEFAULTS.ttl.minMs, ACQUIRE_DEFAULTS.ttl.maxMs);
  const slot = options.slot ?? null;
  if (slot !== null && (!(slot instanceof Date) || Number.isNaN(slot.getTime()))) {
    throw new InvalidArgumentError('slot', `slot must be a valid Date (got ${String(slot)}).`);
  }
  const heartbeatMs =
    options.heartbeatInterval === undefined
      ? ttlMs / ACQUIRE_DEFAULTS.heartbeatDivisor
      : parseBoundedDuration(options.heartbeatInterval, 'heartbeatInterval', ACQUIRE_DEFAULTS.heartbeatInterval.minMs, ttlMs);
  if (heartbeat && heartbeatMs * 2 > ttlMs) {
    throw new InvalidArgumentError(
      'heartbeatInterval',
      `ttl must be at least 2 × heartbeatInterval (got ttl ${ttlMs} ms and heartbeatInterval ${heartbeatMs} ms): ` +
        'a single late heartbeat would otherwise lose the lease.',
    );
  }
  return { ttlMs, slot, heartbeatMs };
}

/**
 * Connects to PostgreSQL (options.connectionString, else DATABASE_URL, else options.pool),
 * migrates or checks the schema, and starts the liveness session. Fails fast with a
 * DatabaseUnavailableError when the server cannot be reached.
 */
export async function createLeasehold(options: LeaseholdOptions = {}): Promise<Leasehold> {
  return openLeasehold(options, 'client');
}

/** createLeasehold() for a scheduler worker (startWorker), whose liveness key its peers list. */
export async function openLeasehold(options: LeaseholdOptions, kind: ClientKind, handlers: readonly string[] = []): Promise<Leasehold> {
  const parts = await openClient(options, kind, handlers);
  const leasehold = construct(parts);
  attachTracker(leasehold, parts.tracker);
  return leasehold;
}
