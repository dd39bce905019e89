// leasehold.fleet_status() (sql/baseline/5_reads.sql) and fleetStatus() against a direct
// computation from the rows: a seeded fleet with every reason for attention, jobs with several
// reasons, ties of time under each reason, failures of a removed job and of a name without a job,
// history older than 24 h, and leases without a job. For every limit the same counts, the same
// jobs in the same order, each under its most urgent reason, with that reason's latest time.
import { beforeAll, describe, expect, it } from 'vitest';
import { fleetStatus, type AttentionReason } from '../../src/monitor/fleet-status.js';
import { jobStatus } from '../../src/monitor/status.js';
import { client, freshDatabase, rawPool } from '../support/db.js';

let url: string;

// Job names are j01 … j31 and j99: one length, lower case and digits, so that every collation
// orders them as JavaScript does.
beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  await rawPool(url, 1).query(`
    insert into leasehold.jobs (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by)
    select format('j%s', lpad(g::text, 2, '0')), '*/15 * * * *', null, 900000, 30000, 'skip', 'latest', 'seed'
      from generate_series(1, 30) g;
    insert into leasehold.leases (name, fence, last_slot)
    select format('j%s', lpad(g::text, 2, '0')), 5, now() - interval '10 minutes' from generate_series(1, 30) g;

    -- a removed job (a tombstone in jobs, no job_status row) that failed today
    select set_config('leasehold.job_writer', 'schedules', true);
    insert into leasehold.jobs (name, schedule, timezone, interval_ms, ttl_ms, overlap, catch_up, registered_by, source, handler, removed_at)
    values ('j31', '*/15 * * * *', null, 900000, 30000, 'skip', 'latest', 'seed', 'data', 'h', now() - interval '1 hour');
    select set_config('leasehold.job_writer', '', true);

    -- expired leases: j05, j12 and j20 a minute ago (a tie), j03 five minutes ago; j25 is running
    update leasehold.leases set token = gen_random_uuid(), holder = 'gone', acquired_at = now() - interval '10 minutes',
           expires_at = now() - interval '1 minute' where name in ('j05', 'j12', 'j20');
    update leasehold.leases set token = gen_random_uuid(), holder = 'gone', acquired_at = now() - interval '10 minutes',
           expires_at = now() - interval '5 minutes' where name = 'j03';
    update leasehold.leases set token = gen_random_uuid(), holder = 'alive', acquired_at = now() - interval '10 seconds',
           expires_at = now() + interval '1 minute' where name = 'j25';

    -- succeeded runs for every job, 2 and 30 hours ago
    insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome)
    select j.name, now() - h * interval '1 hour', h, 'w', now() - h * interval '1 hour', now() - h * interval '1 hour' + interval '2 seconds', 'succeeded'
      from leasehold.jobs j, (values (2), (30)) v(h);
    -- failures: j01, j07 and j99 (no job) two hours ago (a tie), j09 timed out 30 minutes ago,
    -- j02 three and twenty hours ago, j12 (expired) and j31 (removed) ten minutes ago; j15 only
    -- 25 hours ago (not failing); j04 is running now
    insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome, error)
    values ('j01', now() - interval '2 hours', 101, 'w', now() - interval '2 hours', now() - interval '2 hours' + interval '1 second', 'failed', 'boom'),
           ('j07', now() - interval '2 hours', 101, 'w', now() - interval '2 hours', now() - interval '2 hours' + interval '1 second', 'lost', 'gone'),
           ('j99', now() - interval '2 hours', 101, 'w', now() - interval '2 hours', now() - interval '2 hours' + interval '1 second', 'failed', 'boom'),
           ('j09', now() - interval '30 minutes', 101, 'w', now() - interval '30 minutes', now() - interval '20 minutes', 'timed-out', 'slow'),
           ('j02', now() - interval '3 hours', 101, 'w', now() - interval '3 hours', now() - interval '3 hours' + interval '1 second', 'failed', 'boom'),
           ('j02', now() - interval '20 hours', 102, 'w', now() - interval '20 hours', now() - interval '20 hours' + interval '1 second', 'failed', 'boom'),
           ('j12', now() - interval '10 minutes', 101, 'w', now() - interval '10 minutes', now() - interval '9 minutes', 'failed', 'boom'),
           ('j31', now() - interval '10 minutes', 101, 'w', now() - interval '10 minutes', now() - interval '9 minutes', 'failed', 'boom'),
           ('j15', now() - interval '25 hours', 101, 'w', now() - interval '25 hours', now() - interval '25 hours' + interval '1 second', 'failed', 'boom'),
           ('j04', now() - interval '1 minute', 101, 'w', now() - interval '1 minute', null, 'running', null);

    -- skips: j15 and j16 an hour ago (a tie; j16 also three hours ago), j07 (failing) and j12
    -- (expired) ten minutes ago, j17 23 and 30 hours ago, j18 only 25 hours ago (not skipping)
    insert into leasehold.skips (job, slot, holder, recorded_by, recorded_at)
    values ('j15', now() - interval '1 hour', 'w', 'w', now() - interval '1 hour'),
           ('j16', now() - interval '1 hour', 'w', 'w', now() - interval '1 hour'),
           ('j16', now() - interval '3 hours', 'w', 'w', now() - interval '3 hours'),
           ('j07', now() - interval '10 minutes', 'w', 'w', now() - interval '10 minutes'),
           ('j12', now() - interval '10 minutes', 'w', 'w', now() - interval '10 minutes'),
           ('j17', now() - interval '23 hours', 'w', 'w', now() - interval '23 hours'),
           ('j17', now() - interval '30 hours', 'w', 'w', now() - interval '30 hours'),
           ('j18', now() - interval '25 hours', 'w', 'w', now() - interval '25 hours');

    -- missed slots: j21 and j22 ten minutes ago (a tie), j16 (skipping, listed as such) a minute
    -- ago, j23 two hours ago
    insert into leasehold.missed (job, slot, reason, recorded_by, recorded_at)
    values ('j21', now() - interval '10 minutes', 'r', 'seed', now() - interval '10 minutes'),
           ('j22', now() - interval '10 minutes', 'r', 'seed', now() - interval '10 minutes'),
           ('j16', now() - interval '1 minute', 'r', 'seed', now() - interval '1 minute'),
           ('j23', now() - interval '2 hours', 'r', 'seed', now() - interval '2 hours');
  `);
  // leases without a job: held, expired while held, free
  await rawPool(url, 1).query(`
    select leasehold.acquire('lease-held', '1 minute', 'psql@a');
    select leasehold.acquire('lease-expired', '1 minute', 'psql@b');
    select leasehold.acquire('lease-free', '1 minute', 'psql@c');
  `);
  await rawPool(url, 1).query(`
    update leasehold.leases set expires_at = now() - interval '1 second' where name = 'lease-expired';
    update leasehold.leases set token = null, expires_at = null, released_at = now() where name = 'lease-free';
  `);
});

