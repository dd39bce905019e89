// Changes pushed instead of polled: one direct connection of its own LISTENs on channel
// leasehold_changes, where a statement trigger announces every write of leasehold.jobs
// (definitions, pause, resume, removal) and every new run_requests row (notify_changes,
// sql/baseline/2_scheduler.sql). A notification pokes the schedule feed or the request poller at
// once, and while listening their polls slow to NOTIFIED_POLL_MS (a lost notification still
// heals). LISTEN alone proves nothing: through a transaction-pooling PgBouncer it succeeds and no
// notification ever arrives. So the listener proves delivery: a probe sent from the control pool
// (another connection; sent on its own, a pooler could hand its transaction to the listening
// server connection and deliver the probe to itself) must arrive within PROBE_WAIT_MS, at the
// start and every NOTIFIED_POLL_MS after. When it does not, or the connection fails, the worker
// polls as before and tries again later, with backoff.
import { randomBytes } from 'node:crypto';
import type pg from 'pg';
import { createDirectClient, timedQuery } from '../db/connection.js';
import type { LeaseRuntime } from '../lease/runtime.js';
import type { Logger } from '../observe/logger.js';

export const CHANNEL = 'leasehold_changes';
/** How often the feed and the request poller look anyway while notifications arrive. */
export const NOTIFIED_POLL_MS = 30_000;
/** How long a probe may take to come back before notifications are taken not to arrive. */
const PROBE_WAIT_MS = 2_000;
/** Waits before listening again after a failure: doubled each time, from the first to the last. */
const RETRY_MIN_MS = 5_000;
const RETRY_MAX_MS = 300_000;

export type ChangeKind = 'jobs' | 'requests';

export interface ChangeListenerParts {
  /** A direct connection: the liveness connection string when one is given, else the main one. */
  connectionString: string;
  connectTimeoutMs: number;
  /** Sends the probes (its control pool). */
  runtime: LeaseRuntime;
  logger: Logger;
  onChange: (kind: ChangeKind) => void;
  /** Listening began (true) or ended (false): the polls change their pace, and look once at once. */
  onListening: (listening: boolean) => void;
}

export class ChangeListener {
  private client: pg.Client | undefined;
  private listening = false;
  private running = false;
  private timer: NodeJS.Timeout | undefined;
  private retryMs = RETRY_MIN_MS;
  /** The probe awaited, and what settles its wait (true: it arrived). */
  private probe: { payload: string; settle: (arrived: boolean) => void } | undefined;
  /** Whether the current streak of failures was logged. */
  private reported = false;
  private attempt: Promise<void> | undefined;

  constructor(private readonly parts: ChangeListenerParts) {}

  get isListening(): boolean {
    return this.listening;
  }

  start(): void {
    this.running = true;
    this.attempt = this.listen();
  }

  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    this.probe?.settle(false);
    await this.attempt;
    await this.drop();
  }

  /** Connects, LISTENs and proves delivery; on success checks again every NOTIFIED_POLL_MS. */
  private async listen(): Promise<void> {
    const { connectionString, connectTimeoutMs } = this.parts;
    const client = createDirectClient(connectionString, 'leasehold notifications', connectTimeoutMs);
    this.client = client;
    client.on('notification', (message) => this.received(message.payload ?? ''));
    client.on('error', (error) => this.failed(client, `the connection failed: ${error.message}`));
    client.on('end', () => this.failed(client, 'the connection ended'));
    try {
      await client.connect();
      await client.query(`listen ${CHANNEL}`);
      if (!this.running || this.client !== client) return;
      if (!(await this.proveDelivery())) {
        this.failed(client, 'a test notification did not arrive (a connection pooler in transaction mode cannot deliver them)');
        return;
      }
    } catch (error) {
      this.failed(client, `could not listen: ${error instanceof Error ? error.message : String(error)}`);
      return;
    }
    if (!this.running || this.client !== client) return;
    this.listening = true;
    this.retryMs = RETRY_MIN_MS;
    this.reported = false;
    this.parts.logger.info({ event: 'worker:notifications', listening: true }, 'listening for schedule changes and run requests (LISTEN/NOTIFY)');
    this.parts.onListening(true);
    this.recheck(client);
  }

  /** Every NOTIFIED_POLL_MS: a probe, so that a connection gone silent is noticed. */
  private recheck(client: pg.Client): void {
    this.timer = setTimeout(() => {
      this.attempt = this.proveDelivery().then((ok) => {
        if (!this.running || this.client !== client) return;
        if (ok) this.recheck(client);
        else this.failed(client, 'a test notification did not arrive');
      });
    }, NOTIFIED_POLL_MS);
  }

  /** Sends a probe from the control pool and waits for it on the listening connection. */
  private async proveDelivery(): Promise<boolean> {
    const payload = `probe:${randomBytes(6).toString('hex')}`;
    let timer: NodeJS.Timeout | undefined;
    const arrived = new Promise<boolean>((resolve) => {
      this.probe = { payload, settle: resolve };
      timer = setTimeout(() => resolve(false), PROBE_WAIT_MS);
    });
    try {
      const { runtime } = this.parts;
      await timedQuery(runtime.controlPool, 'select pg_notify($1, $2)', [CHANNEL, payload], runtime.queryTimeoutMs, runtime.where);
      return await arrived;
    } catch {
      return false;
    } finally {
      clearTimeout(timer);
      this.probe = undefined;
    }
  }

  private received(payload: string): void {
    if (this.probe?.payload === payload) return this.probe.settle(true);
    // another worker's probe, or a payload of a later version: nothing to read
    if (!this.listening) return;
    if (payload === 'jobs' || payload === 'requests') this.parts.onChange(payload);
  }

  /** Back to polling (once per failure of this connection), and listening again after a while. */
  private failed(client: pg.Client, why: string): void {
    if (this.client !== client) return;
    this.client = undefined;
    void client.end().catch(() => undefined);
    clearTimeout(this.timer);
    const was = this.listening;
    this.listening = false;
    if (!this.running) return;
    if (was) this.parts.onListening(false);
    if (!this.reported || was) {
      this.parts.logger.warn(
        { event: 'worker:notifications', listening: false, reason: why },
        `not listening for changes: ${why}; polling for them instead`,
      );
    }
    this.reported = true;
    const wait = this.retryMs;
    this.retryMs = Math.min(RETRY_MAX_MS, this.retryMs * 2);
    this.timer = setTimeout(() => {
      if (this.running) this.attempt = this.listen();
    }, wait);
  }

  private async drop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.listening = false;
    await client?.end().catch(() => undefined);
  }
}
