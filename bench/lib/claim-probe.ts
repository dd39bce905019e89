// Where the time of one big claim goes: the scheduler's own claim call (SchedulerStore.claim,
// the statement a worker sends at a tick) for `jobs` free jobs, alone on a quiet database, on
// a connection with auto_explain logging the duration of each statement inside
// leasehold.claim_tick (claim_batch):
//   part 1 "claim"  - lock the free leases, drop those with a recorded skip, update them with
//                     their runs in flight (steps 1-3, summed)
//   part 2 "report" - say why every other job was not claimed (step 4, the CTE with pending)
// plus the round trip seen by the worker (sending 10,000-element arrays, parsing the rows).
// auto_explain needs a superuser (LOAD); without it only the round trip is reported.
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { createLeasehold, defineJob, silentLogger, type JobDefinition } from '../../src/index.js';
// Internal: the exact statement the worker sends at a tick.
import { trackerOf } from '../../src/lease/tracker.js';
import { SchedulerStore } from '../../src/worker/claims.js';
import { round } from './stats.js';

export interface ClaimProbeRun {
  jobs: number;
  claimed: number;
  /** SchedulerStore.claim() call to rows back in JavaScript. */
  roundTripMs: number;
  /** The leasehold.claim call on the server (auto_explain, top-level statement). */
  serverMs: number | null;
  /** Part 1 inside leasehold.claim_batch: lock, skip check, update leases (with their runs in flight). */
  claimPartMs: number | null;
  /** Part 2 inside leasehold.claim_batch: reasons for the jobs not claimed. */
  reportPartMs: number | null;
  /** How part 2 matched the jobs against the runs this call started. */
  reportPartJoin: string | null;
}

export interface ClaimProbeResult {
  runs: ClaimProbeRun[];
  note: string | null;
}

interface Logged {
  durationMs: number;
  text: string;
}

const JOIN_NODES = /(Nested Loop Anti Join|Hash Right Anti Join|Hash Anti Join|Merge Anti Join|Merge Right Anti Join|hashed SubPlan \d+|SubPlan \d+)/;

export async function probeClaim(options: { connectionString: string; jobNames: readonly string[]; everySeconds: number; runs: number }): Promise<ClaimProbeResult> {
  const pool = new pg.Pool({ connectionString: options.connectionString, max: 1, idleTimeoutMillis: 0, application_name: 'bench-claim-probe' });
  pool.on('error', () => undefined);
  const logged: Logged[] = [];
  let note: string | null = null;
  const client = await pool.connect();
  try {
    client.on('notice', (notice) => {
      const match = /^duration: ([\d.]+) ms\s+plan:\s*([\s\S]*)$/.exec(notice.message ?? '');
      if (match) logged.push({ durationMs: Number(match[1]), text: match[2] ?? '' });
    });
    try {
      await client.query(`load 'auto_explain'`);
      await client.query(
        `select set_config('auto_explain.log_min_duration', '0', false), set_config('auto_explain.log_nested_statements', 'on', false),
                set_config('auto_explain.log_analyze', 'off', false), set_config('client_min_messages', 'log', false)`,
      );
    } catch (error) {
      note = `auto_explain unavailable (${error instanceof Error ? error.message : String(error)}): round trips only`;
    }
  } finally {
    client.release();
  }
  const leasehold = await createLeasehold({ pool, logger: silentLogger(), liveness: false, migrate: false });
  try {
    const store = new SchedulerStore(trackerOf(leasehold).runtime);
    const jobs: JobDefinition[] = options.jobNames.map((name) => defineJob({ name, every: `${options.everySeconds}s`, handler: async () => undefined }));
    const runs: ClaimProbeRun[] = [];
    for (let i = 0; i < options.runs; i++) {
      // Every job free (workers stopped), and a slot after every job's last one.
      await pool.query(
        `update leasehold.leases set token = null, expires_at = null, holder_key = null, released_at = now(), run_slot = null, run_started_at = null
          where name = any($1) and token is not null`,
        [options.jobNames],
      );
      await pool.query('vacuum analyze leasehold.leases');
      const nowRows = await pool.query<{ now: Date }>(`select date_trunc('milliseconds', clock_timestamp()) - interval '1 millisecond' as now`);
      const slot = nowRows.rows[0]?.now;
      if (!slot) throw new Error('no database time');
      logged.length = 0;
      const started = performance.now();
      const rows = await store.claim(
        jobs.map((job) => ({ job, slot })),
        'bench-probe',
        null,
      );
      const roundTripMs = performance.now() - started;
      const find = (needle: string) => logged.find((entry) => entry.text.includes(needle));
      const top = find('leasehold.claim(');
      const claimSteps = [find('for update of l skip locked'), find('s.slot = k.claim_slot'), find('claiming as')].filter((e) => e !== undefined);
      const claimPart = claimSteps.length === 3 ? { durationMs: claimSteps.reduce((sum, e) => sum + e.durationMs, 0) } : undefined;
      const reportPart = find('pending as');
      runs.push({
        jobs: jobs.length,
        claimed: rows.filter((row) => row.claimed).length,
        roundTripMs: round(roundTripMs, 1),
        serverMs: top ? round(top.durationMs, 1) : null,
        claimPartMs: claimPart ? round(claimPart.durationMs, 1) : null,
        reportPartMs: reportPart ? round(reportPart.durationMs, 1) : null,
        reportPartJoin: reportPart ? (JOIN_NODES.exec(reportPart.text)?.[1] ?? 'other') : null,
      });
    }
    // Leave the leases free.
    await pool.query(`update leasehold.leases set token = null, expires_at = null, holder_key = null, run_slot = null, run_started_at = null where name = any($1)`, [
      options.jobNames,
    ]);
    return { runs, note };
  } finally {
    await leasehold.close();
    await pool.end().catch(() => undefined);
  }
}
