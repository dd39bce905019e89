// Run-now and backfill requests (leasehold.run_requests, sql/baseline/4_control.sql): the worker
// looks for pending requests of its jobs when notified of one (change-listener.ts), else every
// REQUEST_POLL_MS, with one cheap statement (an
// index over pending requests only, empty almost always), and when there are some, takes them
// with leasehold.claim_requests(), which decides each under the job's lease row lock by the
// job's overlap policy. A claimed request runs through the same machinery as a scheduled slot
// (RunSet.launch: heartbeat, signal, fenced transactions, retries, finish and history).
import { performance } from 'node:perf_hooks';
import { timedQuery } from '../db/connection.js';
import type { LeaseTracker } from '../lease/tracker.js';
import { NOTIFIED_POLL_MS } from './change-listener.js';
import type { Logger } from '../observe/logger.js';
import type { ClaimRow } from './claims.js';
import type { JobDefinition } from '../job/job.js';
import type { JobState, RunSet } from './runs.js';

/**
 * How often a worker looks for pending requests: the upper bound of the wait between
 * `control.runNow()` and the claim (plus one claim round trip), and after a run of the job
 * frees the lease, for a buffered run now or the next backfill slot. One indexed probe per
 * worker per period when nothing is pending (docs/scheduler.md, "Run now").
 */
export const REQUEST_POLL_MS = 500;
/** Requests one claim_requests() call takes at most (one per job per call). */
const CLAIM_LIMIT = 100;

interface RequestRow {
  request_id: string;
  job: string;
  kind: 'manual' | 'backfill';
  slot: Date;
  requested_by: string;
  claimed: boolean;
  token: string | null;
  fence: string | null;
  expires_at: Date | null;
  holder: string | null;
  holder_fence: string | null;
  took_over: boolean;
  database_time: Date;
}

export interface RequestParts {
  tracker: LeaseTracker;
  runs: RunSet;
  logger: Logger;
  holder: string;
  /** The worker's job of that name now (jobs defined as data come and go while it runs). */
  stateOf: (name: string) => JobState | undefined;
  /** Claims a scheduled slot that was buffered behind a request's run (the engine's claim). */
  claimBuffered: (job: JobDefinition, slot: Date) => void;
}

export class RequestPoller {
  private timer: NodeJS.Timeout | undefined;
  private polling: Promise<void> | null = null;
  private again = false;
  private running = false;
  /** New requests arrive as notifications (change-listener.ts): the probe is the slow fallback. */
  private notified = false;
  /** Requests of this worker's jobs were pending at the last look (waiting for a lease: nothing notifies its release). */
  private pending = false;

  constructor(private readonly parts: RequestParts) {}

  start(): void {
    this.running = true;
    this.arm(this.periodMs);
  }

  /** Stops looking and waits for a look in flight. */
  async stop(): Promise<void> {
    this.running = false;
    clearTimeout(this.timer);
    await this.polling;
  }

  /**
   * While notified, a look every NOTIFIED_POLL_MS heals a lost notification; while requests of
   * this worker's jobs are pending (waiting for a lease held elsewhere) it still looks every
   * REQUEST_POLL_MS.
   */
  setNotified(notified: boolean): void {
    this.notified = notified;
  }

  private get periodMs(): number {
    return this.notified && !this.pending ? NOTIFIED_POLL_MS : REQUEST_POLL_MS;
  }

  /** Looks again now (a request's run ended: a buffered run now or the next backfill slot may start; a notification). */
  poke(): void {
    if (!this.running) return;
    if (this.polling) this.again = true;
    else this.arm(0);
  }

  private arm(ms: number): void {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.polling = this.poll().finally(() => {
        this.polling = null;
        if (!this.running) return;
        const now = this.again;
        this.again = false;
        this.arm(now ? 0 : this.periodMs);
      });
    }, ms);
  }

  private async poll(): Promise<void> {
    const { tracker, logger } = this.parts;
    const runtime = tracker.runtime;
    try {
      // The probe: which jobs have pending requests (reads the partial index of pending rows).
      const probe = await timedQuery<{ job: string }>(
        runtime.controlPool,
        "select distinct job from leasehold.run_requests where state = 'pending'",
        [],
        runtime.queryTimeoutMs,
        runtime.where,
      );
      const jobs = probe.rows.map((row) => row.job).filter((job) => this.parts.stateOf(job) !== undefined);
      this.pending = jobs.length > 0;
      if (jobs.length === 0 || !this.running) return;
      const holderKey = tracker.livenessKey();
      const sentAt = performance.now();
      const { rows } = await timedQuery<RequestRow & Record<string, unknown>>(
        runtime.controlPool,
        'select * from leasehold.claim_requests($1, $2, $3::bigint, $4)',
        [jobs, this.parts.holder, holderKey, CLAIM_LIMIT],
        runtime.queryTimeoutMs,
        runtime.where,
      );
      if (!this.running) return await this.handBack(rows);
      let claimed = 0;
      for (const row of rows) {
        if (row.claimed) {
          claimed++;
          this.launch(row, holderKey, sentAt);
        } else {
          logger.info(
            { event: 'request:skipped', job: row.job, request: row.request_id, holder: row.holder, holderFence: Number(row.holder_fence) },
            `run now ${row.request_id} of "${row.job}" skipped: held by ${row.holder ?? 'another run'} (fence ${row.holder_fence ?? '?'})`,
          );
        }
      }
      // more may be waiting (another job's, or the next of a job under overlap allow)
      if (claimed > 0) this.again = true;
    } catch (error) {
      logger.warn({ event: 'request:claim-failed', err: String(error) }, 'looking for run-now and backfill requests failed; trying again');
    }
  }

  /** Stopping began while the claim ran: record what it claimed as aborted, unrun (as the engine does with slots). */
  private async handBack(rows: RequestRow[]): Promise<void> {
    const claimed = rows.filter((row) => row.claimed);
    if (claimed.length === 0) return;
    const runtime = this.parts.tracker.runtime;
    await timedQuery(
      runtime.controlPool,
      "select * from leasehold.finish_runs($1, $2, $3::uuid[], array_fill('aborted'::text, array[$4::int]), array_fill('the worker was stopping'::text, array[$4::int]), array_fill(0, array[$4::int]))",
      [claimed.map((r) => r.job), claimed.map((r) => r.fence), claimed.map((r) => r.token), claimed.length],
      runtime.queryTimeoutMs,
      runtime.where,
    ).catch((error: unknown) => this.parts.logger.warn({ event: 'request:return-failed', err: String(error) }, 'could not hand back requests claimed while stopping; their leases end by TTL'));
  }

  private launch(row: RequestRow, holderKey: string | null, sentAt: number): void {
    const state = this.parts.stateOf(row.job);
    if (!state) return;
    const claim: ClaimRow = {
      job: row.job,
      slot: row.slot,
      claimed: true,
      reason: 'claimed',
      token: row.token,
      fence: row.fence,
      expires_at: row.expires_at,
      previous_slot: null,
      holder: row.holder,
      holder_fence: null,
      holder_slot: null,
      holder_since: null,
      skip_recorded: false,
      buffered: false,
      database_time: row.database_time,
      took_over: row.took_over,
      trigger: row.kind,
      request_id: row.request_id,
    };
    // When it ends the lease is free: a scheduled slot buffered behind it starts at once, as
    // behind a scheduled run, and a waiting request of the job may start.
    this.parts.runs.launch(state, claim, holderKey, sentAt, (report) => {
      if (report.nextBufferedSlot) this.parts.claimBuffered(state.job, report.nextBufferedSlot);
      this.poke();
    });
  }
}
