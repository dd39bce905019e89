// `leasehold/monitor`: what watches a fleet from outside its jobs: the read models (job status,
// history, timelines, leases outside any schedule), Prometheus metrics and health probes.
export {
  CREEP_WARNING_RATIO,
  jobHistory,
  jobStatus,
  jobTimeline,
  unscheduledLeases,
  type HistoryEntry,
  type JobStatus,
  type JobTimeline,
  type ReadOptions,
  type TimelineMissed,
  type TimelineRun,
  type TimelineSkip,
  type UnscheduledLease,
} from './status.js';
export { createMetrics, type EventSource, type LeaseholdMetrics, type MetricsOptions } from './metrics.js';
export { workerHealth, type HealthCheck, type HealthReport, type WorkerHealth } from './health.js';
export type { EndpointReply } from './http-endpoint.js';
