// The liveness witness: a second direct session of the client that waits for the liveness lock
// (pg_advisory_lock(key), blocking) while the liveness session holds it. When the server ends the
// liveness session alone (pg_terminate_backend, a proxy or NAT that cut it, a server-side timeout)
// the lock manager grants the lock to the waiting witness in the same step that releases it: at
// no instant is the key free, so no peer can take the client's leases, and the witness carries
// on as the liveness session under the same key. When the server ends both (a restart, a
// failover, every session of the client terminated) the witness ends too, and the leases wait
// for the next session's verdict (liveness.ts, reconfirm.ts).
//
// The grant proves that no instant passed with the key free only if the witness was already
// waiting when the liveness session ended. A witness that connects after the lock has gone (its
// session ended unnoticed, every session terminated at once) is granted the free key at once:
// so a witness counts only once the liveness session has seen it waiting in pg_locks
// (confirmWaiting), and a grant before that loses the leases instead of carrying them on.
//
// A dead client's sockets close, the witness's wait with them: takeover stays immediate. The wait
// holds no granted lock, so liveness_locks() does not list the witness.
import type pg from 'pg';
import { createDirectClient } from '../db/connection.js';
import { sendOpening } from '../db/role-timeout.js';
import { endedByServer } from '../db/server-restart.js';
import { holdsKey } from './liveness-lock.js';

export type WitnessOutcome =
  /** The lock passed to the witness: the liveness session is gone on the server, the key lives on here. */
  | { kind: 'granted'; client: pg.Client }
  /** The witness ended before it got the lock; `byServer`: ended by the server (57P01/57P02). */
  | { kind: 'ended'; error: Error; byServer: boolean };

export interface WitnessSettings {
  connectionString: string | undefined;
  applicationName: string;
  connectTimeoutMs: number;
  queryTimeoutMs: number;
}

/** The witness landed on the server connection that holds the liveness lock: a transaction pooler is in between. */
export class WitnessBehindPoolerError extends Error {
  constructor() {
    super('the liveness witness reached the backend that holds the liveness lock (a transaction pooler such as PgBouncer?)');
    this.name = 'WitnessBehindPoolerError';
  }
}

export class LivenessWitness {
  /** Settles once: the lock was granted, or the session ended first. */
  readonly outcome: Promise<WitnessOutcome>;
  private settle!: (outcome: WitnessOutcome) => void;
  private noticed = false;
  private settled = false;
  private holds = false;

  private constructor(
    private readonly client: pg.Client,
    /** The witness's backend, to find its wait in pg_locks. */
    private pid = 0,
  ) {
    this.outcome = new Promise((resolve) => (this.settle = resolve));
    const ended = (error: Error) => this.finish({ kind: 'ended', error, byServer: this.noticed || endedByServer(error) });
    client.on('error', ended);
    client.on('end', () => ended(new Error('liveness witness connection ended')));
    client.on('notice', (notice) => {
      if (endedByServer(notice)) this.noticed = true;
    });
  }

  /** Connects and starts waiting for `key`; throws when the server cannot be reached. */
  static async start(settings: WitnessSettings, key: string): Promise<LivenessWitness> {
    const client = createDirectClient(settings.connectionString, `${settings.applicationName} liveness witness`, settings.connectTimeoutMs);
    const witness = new LivenessWitness(client);
    try {
      await client.connect();
      // the wait must not be cut short by a role's timeouts; the server notices a vanished host
      // as it does for the liveness session
      await sendOpening(
        client,
        `set statement_timeout = 0; set lock_timeout = 0;
         select set_config('tcp_keepalives_idle', '5', false), set_config('tcp_keepalives_interval', '2', false),
                set_config('tcp_keepalives_count', '3', false), set_config('tcp_user_timeout', '10000', false)`,
        settings.queryTimeoutMs,
      );
      const held = await holdsKey(client, key, settings.queryTimeoutMs);
      // the backend already holds the key: the witness reached the liveness session's own server
      // connection, which only a transaction pooler does (an advisory lock never waits on itself)
      if (held.ours) throw new WitnessBehindPoolerError();
      witness.pid = held.pid;
    } catch (error) {
      witness.settled = true;
      client.removeAllListeners('end');
      await client.end().catch(() => undefined);
      throw error;
    }
    client.query('select pg_advisory_lock($1::bigint)', [key]).then(
      () => {
        witness.holds = true;
        witness.finish({ kind: 'granted', client });
      },
      (error: unknown) => witness.finish({ kind: 'ended', error: error instanceof Error ? error : new Error(String(error)), byServer: witness.noticed || endedByServer(error) }),
    );
    return witness;
  }

  /** The witness holds the key (granted), whether or not that proves anything. */
  get granted(): boolean {
    return this.holds;
  }

  /**
   * Asks, on the liveness session `owner` (which holds the key), until the witness's wait shows in
   * pg_locks; resolves whether it did within `timeoutMs`. A waiting lock request leaves the queue
   * only by being granted or by its session ending, so once seen, a grant is a hand-over.
   */
  async confirmWaiting(owner: pg.Client, key: string, timeoutMs: number): Promise<boolean> {
    const deadline = Date.now() + timeoutMs;
    while (!this.settled) {
      const { rows } = await owner.query<{ waiting: boolean }>({
        text: `select exists (select 1 from pg_locks k
                               where k.locktype = 'advisory' and k.objsubid = 1 and not k.granted and k.pid = $1
                                 and ((k.classid::bigint << 32) | k.objid::bigint) = $2::bigint) as waiting`,
        values: [this.pid, key],
        query_timeout: timeoutMs,
      } as pg.QueryConfig);
      if (rows[0]?.waiting === true) return true;
      if (Date.now() >= deadline) return false;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return false;
  }

  private finish(outcome: WitnessOutcome): void {
    if (this.settled) return;
    this.settled = true;
    if (outcome.kind === 'ended') this.discard();
    this.settle(outcome);
  }

  /** Leaves the wait: ends the session (its wait is cancelled with it). */
  close(): Promise<void> {
    this.settled = true;
    this.settle({ kind: 'ended', error: new Error('liveness witness closed'), byServer: false });
    return this.discard();
  }

  private discard(): Promise<void> {
    this.client.removeAllListeners('end');
    (this.client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
    return this.client.end().catch(() => undefined);
  }
}
