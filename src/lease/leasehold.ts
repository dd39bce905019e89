// The lease client: connects, checks or migrates the schema, keeps the liveness session,
// and turns the SQL functions into typed calls. Every decision is made by the database.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type pg from 'pg';
import {
  createOwnedPool,
  describeConnection,
  resolveConnectionString,
  timedQuery,
  type ConnectionOptions,
} from '../db/connection.js';
import { connectAndCheck } from '../db/connect-check.js';
import { dbHandle } from '../db/handle.js';
import { ClosedError, InvalidArgumentError } from '../errors.js';
import { LeaseholdEmitter, type LeaseholdEvents } from '../observe/events.js';
import { stderrLogger, type Logger } from '../observe/logger.js';
import { parseBoundedDuration, type Duration } from '../validate/duration.js';
import { checkHolder, checkLeaseName } from '../validate/names.js';
import { DatabaseClock, type ClockStep } from '../schedule/database-clock.js';
import { callAcquire, type AcquireRow } from './acquire-call.js';
import { parseFence } from './fence.js';
import { Lease, type LeaseGrant } from './lease.js';
import { LivenessSession } from './liveness.js';
import type { ReplicationReport } from './replication.js';
import type { LeaseRuntime } from './runtime.js';
import { runRecorder } from './run-history.js';
import { ACQUIRE_OPTION_KEYS, LEASEHOLD_OPTION_KEYS, RUN_OPTION_KEYS } from './option-keys.js';
import { checkOptionKeys } from '../validate/options.js';
import { durationSetting, integerSetting } from '../validate/settings.js';
import { ACQUIRE_DEFAULTS, LEASEHOLD_DEFAULTS } from './defaults.js';
import type { AcquireOptions, AcquireResult, LeaseStatus, NotAcquired, RunContext, RunOptions, RunResult, SkipReason } from './types.js';

export interface LeaseholdOptions extends ConnectionOptions {
  /** How this process names itself in leases and skips. @default `${hostname}:${pid}:${random}` */
  holder?: string;
  /**
   * The liveness session: a dedicated direct connection whose advisory lock frees this
   * process's leases at once when it dies. `false` turns it off (then only the TTL frees
   * the leases of a crashed holder); `{ connectionString }` points it at a direct server
   * address when lease calls go through a transaction-mode pooler.
   * @default true
   */
  liveness?: boolean | { connectionString: string };
  /** Apply pending migrations on connect (under an advisory lock). With false, a schema that is not exactly current is an error. @default true */
  migrate?: boolean;
  /** Timeout for every library statement. Keep it well under your TTLs. @default '5s' */
  queryTimeout?: Duration;
  /** Timeout for opening a connection. @default '5s' */
  connectTimeout?: Duration;
  /** Connections for fenced transactions when the library creates the pool. @default 10 */
  poolSize?: number;
  /** pino-compatible logger. @default JSON lines on stderr, warnings and errors only */
  logger?: Logger;
}


const SQL_ERRORS: Record<string, string> = { LH001: 'name', LH002: 'ttl', LH004: 'holder' };

export class Leasehold {
  readonly holder: string;
  /** What the server said at start about replication (null if it could not be read): docs/high-availability.md. */
  readonly replication: ReplicationReport | null;
  private readonly events: LeaseholdEmitter;
  private readonly runtime: LeaseRuntime;
  private readonly active = new Set<Lease>();
  private readonly ownedPools: pg.Pool[];
  private closed = false;
  private clockProbe: NodeJS.Timeout | undefined;

