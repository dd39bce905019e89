// The reads part's data set: `jobs` jobs on '*/15 * * * *', `runsPerJob` runs each, 15 min
// apart (one in 50 failed), and 3 skips per job, each naming the fence of the run it found
// running. Rows are inserted oldest first, as a live fleet writes them, so the time columns
// follow the table's physical order (what BRIN needs).
export interface ReadsScale {
  jobs: number;
  runsPerJob: number;
}

export const FULL_SCALE: ReadsScale = { jobs: 100_000, runsPerJob: 100 };
export const QUICK_SCALE: ReadsScale = { jobs: 2_000, runsPerJob: 100 };

/** Statements that fill a freshly migrated leasehold schema, in order. */
export function seedStatements({ jobs, runsPerJob }: ReadsScale): string[] {
  const name = (v: string) => `format('tenant-%s', lpad(${v}::text, 6, '0'))`;
  return [
    `insert into leasehold.leases (name, fence, last_slot)
       select ${name('i')}, ${runsPerJob}, now() - interval '1 minute' from generate_series(1, ${jobs}) i`,
    `insert into leasehold.jobs (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
       select ${name('i')}, '*/15 * * * *', null, 900000, 60000, 'skip', 'latest', 'seed' from generate_series(1, ${jobs}) i`,
    `insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome)
       select ${name('j')}, t.at, ${runsPerJob + 1} - k, 'worker-' || (j % 4), t.at, t.at + interval '2 seconds',
              case when k % 50 = 0 then 'failed' else 'succeeded' end
         from generate_series(${runsPerJob}, 1, -1) k
        cross join lateral (select now() - k * interval '15 minutes' as at) t
        cross join generate_series(1, ${jobs}) j
        order by k desc, j`,
    // each skip names its holder's fence, as claim() records it: the run of that slot, still running
    `insert into leasehold.skips (job, slot, holder, holder_fence, recorded_by, recorded_at)
       select ${name('j')}, now() - (k * interval '15 minutes') + interval '1 second', 'worker-1', ${runsPerJob + 1} - k, 'worker-2',
              now() - (k * interval '15 minutes') + interval '1 second'
         from generate_series(3, 1, -1) k cross join generate_series(1, ${jobs}) j
        order by k desc, j`,
    'vacuum analyze leasehold.leases, leasehold.jobs, leasehold.run_log, leasehold.skips, leasehold.missed',
  ];
}
