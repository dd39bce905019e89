// How wide the `leasehold` command prints: 100 columns by default (a pipe, a file, cron mail),
// COLUMNS (or a terminal's width) when there is one, everything with --wide; --json in full.
import { beforeAll, describe, expect, it } from 'vitest';
import { cli } from '../support/cli.js';
import { client, freshDatabase, rawPool } from '../support/db.js';
import { seedHistory } from '../support/seed.js';

const HOLDER = `worker-${'a'.repeat(60)}@node-17.eu-central.example.internal`;
const ERROR = `Error: upstream returned 503 ${'while syncing the invoices of tenant 42 '.repeat(6)}(gave up)`;

let env: Record<string, string>;
const widest = (text: string) => Math.max(...text.split('\n').map((line) => [...line].length));

beforeAll(async () => {
  const url = await freshDatabase();
  env = { DATABASE_URL: url };
  await (await client(url, { liveness: false })).close();
  const db = rawPool(url, 1);
  await seedHistory(db);
  await db.query(
    `insert into leasehold.run_log (job, slot, fence, holder, started_at, finished_at, outcome, error)
     values ('report', now() - interval '30 seconds', 30, $1, now() - interval '30 seconds', now() - interval '20 seconds', 'failed', $2)`,
    [HOLDER, ERROR],
  );
  await db.query(`select leasehold.acquire('long-holder', '1 minute', $1)`, [HOLDER]);
});

describe('human output fits 100 columns unless told otherwise', () => {
  it('status: schedules and holders cut, the less telling columns left out and named; --wide and COLUMNS give more', async () => {
    const fitted = await cli(['status'], env);
    expect(fitted.code, fitted.stderr).toBe(0);
    expect(widest(fitted.stdout), fitted.stdout).toBeLessThanOrEqual(100);
    expect(fitted.stdout).toMatch(/^JOB\s+SCHEDULE\s+STATE\s+HOLDER\s+OUTCOME\s+P95\/IVL\s+LATE\s+SKIPS\s+MISSED\s+ATTENTION$/m);
    // lateness (the p95 of start - slot over 24 h) is kept when columns are left out
    expect(fitted.stdout).toMatch(/^report\s+1m\s+running\s+worker-a\s+failed\s+\d+%\s+\d+(\.\d)?m?s\s/m);
    expect(fitted.stdout).toMatch(/^\(left out to fit 100 columns: P50, LEASE AGE, P95, LAST RUN; --wide shows them\)$/m);
    expect(fitted.stdout).toMatch(/^cleanup\s+\*\/5 \* \* \* \* \(Europe\S*…\s+idle/m);
    expect(fitted.stdout).toMatch(/^long-holder\s+held\s+worker-a+…\s+1\s/m);

    const wide = await cli(['status', '--wide'], env);
    expect(widest(wide.stdout)).toBeGreaterThan(100);
    expect(wide.stdout).toMatch(/^JOB\s+SCHEDULE\s+STATE\s+HOLDER\s+LEASE AGE\s+LAST RUN\s+OUTCOME\s+P50\s+P95\s+P95\/INTERVAL\s+LATE P95\s+SKIPS 24H\s+MISSED 24H\s+ATTENTION$/m);
    expect(wide.stdout).toContain(HOLDER);

    const columns = await cli(['status'], { ...env, COLUMNS: '150' });
    expect(widest(columns.stdout)).toBeLessThanOrEqual(150);
    expect(columns.stdout).toMatch(/^JOB\s+.*\sLAST RUN\s/m);
  });

  it('runs: holders and error texts cut with an ellipsis; --json keeps them whole', async () => {
    const fitted = await cli(['runs', 'report', '--limit', '10'], env);
    expect(fitted.code, fitted.stderr).toBe(0);
    expect(widest(fitted.stdout), fitted.stdout).toBeLessThanOrEqual(100);
    const failed = fitted.stdout.split('\n').find((line) => /\sfailed\s/.test(line) && line.includes('worker-a'));
    expect(failed).toMatch(/\s30\s+worker-aa…\s+\S+\s+10\.0s\s+Error: upstream \S.*…$/);
    const json = JSON.parse((await cli(['runs', 'report', '--limit', '10', '--json'], env)).stdout) as Array<{ holder: string; detail: string }>;
    expect(json).toContainEqual(expect.objectContaining({ holder: HOLDER, detail: ERROR }));
    expect((await cli(['runs', 'report', '--limit', '10', '--wide'], env)).stdout).toContain(ERROR);
  });

  it('schedule preview wraps its notes within the width', async () => {
    const preview = await cli(['schedule', 'preview', '30 2 * * *', '--tz', 'Europe/Berlin', '--from', '2026-03-28T00:00:00Z', '--count', '2'], env);
    expect(widest(preview.stdout), preview.stdout).toBeLessThanOrEqual(100);
    expect(preview.stdout.replace(/\n +/g, ' ')).toContain('DST gap: clocks jump 60 min forward at 03:00; a scheduled time inside the gap runs at this moment, once');
  });

  it('an error message wraps to COLUMNS (or a terminal); elsewhere it stays one line per error', async () => {
    const multi = { DATABASE_URL: 'postgres://postgres@127.0.0.1:5432,127.0.0.1:5433/test' };
    const wrapped = await cli(['status'], { ...multi, COLUMNS: '100' });
    expect(wrapped.code).toBe(64);
    expect(wrapped.stderr.trim().split('\n').length).toBeGreaterThan(1);
    expect(widest(wrapped.stderr)).toBeLessThanOrEqual(100);
    const logged = await cli(['status'], multi);
    expect(logged.stderr.trim().split('\n')).toHaveLength(1);
    expect(wrapped.stderr.trim().replace(/\n {2}/g, ' ')).toBe(logged.stderr.trim());
  });
});
