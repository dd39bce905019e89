// The fault suite's instruments in the test database: test tables, the ordering sequence and
// triggers, the snapshot the checker reads after a run, and the dead-token probes made on a
// promoted standby during a failover.
import pg from 'pg';
import type { DbSnapshot } from './checker.js';
import { mono, type HistoryLine, type JobSpec } from './common.js';

/** Test tables, the order sequence and the grant trigger, in the test database only. */
export async function installTestSchema(admin: pg.Pool, jobs: JobSpec[]): Promise<void> {
  await admin.query(`
    create sequence lh_test_order;
    create table test_output (job text not null, slot timestamptz not null, fence bigint not null, worker text not null,
                              ord bigint not null, at timestamptz not null default clock_timestamp());
    create table test_counter (job text primary key, n bigint not null default 0);
    create table test_grants (job text not null, fence bigint not null, holder text, slot timestamptz, ord bigint not null,
                              at timestamptz not null default clock_timestamp());
    create table test_releases (job text not null, fence bigint not null, ord bigint not null, txid text not null,
                                at timestamptz not null default clock_timestamp());
    create table test_run_ends (job text not null, fence bigint not null, outcome text not null, txid text not null);
    -- One row per grant (fence change), taken in the granting transaction while it holds the
    -- lease row FOR UPDATE: ord orders grants and fenced writes of a job as the row lock did.
    -- And one row per release (token set to null), for property (e).
    create function test_record_grant() returns trigger language plpgsql as $$
    begin
      if (tg_op = 'INSERT' and new.fence > 0) or (tg_op = 'UPDATE' and new.fence is distinct from old.fence) then
        insert into public.test_grants (job, fence, holder, slot, ord)
        values (new.name, new.fence, new.holder, new.last_slot, nextval('public.lh_test_order'));
      elsif tg_op = 'UPDATE' and old.token is not null and new.token is null then
        insert into public.test_releases (job, fence, ord, txid)
        values (new.name, new.fence, nextval('public.lh_test_order'), pg_current_xact_id()::text);
      end if;
      return null;
    end $$;
    -- Which transaction recorded each run's outcome: a run's lease is released in that same
    -- transaction (finish_run/finish_runs), by the run itself. A scheduled run's history row is
    -- inserted when it ends (schema 17); a run now's is updated.
    create function test_record_run_end() returns trigger language plpgsql as $$
    begin
      if new.outcome <> 'running' and (tg_op = 'INSERT' or old.outcome = 'running') then
        insert into public.test_run_ends (job, fence, outcome, txid) values (new.job, new.fence, new.outcome, pg_current_xact_id()::text);
      end if;
      return null;
    end $$;
    create trigger test_record_run_end after insert or update on leasehold.run_log
      for each row execute function test_record_run_end();
    create trigger test_record_grant after insert or update on leasehold.leases
      for each row execute function test_record_grant();
  `);
  await admin.query('insert into test_counter (job) select unnest($1::text[])', [jobs.map((j) => j.name)]);
}

/**
 * Right after a promotion, before any worker can reach the new primary: a fenced check with the
 * token of every run that ended since the failover began (its release may be lost with the old
 * primary). Each must be refused; the lines go into the history as probes.
 */
export async function probeDeadTokens(url: string, from: number, history: HistoryLine[]): Promise<void> {
  const ended = history.filter((l): l is Extract<HistoryLine, { type: 'end' }> => l.type === 'end' && l.mono >= from && !!l.token);
  if (ended.length === 0) return;
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    for (const run of ended) {
      const line = { type: 'probe' as const, worker: run.worker, job: run.job, fence: run.fence, endedMono: run.mono, by: 'nemesis' as const };
      try {
        await client.query({ text: 'select leasehold.assert_lease($1, $2::uuid, $3)', values: [run.job, run.token, run.fence], query_timeout: 2_000 } as pg.QueryConfig);
        history.push({ ...line, status: 'accepted', reason: null, mono: mono() });
      } catch (error) {
        const code = (error as { code?: string }).code;
        history.push({ ...line, status: code === 'LH003' ? 'refused' : 'failed', reason: String(error).slice(0, 200), mono: mono() });
      }
    }
  } catch {
    // the promoted server did not answer: no probes this time
  } finally {
    await client.end().catch(() => undefined);
  }
}

export async function snapshot(admin: pg.Pool): Promise<DbSnapshot> {
  const ms = (column: string) => `(extract(epoch from ${column}) * 1000)::float8`;
  const [grants, outputs, counters, runs, skips, missed, releases, runEnds] = await Promise.all([
    admin.query(`select job, fence::float8 as fence, holder, ${ms('slot')} as slot, ord::float8 as ord from test_grants`),
    admin.query(`select job, ${ms('slot')} as slot, fence::float8 as fence, worker, ord::float8 as ord from test_output`),
    admin.query(`select job, n::float8 as n from test_counter`),
    admin.query(
      `select job, ${ms('slot')} as slot, fence::float8 as fence, holder, ${ms('started_at')} as "startedAt", ${ms('finished_at')} as "finishedAt", outcome, error from leasehold.runs`,
    ),
    admin.query(
      `select job, ${ms('slot')} as slot, holder, holder_fence::float8 as "holderFence", ${ms('holder_slot')} as "holderSlot",
              (extract(epoch from held_for) * 1000)::float8 as "heldForMs", recorded_by as "recordedBy", ${ms('recorded_at')} as "recordedAt"
         from leasehold.skips`,
    ),
    admin.query(`select job, ${ms('slot')} as slot, reason, recorded_by as "recordedBy" from leasehold.missed`),
    admin.query(`select job, fence::float8 as fence, ord::float8 as ord, txid, ${ms('at')} as at from test_releases`),
    admin.query(`select job, fence::float8 as fence, outcome, txid from test_run_ends`),
  ]);
  return {
    grants: grants.rows as DbSnapshot['grants'],
    outputs: outputs.rows as DbSnapshot['outputs'],
    counters: counters.rows as DbSnapshot['counters'],
    runs: runs.rows as DbSnapshot['runs'],
    skips: skips.rows as DbSnapshot['skips'],
    missed: missed.rows as DbSnapshot['missed'],
    releases: releases.rows as DbSnapshot['releases'],
    runEnds: runEnds.rows as DbSnapshot['runEnds'],
  };
}
