// The liveness session: one dedicated connection per client process that holds a
// session-level advisory lock on a random key (leasehold.register_liveness(), or for a
// scheduler worker register_liveness(true): a key its peers find in liveness_locks()). Leases record
// the key; when this process dies its connection closes, the lock goes, and acquire() treats
// the lease as free at once instead of after the TTL.
//
// It needs a direct connection (a transaction-mode pooler such as PgBouncer would hand the
// lock's session to someone else), so it can be pointed at its own URL or turned off.
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { createDirectClient } from '../db/connection.js';
import { unavailable } from '../db/connect-failure.js';
import { describeConnection, loginOf } from '../db/connection-url.js';
import { sendOpening } from '../db/role-timeout.js';
import type { Logger } from '../observe/logger.js';
import { holdsKey } from './liveness-lock.js';
import { LivenessWitness, WitnessBehindPoolerError } from './liveness-witness.js';
import { endedByServer, restartLike } from '../db/server-restart.js';

export interface LivenessSettings {
  connectionString: string | undefined;
  applicationName: string;
  /** A scheduler worker's session: its key is in the workers' range (sql/baseline/1_leases.sql). */
  worker: boolean;
  /**
   * A worker's handler names and holder, registered with each key it gets (register_liveness),
   * so that a schedule whose handler no live worker has is seen (sql/baseline/2_scheduler.sql).
   */
  handlers?: { holder: string; names: readonly string[] } | undefined;
  connectTimeoutMs: number;
  /** How often the session is pinged; a ping that fails or times out drops it. */
  checkIntervalMs: number;
  queryTimeoutMs: number;
  logger: Logger;
  /** Called once per dropped session, with the key whose leases are now lost. */
  onLost: (key: string, error: Error) => void;
  /**
   * The server ended the session (SQLSTATE 57P01/57P02: a restart, a failover, or a terminate):
   * the key's leases are suspended, not lost, until onResumed or onLost says what became of them.
   * `incarnation`: the server incarnation the key was registered on.
   */
  onSuspended: (key: string, incarnation: string, error: Error) => void;
  /**
   * A new session holds `key` after the server ended `previousKey`'s: take back, on `client`
   * (which holds `key`'s lock), the leases of `previousKey` that are still ours. Awaited before
   * the session counts as ready; a throw loses them.
   */
  onResumed: (previousKey: string, key: string, client: pg.Client) => Promise<void>;
  onReady: (key: string) => void;
  /** Each ping reads the database clock too: a sample for the step detector (DatabaseClock.observe). */
  onClockSample?: (databaseTime: Date, sent: number, received: number) => void;
}

type State =
  | { kind: 'idle' }
  | { kind: 'ready'; client: pg.Client; key: string; incarnation: string; timer: NodeJS.Timeout; witness: LivenessWitness | undefined }
  /** The server ended the session; its witness says whether it holds the key now. */
  | { kind: 'handing-over' }
  | { kind: 'reconnecting'; timer: NodeJS.Timeout | undefined }
  | { kind: 'closed' };

export class LivenessSession {
  private state: State = { kind: 'idle' };
  private retryDelayMs = 250;
  /** The key of a session the server ended, whose suspended leases the next session takes back. */
  private resuming: string | null = null;
  /** Sessions that received a shutdown notice (57P01/57P02: an immediate shutdown, a crash) before they ended. */
  private readonly noticed = new WeakSet<pg.Client>();

  constructor(private readonly settings: LivenessSettings) {}

  /** The advisory-lock key of the live session, or null while there is none. */
  get key(): string | null {
    return this.state.kind === 'ready' ? this.state.key : null;
  }

  /** Connects and registers; throws DatabaseUnavailableError when the server cannot be reached. */
  async start(): Promise<void> {
    await this.connect();
  }

