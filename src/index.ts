// leasehold: durable, fenced job leases on PostgreSQL.
export { createLeasehold, describeSkip, Leasehold, type LeaseholdOptions } from './client/leasehold.js';
export { Lease, type TransactionOptions } from './lease/lease.js';
export { JobControl } from './control/job-control.js';
export type { BackfillOptions, BackfillResult, RunNowOptions, RunRequest, WaitForRequestOptions } from './control/manual-runs.js';
export type { DefineResult, ScheduleInfo, ScheduleOptions } from './control/schedules.js';
export type { PauseOptions, PauseResult, ResumeOptions, ResumeResult } from './control/pause.js';
export { ScheduleDefinitionError, type DataJobContext, type DataJobHandler } from './worker/job-feed.js';
export type { AcquireOptions, AcquireResult, LeaseStatus, NotAcquired, RunContext, RunOptions, RunResult, SkipReason } from './lease/types.js';
export { MAX_TTL_MS, MIN_TTL_MS } from './lease/limits.js';
export { FenceRangeError } from './lease/fence.js';
export type { ReplicationReport } from './db/replication.js';
export {
  ClosedError,
  DatabaseReadOnlyError,
  DatabaseUnavailableError,
  InvalidArgumentError,
  LeaseholdError,
  LeaseLostError,
  OutcomeUnknownError,
  PermissionDeniedError,
  RunTimeoutError,
  SchemaVersionError,
  ShutdownError,
  TransactionControlError,
  TransactionFailedError,
  type DatabaseUnavailableReason,
  type LeaseholdErrorCode,
  type LeaseLostReason,
  type TransactionFailure,
} from './errors.js';
export { migrate, migrations, latestVersion, schemaVersion, checkSchema, installScript, type Migration, type MigrationResult } from './db/migrations.js';
export type { ConnectionOptions } from './db/connection.js';
export type { LeaseholdEvents, LeaseInfo, SkipInfo } from './observe/events.js';
export { silentLogger, stderrLogger, type Logger, type LogLevel } from './observe/logger.js';
export type { JobLogFn, JobLogger } from './observe/child-logger.js';
export { formatDuration, parseDuration, type Duration } from './validate/duration.js';
export { MAX_HOLDER_LENGTH, MAX_NAME_LENGTH } from './validate/names.js';
export { startWorker, Worker, type WorkerOptions } from './worker/worker.js';
export {
  defineJob,
  OVERLAP_POLICIES,
  type CatchUpPolicy,
  type JobContext,
  type JobDefinition,
  type JobOptions,
  type OverlapPolicy,
  type RunTrigger,
} from './job/job.js';
export type { HandlerWrapper, RunReport } from './worker/execute-run.js';
export { RUN_OUTCOMES, type RunOutcome, type RunState } from './job/run-outcomes.js';
export { leased, type LeasedFunction, type LeasedOptions, type LeasedResult, type LeasedSkipReason } from './integrations/leased.js';
export { parseSchedule, slotsBetween, type Schedule, type ScheduleSpec } from './schedule/schedule.js';
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
} from './monitor/status.js';
export { createMetrics, type EventSource, type LeaseholdMetrics, type MetricsOptions } from './monitor/metrics.js';
export { workerHealth, type HealthCheck, type HealthReport, type WorkerHealth } from './monitor/health.js';
export type { EndpointReply } from './monitor/http-endpoint.js';
export { startDashboard } from './dashboard/lazy.js';
export type { Dashboard, DashboardOptions, MetricsSource } from './dashboard/server.js';
