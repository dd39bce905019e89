// Prometheus metrics (prom-client) as a subscriber to leasehold's events, plus gauges read from
// leasehold.job_status at scrape time. Nothing in the lease or scheduler core depends on it.
import { createRequire } from 'node:module';
import type client from 'prom-client';
import type pg from 'pg';
import { fleetSummary, liveWorkers, type FleetSummary } from './queries.js';
import type { LeaseholdEvents } from '../observe/events.js';
import { serveEndpoints, type EndpointReply } from './http-endpoint.js';
import { jobStatus, reader, type JobStatus } from './status.js';

/** Anything with typed events: a Leasehold client or a Worker. */
export interface EventSource {
  on<E extends keyof LeaseholdEvents>(event: E, listener: (...args: LeaseholdEvents[E]) => void): () => void;
}

export interface MetricsOptions {
  /** Registry to register on. @default a new Registry */
  registry?: client.Registry | undefined;
  /** Metric name prefix. @default 'leasehold_' */
  prefix?: string | undefined;
  /** Run duration histogram buckets, in seconds. */
  durationBuckets?: number[] | undefined;
  /** Run start lateness histogram buckets, in seconds. */
  latenessBuckets?: number[] | undefined;
}

export interface LeaseholdMetrics {
  readonly registry: client.Registry;
  /** Counts the events of a client or worker; returns a function that stops counting. */
  observe(source: EventSource): () => void;
  /** Reads per-job gauges (lease age, duration/interval ratio, state) from this pool at every scrape. */
  observeDatabase(pool: pg.Pool): void;
  /** The registry's text exposition. */
  metrics(): Promise<string>;
  readonly contentType: string;
}

/**
 * Metrics (prefix `leasehold_`):
 *
 * | name | type | labels | meaning |
 * | --- | --- | --- | --- |
 * | runs_total | counter | job, outcome | finished runs on this process |
 * | run_duration_seconds | histogram | job, outcome | run durations on this process |
 * | skipped_slots_total | counter | job | skips this process recorded (once per slot fleet-wide) |
 * | missed_slots_total | counter | job | missed slots this process recorded |
 * | lease_losses_total | counter | lease, reason | leases lost before release |
 * | takeovers_total | counter | lease | leases taken from a holder that never released |
 * | lease_acquisitions_total | counter | lease | leases taken |
 * | liveness_losses_total | counter | — | liveness sessions dropped |
 * | replication_grants_can_be_lost | gauge | — | 1 when the client's replication check warned (asynchronous standbys, or a standby) |
 * | epoch_source_fallback | gauge | — | 1 when the server refuses the WAL functions and leasehold.epoch() reads a weaker source (docs/high-availability.md) |
 * | clock_steps_total | counter | direction | database clock steps this process noticed (forward, backward) |
 * | job_lease_age_seconds | gauge | job | age of the current lease (0 when idle), from the database |
 * | job_duration_interval_ratio | gauge | job | p95 run duration over 24 h ÷ interval |
 * | job_running | gauge | job | 1 while a run holds the job's lease |
 * | job_skips_24h, job_missed_24h | gauge | job | from leasehold.job_status |
 * | job_runs_24h, job_failed_24h, job_lost_24h, job_timed_out_24h | gauge | job | finished, failed, lost and timed-out runs in 24 h |
 * | jobs, jobs_running, jobs_expired, jobs_failing | gauge | — | fleet counts |
 * | runs_24h | gauge | outcome | the fleet's finished runs in 24 h (succeeded, failed, lost, aborted, timed-out) |
 * | live_workers | gauge | — | liveness sessions present on the database |
 */
