// The liveness witness: a second direct session of the client that waits for the liveness lock
// (pg_advisory_lock(key), blocking) while the liveness session holds it. When the server ends the
// liveness session alone (pg_terminate_backend, a proxy or NAT that cut it, a server-side timeout)
// the lock manager grants the lock to the waiting witness in the same step that releases it: at
// no instant is the key free, so no peer can take the client's leases, and the witness carries
// on as the liveness session under the same key. When the server ends both (a restart, a
// failover, every session of the client terminated) the witness ends too, and the leases wait
// for the next session's verdict (liveness.ts, reconfirm.ts).
//
// A dead client's sockets close, the witness's wait with them: takeover stays immediate. The wait
// holds no granted lock, so liveness_locks() and worker_keys() do not list the witness.
import type pg from 'pg';
import { createDirectClient } from '../db/connection.js';
import { sendOpening } from '../db/role-timeout.js';
import { endedByServer } from '../db/server-restart.js';

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

export class LivenessWitness {
  /** Settles once: the lock was granted, or the session ended first. */
  readonly outcome: Promise<WitnessOutcome>;
  private settle!: (outcome: WitnessOutcome) => void;
  private noticed = false;
  private settled = false;

  private constructor(private readonly client: pg.Client) {
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
    } catch (error) {
      witness.settled = true;
      client.removeAllListeners('end');
      await client.end().catch(() => undefined);
      throw error;
    }
    client.query('select pg_advisory_lock($1::bigint)', [key]).then(
      () => witness.finish({ kind: 'granted', client }),
      (error: unknown) => witness.finish({ kind: 'ended', error: error instanceof Error ? error : new Error(String(error)), byServer: witness.noticed || endedByServer(error) }),
    );
    return witness;
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