  /** @internal use createLeasehold() */
  constructor(
    private readonly settings: {
      holder: string;
      controlPool: pg.Pool;
      renewPool: pg.Pool;
      clock: DatabaseClock;
      workPool: pg.Pool;
      ownedPools: pg.Pool[];
      queryTimeoutMs: number;
      where: string;
      logger: Logger;
      events: LeaseholdEmitter;
      replication: ReplicationReport | null;
    },
    private readonly liveness: LivenessSession | undefined,
  ) {
    this.holder = settings.holder;
    this.replication = settings.replication;
    const report = settings.replication;
    if (report?.warning) {
      settings.logger.warn({ event: 'replication:warning', ...report }, report.warning);
      // after createLeasehold() has resolved, so that listeners added right after it hear it
      setImmediate(() => settings.events.emit('replication:warning', report));
    }
    this.events = settings.events;
    this.ownedPools = settings.ownedPools;
    this.runtime = {
      controlPool: settings.controlPool,
      renewPool: settings.renewPool,
      clock: settings.clock,
      workPool: settings.workPool,
      queryTimeoutMs: settings.queryTimeoutMs,
      where: settings.where,
      logger: settings.logger,
      events: settings.events,
      forget: (lease) => this.active.delete(lease as Lease),
    };
    // Without a liveness session nothing reads the database clock between heartbeats, so a
    // step would go unnoticed until then: read it while leases are held, as the ping would.
    if (!liveness) {
      this.clockProbe = setInterval(() => {
        if (this.active.size > 0) settings.clock.sync(1).catch(() => undefined);
      }, Math.max(1_000, Math.min(5_000, settings.queryTimeoutMs)));
      this.clockProbe.unref();
    }
  }

  /** Subscribes to an event; returns the unsubscribe function. */
  on<E extends keyof LeaseholdEvents>(event: E, listener: (...args: LeaseholdEvents[E]) => void): () => void {
    return this.events.on(event, listener);
  }

  /** The pool fenced transactions run on (yours, if you passed one). */
  get pool(): pg.Pool {
    return this.settings.workPool;
  }

