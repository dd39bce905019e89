// `leasehold/control`: the types of `leasehold.control` (jobs as data: schedules defined at run
// time, pause and resume, run now, backfill).
export { JobControl } from './job-control.js';
export type { BackfillOptions, BackfillResult, RunNowOptions, RunRequest, WaitForRequestOptions } from './manual-runs.js';
export type { PauseOptions, PauseResult, ResumeOptions, ResumeResult } from './pause.js';
export type { DefineResult, ScheduleInfo, ScheduleOptions } from './schedules.js';
