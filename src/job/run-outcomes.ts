// The outcomes of a scheduled run: the database's leasehold.run_outcomes() (which the runs
// table's check and the finish functions read), mirrored for the types; test/sql-contract.test.ts
// checks that the two lists agree.
export const RUN_OUTCOMES = ['running', 'succeeded', 'failed', 'lost', 'aborted', 'timed-out'] as const;

/** What leasehold.runs.outcome holds: 'running' until the run ends. */
export type RunState = (typeof RUN_OUTCOMES)[number];

/** How a run ended. */
export type RunOutcome = Exclude<RunState, 'running'>;
