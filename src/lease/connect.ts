// Opening a client: pools, schema check or migration, replication check, liveness session,
// the database clock, the event emitter with the logger subscribed, and the lease tracker.
import { randomBytes } from 'node:crypto';
import { hostname } from 'node:os';
import type pg from 'pg';
import { createOwnedPool, describeConnection, resolveConnectionString } from '../db/connection.js';
import { checkConnectionString } from '../db/connection-url.js';
import { connectAndCheck } from '../db/connect-check.js';
import { dbHandle } from '../db/handle.js';
import { pinGroup } from '../db/pinned.js';
import { InvalidArgumentError } from '../errors.js';
import { LeaseholdEmitter } from '../observe/events.js';
import { logEvents } from '../observe/log-events.js';
import { stderrLogger, type Logger } from '../observe/logger.js';
import { DatabaseClock } from '../schedule/database-clock.js';
import { checkHolder } from '../validate/names.js';
import { checkOptionKeys } from '../validate/options.js';
import { durationSetting, integerSetting } from '../validate/settings.js';
import { LEASEHOLD_DEFAULTS } from './defaults.js';
import type { LeaseholdOptions } from './types.js';
import { LivenessSession } from './liveness.js';
import { LEASEHOLD_OPTION_KEYS } from './option-keys.js';
import type { ReplicationReport } from '../db/replication.js';
import { LeaseTracker } from './tracker.js';
import { Deadlines } from './deadlines.js';

/** Everything a Leasehold is made of. */
export interface ClientParts {
  holder: string;
  tracker: LeaseTracker;
  liveness: LivenessSession | undefined;
  ownedPools: pg.Pool[];
  replication: ReplicationReport | null;
  logger: Logger;
  events: LeaseholdEmitter;
}

function defaultHolder(): string {
  return `${hostname()}:${process.pid}:${randomBytes(3).toString('hex')}`;
}

/** What the client is for: a scheduler worker's liveness key is one its peers list (shares.ts). */
export type ClientKind = 'client' | 'worker';

/** `handlers`: a worker's handler names, registered with its liveness key (liveness.ts). */
export async function openClient(options: LeaseholdOptions, kind: ClientKind, handlers: readonly string[] = []): Promise<ClientParts> {
  checkOptionKeys(options, LEASEHOLD_OPTION_KEYS, 'createLeasehold()');
  const connectionString = resolveConnectionString(options);
  if (!connectionString && !options.pool) {
    throw new InvalidArgumentError(
      'connectionString',
      'No database given: set DATABASE_URL, or pass { connectionString } or { pool } to createLeasehold().',
    );
  }
  if (connectionString) checkConnectionString(connectionString, options.connectionString === undefined ? 'DATABASE_URL' : 'connectionString');
  if (typeof options.liveness === 'object' && options.liveness.connectionString) {
    checkConnectionString(options.liveness.connectionString, 'liveness.connectionString');
  }
  const holder = checkHolder(options.holder ?? defaultHolder());
  const queryTimeoutMs = durationSetting(options.queryTimeout, LEASEHOLD_DEFAULTS.queryTimeout, 'queryTimeout');
  const connectTimeoutMs = durationSetting(options.connectTimeout, LEASEHOLD_DEFAULTS.connectTimeout, 'connectTimeout');
  const poolSize = integerSetting(options.poolSize, LEASEHOLD_DEFAULTS.poolSize, 'poolSize');
  const logger = options.logger ?? stderrLogger();
  const events = new LeaseholdEmitter(logger);
  logEvents(events, logger);
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
  let tracker: LeaseTracker | undefined;
  const clock = new DatabaseClock(renewPool, queryTimeoutMs, where, { onStep: (step) => tracker?.clockStepped(step) });
  const workPool = options.pool ?? own(poolSize);

  // Lease calls and renewals run pinned when the role's settings do not suit the protocol
  // (src/db/pinned.ts): both pools at once, said once. Fenced transactions are the caller's.
  pinGroup([controlPool, renewPool], (reason) =>
    logger.warn(
      { event: 'connection:pinned', reason },
      `leasehold runs each of its statements in a READ COMMITTED transaction of its own with its own timeouts (3 round trips instead of 1): ${reason}`,
    ),
  );
  let replication: ReplicationReport | null = null;
  try {
    const schema = options.migrate === false ? 'check' : 'migrate';
    ({ replication } = await connectAndCheck(dbHandle(controlPool, { where, timeoutMs: queryTimeoutMs }), { schema, writes: true }));
  } catch (error) {
    await Promise.allSettled(ownedPools.map((pool) => pool.end()));
    throw error;
  }

  let liveness: LivenessSession | undefined;
  /** Keys of sessions the server ended whose leases wait to be taken back. */
  const suspendedKeys = new Set<string>();
  if (options.liveness !== false) {
    const livenessUrl = typeof options.liveness === 'object' ? options.liveness.connectionString : connectionString;
    liveness = new LivenessSession({
      connectionString: livenessUrl,
      applicationName: 'leasehold',
      worker: kind === 'worker',
      handlers: { holder, names: handlers },
      connectTimeoutMs,
      checkIntervalMs: Math.max(1_000, Math.min(5_000, queryTimeoutMs)),
      queryTimeoutMs,
      logger,
      onLost: (key, error) => {
        tracker?.livenessLost(key);
        // a drop that suspended the leases was reported when it happened
        if (!suspendedKeys.delete(key)) events.emit('liveness:lost', error);
      },
      onSuspended: (key, incarnation, error) => {
        suspendedKeys.add(key);
        events.emit('liveness:lost', error);
        void tracker?.livenessSuspended(key, incarnation).then((lost) => {
          if (lost) liveness?.forget(key);
        });
      },
      onResumed: async (previousKey, key, client) => {
        suspendedKeys.delete(previousKey);
        if (!tracker) return;
        const { kept, lost } = await tracker.resumed(previousKey, key, client);
        if (kept + lost > 0) {
          logger.info(
            { event: 'liveness:reconfirmed', kept, lost },
            `leasehold took back ${kept} lease(s) after the server ended its liveness session (${lost} lost)`,
          );
        }
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
  const session = liveness;
  tracker = new LeaseTracker(
    { controlPool, renewPool, clock, workPool, queryTimeoutMs, where, logger, events, deadlines: new Deadlines() },
    () => session?.key ?? null,
  );
  return { holder, tracker, liveness, ownedPools, replication, logger, events };
}
