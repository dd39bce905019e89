// leasehold: durable, fenced job leases on PostgreSQL. The client, the scheduler, leased() and
// the errors a caller catches; the rest has an entry point of its own (package.json "exports"):
// leasehold/control, /monitor, /dashboard, /schema, /errors, /testing, /nestjs, /opentelemetry.
export { createLeasehold, Leasehold } from './client/leasehold.js';
export type { AcquireOptions, AcquireResult, ForceReleaseOptions, LeaseholdOptions, LeaseStatus, NotAcquired, RunContext, RunOptions, RunResult, SkipReason } from './lease/types.js';
export { Lease, type TransactionOptions } from './lease/lease.js';
export type { ConnectionOptions } from './db/connection.js';
export type { ReplicationReport } from './db/replication.js';
export { startWorker, Worker, type WorkerOptions } from './worker/worker.js';
export { defineJob, type CatchUpPolicy, type JobContext, type JobDefinition, type JobOptions, type OverlapPolicy, type RunTrigger } from './job/job.js';
export type { RunOutcome, RunState } from './job/run-outcomes.js';
export type { DataJobContext, DataJobHandler } from './worker/job-feed.js';
export type { HandlerWrapper, RunReport } from './worker/execute-run.js';
export { leased, type LeasedFunction, type LeasedOptions, type LeasedResult, type LeasedSkipReason } from './integrations/leased.js';
export { parseSchedule, slotsBetween, type Schedule, type ScheduleSpec } from './schedule/schedule.js';
export type { LeaseholdEvents, LeaseInfo, SkipInfo } from './observe/events.js';
export { silentLogger, stderrLogger, type Logger, type LogLevel } from './observe/logger.js';
export type { JobLogFn, JobLogger } from './observe/child-logger.js';
export type { Duration } from './validate/duration.js';
export {
  DatabaseUnavailableError,
  InvalidArgumentError,
  LeaseholdError,
  LeaseLostError,
  OutcomeUnknownError,
  PermissionDeniedError,
  RunTimeoutError,
  SchemaVersionError,
  ShutdownError,
  TransactionFailedError,
} from './errors.js';