interface Listed {
  job: string;
  attention: AttentionReason | null;
  at: Date | null;
}

interface FleetStatusRow {
  place: number | null;
  job: string | null;
  attention: AttentionReason | null;
  attention_at: Date | null;
  jobs: number;
  running: number;
  expired: number;
  failing: number;
  skipping: number;
  missing: number;
  leases: number;
  leases_held: number;
}

/** Counts and the first `limit` names, computed in JavaScript from the rows themselves. */
async function direct(limit: number) {
  const pool = rawPool(url, 1);
  const [{ rows: jobs }, { rows: leases }, { rows: runs }, { rows: skips }, { rows: missed }, { rows: clock }] = await Promise.all([
    pool.query<{ name: string }>('select name from leasehold.jobs'),
    pool.query<{ name: string; state: string; expires_at: Date | null }>('select name, state, expires_at from leasehold.lease_status'),
    pool.query<{ job: string; outcome: string; started_at: Date }>('select job, outcome, started_at from leasehold.runs'),
    pool.query<{ job: string; recorded_at: Date }>('select job, recorded_at from leasehold.skips'),
    pool.query<{ job: string; recorded_at: Date }>('select job, recorded_at from leasehold.missed'),
    pool.query<{ since: Date }>(`select now() - interval '24 hours' as since`),
  ]);
  const since = clock[0]!.since.getTime();
  const names = new Set(jobs.map((j) => j.name));
  const latest = (rows: Array<{ job: string; at: Date }>) => {
    const out = new Map<string, Date>();
    for (const r of rows) if (!out.has(r.job) || out.get(r.job)! < r.at) out.set(r.job, r.at);
    return out;
  };
  const reasons: Array<[AttentionReason, Map<string, Date>]> = [
    ['expired', latest(leases.filter((l) => l.state === 'expired' && names.has(l.name)).map((l) => ({ job: l.name, at: l.expires_at! })))],
    ['failing', latest(runs.filter((r) => ['failed', 'lost', 'timed-out'].includes(r.outcome) && r.started_at.getTime() > since).map((r) => ({ job: r.job, at: r.started_at })))],
    ['skipping', latest(skips.filter((s) => s.recorded_at.getTime() > since).map((s) => ({ job: s.job, at: s.recorded_at })))],
    ['missing', latest(missed.filter((m) => m.recorded_at.getTime() > since).map((m) => ({ job: m.job, at: m.recorded_at })))],
  ];
  const byName = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);
  // each name once, under its most urgent reason with that reason's latest time
  const flagged: Listed[] = [];
  for (const [attention, found] of reasons) {
    for (const [job, at] of found) if (!flagged.some((f) => f.job === job)) flagged.push({ job, attention, at });
  }
  const rank = (l: Listed) => reasons.findIndex(([r]) => r === l.attention);
  flagged.sort((a, b) => rank(a) - rank(b) || b.at!.getTime() - a.at!.getTime() || byName(a.job, b.job));
  const rest: Listed[] = [...names].filter((n) => !flagged.some((f) => f.job === n)).sort(byName).map((job) => ({ job, attention: null, at: null }));
  const withJob = leases.filter((l) => names.has(l.name));
  const withoutJob = leases.filter((l) => !names.has(l.name));
  return {
    counts: {
      jobs: names.size,
      running: withJob.filter((l) => l.state === 'held').length,
      expired: reasons[0]![1].size,
      failing: reasons[1]![1].size,
      skipping: reasons[2]![1].size,
      missing: reasons[3]![1].size,
      leases: withoutJob.length,
      leasesHeld: withoutJob.filter((l) => l.state !== 'free').length,
    },
    listed: [...flagged, ...rest].slice(0, limit),
  };
}