export function createMetrics(options: MetricsOptions = {}): LeaseholdMetrics {
  const client = promClient();
  const registry = options.registry ?? new client.Registry();
  const prefix = options.prefix ?? 'leasehold_';
  const registers = [registry];
  const runs = new client.Counter({ name: `${prefix}runs_total`, help: 'Finished scheduled runs, by outcome.', labelNames: ['job', 'outcome'], registers });
  const duration = new client.Histogram({
    name: `${prefix}run_duration_seconds`,
    help: 'Duration of scheduled runs.',
    labelNames: ['job', 'outcome'],
    buckets: options.durationBuckets ?? [0.05, 0.25, 1, 5, 15, 30, 60, 120, 300, 900, 1800, 3600],
    registers,
  });
  const lateness = new client.Histogram({
    name: `${prefix}run_start_lateness_seconds`,
    help: 'How long after its fire time (slot plus jitter offset) each scheduled run started, on the database clock.',
    buckets: options.latenessBuckets ?? [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers,
  });
  const skipped = new client.Counter({ name: `${prefix}skipped_slots_total`, help: 'Slots skipped because the previous run held the lease (counted by the recording worker).', labelNames: ['job'], registers });
  const missed = new client.Counter({ name: `${prefix}missed_slots_total`, help: 'Slots no worker ran (recorded by this process).', labelNames: ['job'], registers });
  const losses = new client.Counter({ name: `${prefix}lease_losses_total`, help: 'Leases lost before they were released.', labelNames: ['lease', 'reason'], registers });
  const takeovers = new client.Counter({ name: `${prefix}takeovers_total`, help: 'Leases taken from a holder that never released them (expired, crashed, replaced).', labelNames: ['lease'], registers });
  const acquisitions = new client.Counter({ name: `${prefix}lease_acquisitions_total`, help: 'Leases acquired.', labelNames: ['lease'], registers });
  const livenessLosses = new client.Counter({ name: `${prefix}liveness_losses_total`, help: 'Liveness sessions dropped (every lease under one is lost).', registers });
  const epochFallback = new client.Gauge({ name: `${prefix}epoch_source_fallback`, help: 'At client start: 1 when leasehold.epoch() cannot read the current WAL file (a weaker source; see docs/high-availability.md).', registers });
  const replicationRisk = new client.Gauge({ name: `${prefix}replication_grants_can_be_lost`, help: '1 when the replication check at client start warned that acknowledged grants can be lost on failover.', registers });
  const clockSteps = new client.Counter({ name: `${prefix}clock_steps_total`, help: 'Steps of the database clock noticed by this process (forward steps expire leases).', labelNames: ['direction'], registers });

  const pools: pg.Pool[] = [];
  // Job gauges read leasehold.job_status at scrape time. prom-client collects all metrics
  // concurrently, so they share one query per scrape (a snapshot reused for a second).
  let snapshot: { at: number; rows: Promise<JobStatus[]> } | undefined;
  const statuses = (): Promise<JobStatus[]> => {
    if (!snapshot || Date.now() - snapshot.at > 1_000) {
      snapshot = { at: Date.now(), rows: Promise.all(pools.map((pool) => jobStatus(pool))).then((all) => all.flat()) };
    }
    return snapshot.rows;
  };
  const jobGauge = (name: string, help: string, read: (job: JobStatus) => number | null) =>
    new client.Gauge({
      name: `${prefix}${name}`,
      help,
      labelNames: ['job'],
      registers,
      async collect() {
        this.reset();
        for (const job of await statuses()) {
          const value = read(job);
          if (value !== null) this.set({ job: job.job }, value);
        }
      },
    });
  jobGauge('job_lease_age_seconds', 'Age of the job’s current lease (0 when idle).', (job) => job.leaseAgeSeconds ?? 0);
  jobGauge('job_duration_interval_ratio', 'p95 run duration over the last 24 h divided by the job’s interval; alert above 0.8.', (job) => job.p95IntervalRatio);
  jobGauge('job_running', '1 while a run holds the job’s lease.', (job) => (job.state === 'running' ? 1 : 0));
  jobGauge('job_skips_24h', 'Skipped slots in the last 24 h.', (job) => job.skips24h);
  jobGauge('job_missed_24h', 'Missed slots in the last 24 h.', (job) => job.missed24h);
  jobGauge('job_runs_24h', 'Finished runs in the last 24 h.', (job) => job.runs24h);
  jobGauge('job_failed_24h', 'Failed runs in the last 24 h.', (job) => job.failed24h);
  jobGauge('job_lost_24h', 'Lost runs in the last 24 h (the lease went before the run finished).', (job) => job.lost24h);
  jobGauge('job_timed_out_24h', 'Timed-out runs in the last 24 h (the run outlived the job’s timeout).', (job) => job.timedOut24h);

  // Fleet gauges: one summary per scrape, like the job gauges.
  let fleet: { at: number; value: Promise<{ summary: FleetSummary; workers: number; succeeded: number; aborted: number }[]> } | undefined;
  const fleetSnapshot = () => {
    if (!fleet || Date.now() - fleet.at > 1_000) {
      fleet = {
        at: Date.now(),
        value: Promise.all(
          pools.map(async (pool) => {
            // through the handle, like jobStatus(): a scrape cannot hang on a blocked statement
            const db = reader(pool, {});
            const [summary, workers, outcomes] = await Promise.all([
              fleetSummary(db),
              liveWorkers(db, 1),
              db.query<{ succeeded: number; aborted: number }>(
                `select count(*) filter (where outcome = 'succeeded')::int as succeeded, count(*) filter (where outcome = 'aborted')::int as aborted
                   from leasehold.runs where finished_at is not null and started_at > now() - interval '24 hours'`,
              ),
            ]);
            const row = outcomes.rows[0]!;
            return { summary, workers: workers.total, succeeded: row.succeeded, aborted: row.aborted };
          }),
        ),
      };
    }
    return fleet.value;
  };
  const fleetGauge = (name: string, help: string, read: (s: FleetSummary, workers: number) => number) =>
    new client.Gauge({
      name: `${prefix}${name}`,
      help,
      registers,
      async collect() {
        if (!pools.length) return;
        this.set((await fleetSnapshot()).reduce((sum, f) => sum + read(f.summary, f.workers), 0));
      },
    });
  // Registered on the first observeDatabase(): unlabelled gauges always print a value, and a
  // worker's own endpoint must not claim `leasehold_live_workers 0` for a fleet it never read.
  let fleetRegistered = false;
  const registerFleetGauges = () => {
    if (fleetRegistered) return;
    fleetRegistered = true;
    fleetGauge('jobs', 'Registered scheduled jobs.', (s) => s.jobs);
    fleetGauge('jobs_running', 'Jobs whose lease is held now.', (s) => s.running);
    fleetGauge('jobs_expired', 'Jobs whose lease expired without a release (holder gone or stalled).', (s) => s.expired);
    fleetGauge('jobs_failing', 'Jobs with at least one failed, lost or timed-out run in the last 24 h.', (s) => s.failing);
    fleetGauge('live_workers', 'Liveness sessions present on the database (live worker and client processes).', (_s, workers) => workers);
    new client.Gauge({
      name: `${prefix}runs_24h`,
      help: 'Finished runs of every job in the last 24 h, by outcome.',
      labelNames: ['outcome'],
      registers,
      async collect() {
        this.reset();
        if (!pools.length) return;
        const all = await fleetSnapshot();
        const total = (read: (f: (typeof all)[number]) => number) => all.reduce((sum, f) => sum + read(f), 0);
        this.set({ outcome: 'succeeded' }, total((f) => f.succeeded));
        this.set({ outcome: 'failed' }, total((f) => f.summary.failed24h));
        this.set({ outcome: 'lost' }, total((f) => f.summary.lost24h));
        this.set({ outcome: 'aborted' }, total((f) => f.aborted));
        this.set({ outcome: 'timed-out' }, total((f) => f.summary.timedOut24h));
      },
    });
  };

  return {
    registry,
    contentType: registry.contentType,
    metrics: () => registry.metrics(),
    observeDatabase(pool) {
      pools.push(pool);
      registerFleetGauges();
    },
    observe(source) {
      const stops = [
        source.on('run:finished', (run) => {
          runs.inc({ job: run.job, outcome: run.outcome });
          duration.observe({ job: run.job, outcome: run.outcome }, run.durationMs / 1000);
        }),
        source.on('run:started', (run) => {
          if (run.lateMs !== null) lateness.observe(Math.max(0, run.lateMs) / 1000);
        }),
        source.on('slot:skipped', (skip) => skipped.inc({ job: skip.job })),
        source.on('slot:missed', (event) => missed.inc({ job: event.job }, event.slots.length)),
        source.on('lease:lost', (lease, error) => losses.inc({ lease: lease.name, reason: error.reason })),
        source.on('lease:acquired', (lease) => {
          acquisitions.inc({ lease: lease.name });
          if (lease.tookOver) takeovers.inc({ lease: lease.name });
        }),
        source.on('liveness:lost', () => livenessLosses.inc()),
        source.on('replication:warning', (report) => {
          if (report.warning) replicationRisk.set(1);
          if (report.epochWarning) epochFallback.set(1);
        }),
        source.on('clock:step', (step) => clockSteps.inc({ direction: step.deltaMs > 0 ? 'forward' : 'backward' })),
      ];
      return () => stops.forEach((stop) => stop());
    },
  };
}

export interface MetricsServer {
  /** e.g. http://127.0.0.1:9464/metrics */
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/**
 * Serves `source` at GET /metrics on its own port (what `leasehold worker --metrics-port` runs),
 * and with `routes` (the worker's /healthz and /readyz) next to it.
 * Rejects when the port cannot be bound (EADDRINUSE, EACCES) with a message that says so.
 */
export async function serveMetrics(
  source: { metrics(): Promise<string>; readonly contentType: string },
  options: { port: number; host?: string; routes?: Record<string, () => Promise<EndpointReply>> },
): Promise<MetricsServer> {
  const metrics = async (): Promise<EndpointReply> => ({ status: 200, type: source.contentType, body: await source.metrics() });
  const server = await serveEndpoints({ '/metrics': metrics, ...options.routes }, { port: options.port, host: options.host ?? '127.0.0.1', flag: '--metrics-port' });
  return { url: `${server.origin}/metrics`, port: server.port, close: () => server.close() };
}

// prom-client (about 5 MB of heap and code) loads with the first createMetrics(), not with the
// package: a worker without metrics never pays for it.
let loaded: typeof client | undefined;
function promClient(): typeof client {
  return (loaded ??= createRequire(import.meta.url)('prom-client') as typeof client);
}