  private async connect(): Promise<void> {
    const { settings } = this;
    const client = createDirectClient(settings.connectionString, `${settings.applicationName} liveness`, settings.connectTimeoutMs);
    this.listen(client);
    try {
      await client.connect();
      // Let the server notice a vanished host (no FIN, no RST) and free the lock within
      // about 15 s instead of the OS default of minutes to hours. Ignored on Unix sockets.
      // A direct session of its own, so session settings hold: the pings are bounded by the
      // client's timeout, not a role's statement_timeout (a ping cut short drops every lease);
      // set in an opening, SET first, which that timeout may cancel (role-timeout.ts).
      await sendOpening(
        client,
        `set statement_timeout = ${Math.max(1, Math.round(settings.queryTimeoutMs))};
         select set_config('tcp_keepalives_idle', '5', false), set_config('tcp_keepalives_interval', '2', false),
                set_config('tcp_keepalives_count', '3', false), set_config('tcp_user_timeout', '10000', false)`,
        settings.queryTimeoutMs,
      );
      const { handlers } = settings;
      // every worker, with or without handlers: its holder name is what a dashboard shows for it
      const named = settings.worker && handlers ? handlers : undefined;
      const { rows } = await client.query<{ key: string; incarnation: string }>(
        `select leasehold.register_liveness($1, $2, $3::text[])::text as key, (select incarnation from leasehold.epoch_source()) as incarnation`,
        [settings.worker, named?.holder ?? null, named?.names ?? null],
      );
      const key = rows[0]?.key;
      const incarnation = rows[0]?.incarnation ?? '';
      if (!key) throw new Error('register_liveness returned no key');
      if (!(await holdsKey(client, key, settings.queryTimeoutMs)).ours) {
        throw new Error(
          'the liveness lock is not held by the backend this connection talks to (a transaction pooler such as PgBouncer?): ' +
            'pass liveness: { connectionString: <direct URL> } or liveness: false',
        );
      }
      if (this.state.kind === 'closed') {
        await client.end().catch(() => undefined);
        return;
      }
      const previous = this.resuming;
      if (previous !== null) {
        this.resuming = null;
        await settings.onResumed(previous, key, client).catch((error: unknown) => settings.onLost(previous, asError(error)));
      }
      if (this.closed()) {
        await client.end().catch(() => undefined);
        return;
      }
      this.becomeReady(client, key, incarnation);
      this.retryDelayMs = 250;
      settings.onReady(key);
    } catch (error) {
      client.removeAllListeners('end');
      await client.end().catch(() => undefined);
      throw unavailable(describeConnection(settings.connectionString), error, {
        login: loginOf({ connectionString: settings.connectionString }),
        connectTimeoutMs: settings.connectTimeoutMs,
      });
    }
  }

  private listen(client: pg.Client): void {
    // Without this listener a server restart would crash the host process.
    client.on('error', (error) => this.drop(client, error));
    client.on('end', () => this.drop(client, new Error('liveness connection ended')));
    // an immediate shutdown or a crash says so in a notice (WARNING), then closes the socket
    client.on('notice', (notice) => {
      if (endedByServer(notice)) this.noticed.add(client);
    });
  }

  private becomeReady(client: pg.Client, key: string, incarnation: string): void {
    const timer = setInterval(() => void this.ping(client), this.settings.checkIntervalMs);
    timer.unref();
    this.state = { kind: 'ready', client, key, incarnation, timer, witness: undefined };
    this.armWitness(client, key);
  }