describe('fleet_status', () => {
  it('has several reasons, ties and history out of the window to rank (the seed is what the test says it is)', async () => {
    const { counts, listed } = await direct(1000);
    expect(counts).toEqual({ jobs: 31, running: 1, expired: 4, failing: 7, skipping: 5, missing: 4, leases: 3, leasesHeld: 2 });
    expect(listed.filter((l) => l.attention !== null).map((l) => `${l.job} ${l.attention}`)).toEqual([
      'j05 expired', 'j12 expired', 'j20 expired', 'j03 expired',
      'j31 failing', 'j09 failing', 'j01 failing', 'j07 failing', 'j99 failing', 'j02 failing',
      'j15 skipping', 'j16 skipping', 'j17 skipping',
      'j21 missing', 'j22 missing', 'j23 missing',
    ]);
  });

  it('returns the counts and, for every limit, the first jobs in order under their most urgent reason', async () => {
    const pool = rawPool(url, 1);
    for (const limit of [...Array.from({ length: 36 }, (_, i) => i + 1), 10_000, 2_147_483_647]) {
      const expected = await direct(limit);
      const { rows } = await pool.query<FleetStatusRow>('select * from leasehold.fleet_status($1)', [limit]);
      expect(rows.map((r) => ({ job: r.job, attention: r.attention, at: r.attention_at })), `limit ${limit}`).toEqual(expected.listed);
      expect(rows.map((r) => r.place)).toEqual(expected.listed.map((_, i) => i + 1));
      for (const row of rows) {
        expect({
          jobs: row.jobs, running: row.running, expired: row.expired, failing: row.failing, skipping: row.skipping,
          missing: row.missing, leases: row.leases, leasesHeld: row.leases_held,
        }).toEqual(expected.counts);
      }
    }
  });

  it('is what fleetStatus() lists: the same jobs, minus the names job_status has no row for, with their job_status figures', async () => {
    const pool = rawPool(url, 2);
    const figures = new Map((await jobStatus(pool)).map((j) => [j.job, j]));
    const strip = <T extends { leaseAgeSeconds: number | null }>({ leaseAgeSeconds: _age, ...rest }: T) => rest;
    for (const limit of [1, 4, 5, 9, 10, 16, 17, 20, 50]) {
      const expected = await direct(limit);
      const fleet = await fleetStatus(pool, { limit });
      expect(fleet.counts).toEqual(expected.counts);
      const shown = expected.listed.filter((l) => figures.has(l.job));
      expect(fleet.jobs.map((j) => [j.job, j.attention]), `limit ${limit}`).toEqual(shown.map((l) => [l.job, l.attention]));
      for (const job of fleet.jobs) expect(strip(job)).toEqual({ ...strip(figures.get(job.job)!), attention: job.attention });
      expect(fleet.moreJobs).toBe(expected.counts.jobs - shown.length);
      expect(fleet.leases.map((l) => l.name)).toEqual(['lease-expired', 'lease-held', 'lease-free'].slice(0, limit));
    }
  });

  it('answers an empty fleet with one row of counts, and refuses a limit below 1', async () => {
    const empty = await freshDatabase();
    await (await client(empty, { liveness: false })).close();
    const { rows } = await rawPool(empty, 1).query('select * from leasehold.fleet_status(50)');
    expect(rows).toEqual([
      { place: null, job: null, attention: null, attention_at: null, jobs: 0, running: 0, expired: 0, failing: 0, skipping: 0, missing: 0, leases: 0, leases_held: 0 },
    ]);
    expect((await fleetStatus(rawPool(empty, 1), { limit: 50 })).jobs).toEqual([]);
    for (const limit of [0, -1, null]) {
      await expect(rawPool(url, 1).query('select * from leasehold.fleet_status($1)', [limit])).rejects.toMatchObject({ code: '22023' });
    }
  });
});
