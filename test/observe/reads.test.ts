// Reads at fleet scale (sql/baseline/5_reads.sql, src/monitor/fleet-status.ts): what they return, not
// how fast (speed is `npm run bench -- reads`). job_status keeps its columns and values,
// prune_history deletes in bounded batches, and `leasehold status` prints a summary and a
// bounded, attention-first list.
import { readFileSync } from 'node:fs';
import { beforeAll, describe, expect, it } from 'vitest';
import { fleetStatus } from '../../src/monitor/fleet-status.js';
import { client, freshDatabase, rawPool } from '../support/db.js';
import { cli } from '../support/cli.js';
import { seedHistory } from '../support/seed.js';

let url: string;
beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  await seedHistory(rawPool(url, 1));
  // quiet jobs with one old run each, and one with an expired lease
  await rawPool(url, 1).query(`
    insert into leasehold.jobs (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
    select format('quiet-%s', g), '0 3 * * *', null, 86400000, 30000, 'skip', 'latest', 'seed' from generate_series(1, 5) g;
    insert into leasehold.leases (name, fence, last_slot) select format('quiet-%s', g), 1, now() - interval '3 days' from generate_series(1, 5) g;
    insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome)
    select format('quiet-%s', g), now() - interval '3 days', 1, 'worker-q', now() - interval '3 days', now() - interval '3 days' + interval '1 second', 'succeeded'
      from generate_series(1, 5) g;
    update leasehold.leases set token = gen_random_uuid(), holder = 'worker-gone', acquired_at = now() - interval '2 minutes',
           expires_at = now() - interval '1 minute' where name = 'quiet-3';
    select leasehold.acquire('psql-lease', '1 minute', 'psql@admin');
  `);
});

// job_status as schema 5 defined it (sql/baseline/5_reads.sql), for comparison.
// job_status as the first schemas wrote it (plain aggregates over every run; kept in the schema-4
// fixture): the per-job LATERAL reads of today must give the same rows
function schema5JobStatus(): string {
  const sql = readFileSync(new URL('../fixtures/prerelease/leasehold--4.sql', import.meta.url), 'utf8');
  const body = sql.slice(sql.indexOf('with recent as'), sql.indexOf(';', sql.indexOf('left join missed m')));
  return `(${body}) v5`;
}

describe('job_status', () => {
  it('has the same columns, types and rows as its first, plain form', async () => {
    const pool = rawPool(url, 2);
    const all = await pool.query(`select * from leasehold.job_status order by job`);
    const v5 = await pool.query(`select * from ${schema5JobStatus()} order by job`);
    // schema 11 appended six columns (source, handler, the pause, timed-out runs), schema 26 the
    // start lateness; the others are unchanged
    const columns = v5.fields.map((f) => f.name);
    expect(all.fields.map((f) => f.name)).toEqual([...columns, 'source', 'handler', 'paused_at', 'paused_by', 'pause_reason', 'timed_out_24h', 'late_p95_seconds']);
    const now = await pool.query(`select ${columns.join(', ')} from leasehold.job_status order by job`);
    expect(now.fields.map((f) => [f.name, f.dataTypeID])).toEqual(v5.fields.map((f) => [f.name, f.dataTypeID]));
    // lease_age_seconds moves with now(): compare the rest exactly
    const strip = (rows: Array<Record<string, unknown>>) => rows.map(({ lease_age_seconds: _age, ...rest }) => rest);
    expect(strip(now.rows)).toEqual(strip(v5.rows));
    expect(now.rows).toHaveLength(7);
  });
});

