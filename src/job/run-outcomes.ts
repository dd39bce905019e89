// The outcomes of a scheduled run: the database's leasehold.run_outcomes() (which the runs
// table's check and the finish functions read), mirrored for the types; test/sql/contract.test.ts
// checks that the two lists agree. The type is spelled out rather than derived from the list so
// that the published one reads plainly; a Record holds the list to it, in this order.

/** What leasehold.runs.outcome holds: 'running' until the run ends. */
export type RunState = 'running' | 'succeeded' | 'failed' | 'lost' | 'aborted' | 'timed-out';

const EVERY_STATE: Record<RunState, true> = { running: true, succeeded: true, failed: true, lost: true, aborted: true, 'timed-out': true };
export const RUN_OUTCOMES = Object.keys(EVERY_STATE) as readonly RunState[];

/** How a run ended. */
export type RunOutcome = Exclude<RunState, 'running'>;