  /**
   * Tries to take the lease `name` for `ttl`. One statement, one round trip; never waits for
   * the current holder. Not getting it is a normal result, not an error.
   */
  async acquire(name: string, options: AcquireOptions): Promise<AcquireResult> {
    this.throwIfClosed();
    checkLeaseName(name);
    if (!options || typeof options !== 'object') throw new InvalidArgumentError('options', 'acquire(name, { ttl }) needs a ttl, e.g. { ttl: "30s" }.');
    checkOptionKeys(options, ACQUIRE_OPTION_KEYS, 'acquire()');
    const ttlMs = parseBoundedDuration(options.ttl, 'ttl', ACQUIRE_DEFAULTS.ttl.minMs, ACQUIRE_DEFAULTS.ttl.maxMs);
    const slot = options.slot ?? null;
    if (slot !== null && (!(slot instanceof Date) || Number.isNaN(slot.getTime()))) {
      throw new InvalidArgumentError('slot', `slot must be a valid Date (got ${String(slot)}).`);
    }
    const heartbeatMs =
      options.heartbeatInterval === undefined
        ? ttlMs / ACQUIRE_DEFAULTS.heartbeatDivisor
        : parseBoundedDuration(options.heartbeatInterval, 'heartbeatInterval', ACQUIRE_DEFAULTS.heartbeatInterval.minMs, ttlMs);
    if (options.heartbeat && heartbeatMs * 2 > ttlMs) {
      throw new InvalidArgumentError(
        'heartbeatInterval',
        `ttl must be at least 2 × heartbeatInterval (got ttl ${ttlMs} ms and heartbeatInterval ${heartbeatMs} ms): ` +
          'a single late heartbeat would otherwise lose the lease.',
      );
    }
    const holderKey = this.liveness?.key ?? null;
    let answer: { row: AcquireRow; sentAt: number };
    try {
      answer = await callAcquire(this.runtime, { name, ttlMs, holder: this.holder, holderKey, slot });
    } catch (error) {
      throw translateSqlError(error);
    }
    const { row, sentAt } = answer;
    if (row.acquired && row.token && row.expires_at && row.acquired_at) {
      const lease = new Lease(
        {
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
        },
        this.runtime,
      );
      this.active.add(lease);
      // The liveness session may have dropped while the acquire was in flight.
      if (holderKey !== null && this.liveness?.key !== holderKey) lease.markLost('liveness-lost');
      else if (options.heartbeat) lease.startHeartbeat(heartbeatMs);
      this.events.emit('lease:acquired', { ...lease.info(), expiresAt: row.expires_at, tookOver: row.took_over });
      if (row.took_over) this.settings.logger.info({ event: 'lease:takeover', lease: name, fence: lease.fence }, `lease "${name}" taken over from a holder that never released it`);
      this.settings.logger.debug({ event: 'lease:acquired', lease: name, fence: lease.fence }, `lease "${name}" acquired`);
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
    this.events.emit('lease:skipped', skipped);
    return { ...skipped };
  }

  /**
   * Acquires `name`, runs `handler` with a heartbeat every ttl/3 and an AbortSignal that
   * fires if the lease is lost, and releases the lease when the handler settles. When the
   * lease is held elsewhere, the handler does not run: the skip is logged at warn level
   * (naming the holder) and returned.
   */
  async run<T>(
    name: string,
    options: RunOptions,
    handler: (context: RunContext) => Promise<T>,
  ): Promise<RunResult<T>> {
    if (typeof handler !== 'function') throw new InvalidArgumentError('handler', 'run(name, options, handler) needs a handler function.');
    checkOptionKeys(options, RUN_OPTION_KEYS, 'run()');
    const { history = ACQUIRE_DEFAULTS.history.default, ...acquireOptions } = options ?? ({} as RunOptions);
    const result = await this.acquire(name, { ...acquireOptions, heartbeat: true });
    if (!result.acquired) {
      this.settings.logger.warn(
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
    const { lease } = result;
    const recorder = history ? await runRecorder(this.runtime.controlPool, lease, this.settings.logger, this.runtime.queryTimeoutMs) : null;
    let failure: { error: unknown } | null = null; // what the handler threw, if it did
    try {
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
        lease.releasedRemotely();
        this.events.emit('lease:released', lease.info(), true);
      } else {
        await lease.release().catch((error: unknown) => {
          this.settings.logger.warn({ event: 'lease:release-failed', lease: name, err: String(error) }, 'release failed; the lease ends by its TTL');
        });
      }
    }
  }

  /** Every lease with its state, holder, fence and time left (leasehold.lease_status). */
  async leases(): Promise<LeaseStatus[]> {
    this.throwIfClosed();
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
    }>(this.runtime.controlPool, 'select * from leasehold.lease_status order by name', [], this.runtime.queryTimeoutMs, this.runtime.where);
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
   */
  async forceRelease(name: string): Promise<{ released: boolean; previousHolder: string | null; previousFence: number | null; fence: number | null }> {
    this.throwIfClosed();
    checkLeaseName(name);
    const { rows } = await timedQuery<{ released: boolean; previous_holder: string | null; previous_fence: string | null; fence: string | null }>(
      this.runtime.controlPool,
      'select * from leasehold.force_release($1)',
      [name],
      this.runtime.queryTimeoutMs,
      this.runtime.where,
    );
    const row = rows[0];
    this.settings.logger.warn({ event: 'lease:force-released', lease: name, previousHolder: row?.previous_holder, previousFence: row?.previous_fence }, `lease "${name}" force-released`);
    return {
      released: row?.released ?? false,
      previousHolder: row?.previous_holder ?? null,
      previousFence: row?.previous_fence == null ? null : parseFence(row.previous_fence),
      fence: row?.fence == null ? null : parseFence(row.fence),
    };
  }

  /** @internal for the scheduler: the runtime, the liveness key, and adoption of leases claimed in SQL. */
  internals(): {
    runtime: LeaseRuntime;
    clock: DatabaseClock;
    livenessKey(): string | null;
    adopt(grant: LeaseGrant, heartbeatMs: number, tookOver: boolean): Lease;
  } {
    return {
      runtime: this.runtime,
      clock: this.runtime.clock,
      livenessKey: () => this.liveness?.key ?? null,
      adopt: (grant, heartbeatMs, tookOver) => {
        this.throwIfClosed();
        const lease = new Lease(grant, this.runtime);
        this.active.add(lease);
        if (grant.holderKey !== null && this.liveness?.key !== grant.holderKey) lease.markLost('liveness-lost');
        else lease.startHeartbeat(heartbeatMs);
        this.events.emit('lease:acquired', { ...lease.info(), expiresAt: grant.expiresAt, tookOver });
        return lease;
      },
    };
  }

  /**
   * @internal the database clock stepped: report it, and check every held lease against the
   * new database time (a forward step past a lease's expiry loses it now, not at its next heartbeat).
   */
  clockStepped(step: ClockStep): void {
    const seconds = `${step.deltaMs > 0 ? '+' : ''}${(step.deltaMs / 1000).toFixed(1)} s`;
    this.settings.logger.warn(
      {
        event: 'clock:step',
        deltaMs: step.deltaMs,
        databaseTime: step.databaseTime.toISOString(),
        expected: step.expected.toISOString(),
        heldLeases: this.active.size,
      },
      `the database clock stepped ${seconds} (now ${step.databaseTime.toISOString()}); ` +
        (step.deltaMs > 0 ? 'leases whose expiry it passed are lost' : 'leases keep their local deadlines; scheduling follows the database time'),
    );
    this.events.emit('clock:step', { deltaMs: step.deltaMs, databaseTime: step.databaseTime, expected: step.expected });
    const now = this.runtime.clock.now();
    for (const lease of [...this.active]) lease.clockStepped(now, step.deltaMs);
  }

  /** @internal the liveness session dropped: every lease taken under its key is lost. */
  livenessLost(key: string): void {
    for (const lease of [...this.active]) {
      if (lease.holderKey === key) lease.markLost('liveness-lost');
    }
  }

  /** Releases held leases (best effort), stops the liveness session and closes owned pools. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.clockProbe);
    await Promise.allSettled([...this.active].map((lease) => lease.release()));
    await this.liveness?.close();
    await Promise.allSettled(this.ownedPools.map((pool) => pool.end()));
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.close();
  }

  private throwIfClosed(): void {
    if (this.closed) throw new ClosedError();
  }
}

/** One readable line for a skip: who holds the lease, since when, until when. */
export function describeSkip(skip: NotAcquired): string {
  const held = skip.since ? ` for ${((skip.databaseTime.getTime() - skip.since.getTime()) / 1000).toFixed(1)}s` : '';
  switch (skip.reason) {
    case 'held':
      return `skipped "${skip.name}": held by ${skip.holder ?? 'unknown'} (fence ${skip.fence})${held}, until ${skip.until?.toISOString()}`;
    case 'holder-committing':
      return `skipped "${skip.name}": ${skip.holder ?? 'the holder'} (fence ${skip.fence}) is committing a fenced transaction`;
    case 'being-acquired':
      return `skipped "${skip.name}": another acquirer is taking the lease right now`;
    case 'slot-taken':
      return `skipped "${skip.name}": slot already claimed (last slot ${skip.lastSlot?.toISOString()})`;
    case 'slot-not-due':
      return `skipped "${skip.name}": slot is not due yet by the database clock`;
  }
}

function translateSqlError(error: unknown): unknown {
  const code = (error as { code?: string }).code;
  if (code && code in SQL_ERRORS) {
    return new InvalidArgumentError(SQL_ERRORS[code] as string, (error as Error).message);
  }
  return error;
}

function defaultHolder(): string {
  return `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
}

/**
 * Connects to PostgreSQL (options.connectionString, else DATABASE_URL, else options.pool),
 * migrates or checks the schema, and starts the liveness session. Fails fast with a
 * DatabaseUnavailableError when the server cannot be reached.
 */
export async function createLeasehold(options: LeaseholdOptions = {}): Promise<Leasehold> {
  checkOptionKeys(options, LEASEHOLD_OPTION_KEYS, 'createLeasehold()');
  const connectionString = resolveConnectionString(options);
  if (!connectionString && !options.pool) {
    throw new InvalidArgumentError(
      'connectionString',
      'No database given: set DATABASE_URL, or pass { connectionString } or { pool } to createLeasehold().',
    );
  }
  const holder = checkHolder(options.holder ?? defaultHolder());
  const queryTimeoutMs = durationSetting(options.queryTimeout, LEASEHOLD_DEFAULTS.queryTimeout, 'queryTimeout');
  const connectTimeoutMs = durationSetting(options.connectTimeout, LEASEHOLD_DEFAULTS.connectTimeout, 'connectTimeout');
  const poolSize = integerSetting(options.poolSize, LEASEHOLD_DEFAULTS.poolSize, 'poolSize');
  const logger = options.logger ?? stderrLogger();
  const events = new LeaseholdEmitter(logger);
  const where = describeConnection(connectionString);
  const onPoolError = (error: Error) =>
    logger.warn({ event: 'connection:error', err: error.message }, 'idle PostgreSQL connection failed; it will be replaced');
  const ownedPools: pg.Pool[] = [];
  const own = (max: number) => {
    const pool = createOwnedPool(connectionString, { max, connectTimeoutMs, applicationName: 'leasehold', onError: onPoolError });
    ownedPools.push(pool);
    return pool;
  };
  // Lease calls get their own small pool so that user work holding every connection of the
  // work pool cannot delay a heartbeat past the TTL.
  const controlPool = connectionString ? own(3) : (options.pool as pg.Pool);
  // Renewals get two connections of their own: the process's own acquire and claim bursts
  // queue on the control pool and would otherwise delay heartbeats past the TTL.
  const renewPool = connectionString ? own(2) : (options.pool as pg.Pool);
  let leasehold: Leasehold | undefined;
  const clock = new DatabaseClock(renewPool, queryTimeoutMs, where, { onStep: (step) => leasehold?.clockStepped(step) });
  const workPool = options.pool ?? own(poolSize);

  let replication: ReplicationReport | null = null;
  try {
    const schema = options.migrate === false ? 'check' : 'migrate';
    ({ replication } = await connectAndCheck(dbHandle(controlPool, { where, timeoutMs: queryTimeoutMs }), schema));
  } catch (error) {
    await Promise.allSettled(ownedPools.map((pool) => pool.end()));
    throw error;
  }

  let liveness: LivenessSession | undefined;
  if (options.liveness !== false) {
    const livenessUrl = typeof options.liveness === 'object' ? options.liveness.connectionString : connectionString;
    liveness = new LivenessSession({
      connectionString: livenessUrl,
      applicationName: 'leasehold',
      connectTimeoutMs,
      checkIntervalMs: Math.max(1_000, Math.min(5_000, queryTimeoutMs)),
      queryTimeoutMs,
      logger,
      onLost: (key, error) => {
        leasehold?.livenessLost(key);
        events.emit('liveness:lost', error);
      },
      onReady: (key) => events.emit('liveness:ready', key),
      onClockSample: (databaseTime, sent, received) => clock.observe(databaseTime, sent, received),
    });
    try {
      await liveness.start();
    } catch (error) {
      await Promise.allSettled(ownedPools.map((pool) => pool.end()));
      throw error;
    }
  }
  leasehold = new Leasehold(
    { holder, controlPool, renewPool, clock, workPool, ownedPools, queryTimeoutMs, where, logger, events, replication },
    liveness,
  );
  return leasehold;
}