  /** Starts a witness for the ready session `owner` (liveness-witness.ts); again a second later when one ends. */
  private armWitness(owner: pg.Client, key: string): void {
    const { settings } = this;
    const still = () => this.state.kind === 'ready' && this.state.client === owner;
    const retry = () => {
      const timer = setTimeout(() => still() && this.armWitness(owner, key), 1_000);
      timer.unref();
    };
    LivenessWitness.start(
      { connectionString: settings.connectionString, applicationName: settings.applicationName, connectTimeoutMs: settings.connectTimeoutMs, queryTimeoutMs: settings.queryTimeoutMs },
      key,
    )
      .then(async (witness) => {
        // counted only once this session has seen it waiting (liveness-witness.ts)
        const seen =
          still() &&
          (await witness.confirmWaiting(owner, key, settings.queryTimeoutMs).catch((error: unknown) => {
            this.noteEnd(owner, error);
            return false;
          }));
        if (!seen || this.state.kind !== 'ready' || this.state.client !== owner) {
          // granted without being seen waiting: the key was free, so the session's lock is gone
          // (ended unnoticed) and anyone may have taken its leases: lost, then the key let go
          if (witness.granted && still()) this.drop(owner, new Error('the liveness lock was found free'));
          void witness.close();
          if (still()) retry();
          return;
        }
        this.state.witness = witness;
        void witness.outcome.then((outcome) => {
          if (this.state.kind !== 'ready' || this.state.client !== owner || this.state.witness !== witness) return;
          if (outcome.kind === 'granted') {
            // the server freed the lock of `owner` (its end is on its way here): the witness has it
            const { incarnation, timer } = this.state;
            clearInterval(timer);
            owner.removeAllListeners('end');
            owner.removeAllListeners('error');
            owner.on('error', () => undefined);
            (owner as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
            owner.end().catch(() => undefined);
            this.handOver(outcome.client, key, incarnation);
          } else {
            this.state.witness = undefined;
            retry();
          }
        });
      })
      .catch((error: unknown) => {
        if (error instanceof WitnessBehindPoolerError) return this.disable(owner, key);
        settings.logger.debug({ event: 'liveness:witness-retry', err: String(error) }, 'liveness witness could not connect');
        retry();
      });
  }

  /** The witness holds `key` now: it is the liveness session, under the same key; no lease is touched. */
  private handOver(client: pg.Client, key: string, incarnation: string): void {
    client.removeAllListeners('error');
    client.removeAllListeners('end');
    client.removeAllListeners('notice');
    this.listen(client);
    this.becomeReady(client, key, incarnation);
    // named as the liveness session it now is (pg_stat_activity, the dashboard's connections)
    client.query("select set_config('application_name', $1, false)", [`${this.settings.applicationName} liveness`]).catch((error: unknown) => this.noteEnd(client, error));
    this.settings.logger.info({ event: 'liveness:handover' }, 'leasehold liveness session ended by the server; its witness holds the lock now (no lease lost)');
  }

  /**
   * A query on `client` failed: when the server ended the session (57P01/57P02), that error went
   * to the query, and the session's own end then says only "terminated"; remember who ended it.
   */
  private noteEnd(client: pg.Client, error: unknown): void {
    if (endedByServer(error)) this.noticed.add(client);
  }

  private async ping(client: pg.Client): Promise<void> {
    if (this.state.kind !== 'ready' || this.state.client !== client) return;
    const key = this.state.key;
    let ours: boolean;
    try {
      const sent = performance.now();
      const answer = await holdsKey(client, key, this.settings.queryTimeoutMs);
      ours = answer.ours;
      this.settings.onClockSample?.(answer.databaseTime, sent, performance.now());
    } catch (error) {
      this.drop(client, error instanceof Error ? error : new Error(String(error)));
      return;
    }
    if (!ours) this.disable(client, key);
  }

  /**
   * The lock is not held by the backend this connection talks to, or the witness reached the
   * backend that holds it: a transaction-mode pooler (PgBouncer) sits in between and hands our
   * session to other clients. Liveness cannot work
   * there, and left on it would let another client's acquire see a live holder as gone. Turn
   * it off for good; TTLs still free crashed holders' leases.
   */
  private disable(client: pg.Client, key: string): void {
    if (this.state.kind !== 'ready' || this.state.client !== client) return;
    clearInterval(this.state.timer);
    void this.state.witness?.close();
    client.removeAllListeners('end');
    client.end().catch(() => undefined);
    this.state = { kind: 'closed' };
    this.settings.logger.error(
      { event: 'liveness:unusable' },
      'leasehold liveness needs a direct connection, but its advisory lock is not held by the backend it talks to ' +
        '(a transaction pooler such as PgBouncer?). Liveness is now off: pass liveness: { connectionString: <direct URL> } or liveness: false.',
    );
    this.settings.onLost(key, new Error('liveness session is behind a transaction pooler'));
  }

  /**
   * The session is gone. Ended by the server (a shutdown's or a terminate's 57P01, a crash's
   * 57P02): its key's leases are suspended and the next session may take them back; gone any
   * other way (a ping that failed or timed out: the server may hold the lock a while longer and
   * then free it for anyone): lost. Reconnect in the background, at once after a server's end.
   */
  private drop(client: pg.Client, error: Error): void {
    if (this.state.kind !== 'ready' || this.state.client !== client) return;
    const { key, incarnation, timer, witness } = this.state;
    clearInterval(timer);
    // Close the socket for real: after a timeout the server may still hold the lock, and
    // a half-dead connection must not keep it.
    (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
    client.end().catch(() => undefined);
    const byServer = endedByServer(error) || this.noticed.has(client);
    this.settings.logger.debug({ event: 'liveness:dropped', err: String(error), byServer, witness: witness !== undefined }, 'liveness session dropped');
    if (byServer && witness) {
      // the server ended it: the lock passed to the witness, or the witness was ended too
      this.state = { kind: 'handing-over' };
      void this.awaitWitness(witness, key, incarnation, error);
      return;
    }
    void witness?.close();
    this.state = { kind: 'reconnecting', timer: undefined };
    this.decide(byServer, key, incarnation, error);
  }

  private async awaitWitness(witness: LivenessWitness, key: string, incarnation: string, error: Error): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      witness.outcome,
      new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), Math.min(this.settings.queryTimeoutMs, 2_000)))),
    ]);
    clearTimeout(timer);
    if (this.state.kind !== 'handing-over') {
      if (outcome?.kind === 'granted') await outcome.client.end().catch(() => undefined);
      return void witness.close();
    }
    if (outcome?.kind === 'granted') return this.handOver(outcome.client, key, incarnation);
    void witness.close();
    this.state = { kind: 'reconnecting', timer: undefined };
    // both ended by the server (a restart, a failover, or both terminated): the leases wait for
    // the next session's verdict; no word from the witness in time: nothing holds them for us
    this.decide(outcome !== undefined && outcome.byServer, key, incarnation, error);
  }

  private decide(byServer: boolean, key: string, incarnation: string, error: Error): void {
    if (byServer) {
      this.resuming = key;
      this.retryDelayMs = 0;
      this.settings.onSuspended(key, incarnation, error); // also reported as the 'liveness:lost' event
    } else {
      this.settings.onLost(key, error); // reported (and logged) as the 'liveness:lost' event
    }
    this.scheduleReconnect();
  }

  private scheduleReconnect(): void {
    if (this.state.kind !== 'reconnecting') return;
    const delay = this.retryDelayMs;
    // while leases wait to be taken back, a restarting server is asked every 100 ms
    this.retryDelayMs = this.resuming === null ? Math.min(Math.max(this.retryDelayMs, 125) * 2, 10_000) : 100;
    const timer = setTimeout(() => {
      if (this.state.kind !== 'reconnecting') return;
      this.connect().catch((error: unknown) => {
        this.settings.logger.debug({ event: 'liveness:retry', err: String(error) }, 'liveness reconnect failed');
        const previous = this.resuming;
        // not what a restarting server answers (a timeout, an unknown host, a refused login):
        // nothing proves that no one can take the suspended leases now
        if (previous !== null && !restartLike(error)) {
          this.resuming = null;
          this.retryDelayMs = 250;
          this.settings.onLost(previous, asError(error));
        }
        this.scheduleReconnect();
      });
    }, delay);
    timer.unref();
    this.state = { kind: 'reconnecting', timer };
  }

  /** Read through a method: close() may run while connect() awaits. */
  private closed(): boolean {
    return this.state.kind === 'closed';
  }

  /** The suspended leases of `key` were decided elsewhere (lost): the next session does not take them back. */
  forget(key: string): void {
    if (this.resuming === key) this.resuming = null;
  }

  async close(): Promise<void> {
    const state = this.state;
    this.state = { kind: 'closed' };
    this.resuming = null;
    if (state.kind === 'ready') {
      clearInterval(state.timer);
      await state.witness?.close();
      state.client.removeAllListeners('end');
      await state.client.end().catch(() => undefined);
    } else if (state.kind === 'reconnecting' && state.timer) {
      clearTimeout(state.timer);
    }
  }
}

function asError(error: unknown): Error {
  return error instanceof Error ? error : new Error(String(error));
}