describe('prune_history', () => {
  it('deletes at most p_batch old rows of each kind per call, never a running run, and the one-argument form deletes all', async () => {
    const db = await freshDatabase();
    await (await client(db, { liveness: false })).close();
    const pool = rawPool(db, 1);
    await pool.query(`
      insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome)
      select 'old', now() - make_interval(days => 40, mins => g), g, 'w', now() - make_interval(days => 40, mins => g),
             now() - make_interval(days => 40, mins => g) + interval '1 second', 'succeeded' from generate_series(1, 25) g;
      insert into leasehold.run_log (job, slot, fence, holder, started_at, outcome)
      select 'old', now() - make_interval(days => 41, mins => g), 100 + g, 'w', now() - make_interval(days => 41, mins => g), 'running'
        from generate_series(1, 3) g;
      insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome)
      select 'old', now() - make_interval(mins => g), 200 + g, 'w', now() - make_interval(mins => g), now(), 'succeeded' from generate_series(1, 4) g;
      insert into leasehold.skips (job, slot, holder, recorded_by, recorded_at)
      select 'old', now() - make_interval(days => 40, mins => g), 'w', 'w', now() - make_interval(days => 40, mins => g) from generate_series(1, 12) g;
    `);
    const prune = async (batch: number) => Number((await pool.query<{ n: string }>(`select leasehold.prune_history('30 days', $1)::text as n`, [batch])).rows[0]!.n);
    const counts = async () =>
      (
        await pool.query<{ finished: number; running: number; recent: number; skips: number }>(`
          select count(*) filter (where outcome <> 'running' and finished_at < now() - interval '30 days')::int as finished,
                 count(*) filter (where outcome = 'running')::int as running,
                 count(*) filter (where started_at > now() - interval '1 day')::int as recent,
                 (select count(*) from leasehold.skips)::int as skips
            from leasehold.runs`)
      ).rows[0]!;
    expect(await prune(10)).toBe(20); // 10 runs + 10 skips
    expect(await counts()).toEqual({ finished: 15, running: 3, recent: 4, skips: 2 });
    expect(await prune(10)).toBe(12); // 10 runs + the last 2 skips
    expect(await prune(10)).toBe(5);
    expect(await prune(10)).toBe(0);
    expect(await counts()).toEqual({ finished: 0, running: 3, recent: 4, skips: 0 });
    await expect(pool.query(`select leasehold.prune_history('30 days', 0)`)).rejects.toMatchObject({ code: '22023' });

    await pool.query(`
      insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome)
      select 'old', now() - make_interval(days => 50, mins => g), 1000 + g, 'w', now() - make_interval(days => 50, mins => g),
             now() - make_interval(days => 50, mins => g), 'failed' from generate_series(1, 25000) g`);
    expect(Number((await pool.query<{ n: string }>(`select leasehold.prune_history('30 days')::text as n`)).rows[0]!.n)).toBe(25_000);
    expect(await counts()).toEqual({ finished: 0, running: 3, recent: 4, skips: 0 });
  });
});

describe('leasehold status at fleet scale', () => {
  it('counts the fleet and lists the jobs needing attention first, up to the limit', async () => {
    const fleet = await fleetStatus(rawPool(url, 2), { limit: 3 });
    expect(fleet.counts).toEqual({ jobs: 7, running: 1, expired: 1, failing: 2, skipping: 1, missing: 1, leases: 1, leasesHeld: 1 });
    // expired first, then failing (the most recent failure first)
    expect(fleet.jobs.map((j) => [j.job, j.attention])).toEqual([
      ['quiet-3', 'expired'],
      ['report', 'failing'],
      ['cleanup', 'failing'],
    ]);
    expect(fleet.moreJobs).toBe(4);
    const all = await fleetStatus(rawPool(url, 2), { limit: 100 });
    expect(all.jobs.map((j) => [j.job, j.attention])).toEqual([
      ['quiet-3', 'expired'],
      ['report', 'failing'],
      ['cleanup', 'failing'],
      ['quiet-1', null],
      ['quiet-2', null],
      ['quiet-4', null],
      ['quiet-5', null],
    ]);
    expect(all.moreJobs).toBe(0);
    expect(all.leases.map((l) => l.name)).toEqual(['psql-lease']);
    await expect(fleetStatus(rawPool(url, 2), { limit: 0 })).rejects.toThrow(RangeError);
  });

  it('prints the summary line, the bounded table and how many were left out', async () => {
    const env = { DATABASE_URL: url };
    // --wide: every column, and the summary on one line (by default it wraps at 100 columns)
    const out = await cli(['status', '--limit', '2', '--wide'], env);
    expect(out.code).toBe(0);
    const lines = out.stdout.trim().split('\n');
    expect(lines[0]).toBe(
      '7 jobs: 1 running, 1 with an expired lease, 2 failing (failed, lost or timed-out run in 24 h), 1 skipping (24 h), 1 with missed slots (24 h); 1 other lease (1 held)',
    );
    expect(lines[1]).toMatch(/^JOB\s+SCHEDULE\s+.*MISSED 24H\s+ATTENTION$/);
    expect(lines[2]).toMatch(/^quiet-3\s+0 3 \* \* \*\s+expired\s+worker-gone\s.*\sexpired$/);
    expect(lines[3]).toMatch(/^report\s.*\sfailing$/);
    expect(out.stdout).toMatch(/^psql-lease\s+held\s+psql@admin/m);
    expect(lines.at(-1)).toBe('... 5 more jobs: --limit N shows more, --all everything, --job NAME one');

    const all = await cli(['status', '--all'], env);
    expect(all.stdout).not.toMatch(/more jobs/);
    expect(all.stdout.match(/^quiet-\d/gm)).toHaveLength(5);

    const json = JSON.parse((await cli(['status', '--json', '--limit', '1'], env)).stdout) as {
      summary: { jobs: number };
      jobs: Array<{ job: string; attention: string }>;
      more: { jobs: number; leases: number };
    };
    expect(json.summary.jobs).toBe(7);
    expect(json.jobs.map((j) => [j.job, j.attention])).toEqual([['quiet-3', 'expired']]);
    expect(json.more).toEqual({ jobs: 6, leases: 0 });

    for (const bad of ['0', '10001', 'x']) {
      const refused = await cli(['status', '--limit', bad], env);
      expect(refused.code).toBe(2);
      expect(refused.stderr).toMatch(/--limit must be an integer from 1 to 10000/);
    }
  });
});
