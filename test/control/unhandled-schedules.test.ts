// Jobs defined as data on the CLI worker, and a schedule whose handler no live worker has:
// `leasehold worker MODULE` runs the data jobs of the handlers the module exports; a schedule
// no live worker can run is seen within seconds (define warns, its slots are recorded missed
// naming the handler, status lists it for attention) instead of staying idle forever.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, connections, freshDatabase, rawPool, waitFor } from '../support/db.js';
import { cli, startCli, type CliProcess } from '../support/cli.js';

let url: string;
let dir: string;
const workers: CliProcess[] = [];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  dir = await mkdtemp(join(tmpdir(), 'leasehold-handlers-'));
  await writeFile(join(dir, 'package.json'), '{ "type": "module" }\n');
  await writeFile(
    join(dir, 'handlers.js'),
    [
      "import { appendFileSync } from 'node:fs';",
      'export const handlers = {',
      '  export: async (ctx) => {',
      "    appendFileSync(process.env.OUT, JSON.stringify({ job: ctx.job, slot: ctx.slot, payload: ctx.payload }) + '\\n');",
      '  },',
      '};',
      '',
    ].join('\n'),
  );
});

afterAll(async () => {
  for (const worker of workers) worker.child.kill('SIGKILL');
  await rm(dir, { recursive: true, force: true });
});

describe('leasehold worker MODULE with handlers', () => {
  it('runs the data jobs of the handlers it exports', async () => {
    const worker = startCli(['worker', join(dir, 'handlers.js'), '--holder', 'cli-worker'], { DATABASE_URL: url, OUT: join(dir, 'out.jsonl') });
    workers.push(worker);
    await waitFor(() => /running 0 job\(s\) and the data jobs of 1 handler\(s\)/.test(worker.output().stderr), 20_000, 50);
    const defined = await cli(['schedule', 'define', 'nightly-export', '--handler', 'export', '--by', 'ops', '--every', '1s', '--payload', '{"tenant":7}'], { DATABASE_URL: url });
    expect(defined.code, defined.stderr).toBe(0);
    expect(defined.stderr).not.toMatch(/no live worker/);
    const rows = await waitFor(async () => {
      const lines = (await readFile(join(dir, 'out.jsonl'), 'utf8').catch(() => '')).split('\n').filter(Boolean);
      return lines.length >= 2 ? lines.map((line) => JSON.parse(line) as { job: string; payload: unknown }) : undefined;
    }, 15_000, 100);
    expect(rows[0]!.job).toBe('nightly-export');
    expect(rows[0]!.payload).toEqual({ tenant: 7 });
  }, 60_000);

  it('sees a schedule whose handler no live worker has: define warns, its slots are recorded missed naming the handler, status lists it', async () => {
    const defined = await cli(['schedule', 'define', 'orphan', '--handler', 'nobody-has-it', '--by', 'ops', '--every', '1s'], { DATABASE_URL: url });
    expect(defined.code, defined.stderr).toBe(0);
    expect(defined.stderr).toMatch(/warning: no live worker has handler "nobody-has-it"/);
    const definedAt = Date.now();
    const missed = await waitFor(async () => {
      const { rows } = await rawPool(url, 1).query<{ reason: string; n: number }>(
        "select reason, count(*)::int as n from leasehold.missed where job = 'orphan' group by reason",
      );
      return rows.length > 0 ? rows : undefined;
    }, 30_000, 200);
    const flaggedAfterMs = Date.now() - definedAt;
    console.log(`a schedule without a live handler was first recorded missed ${flaggedAfterMs} ms after its definition`);
    expect(missed).toHaveLength(1);
    expect(missed[0]!.reason).toMatch(/^no live worker has handler "nobody-has-it"/);
    expect(flaggedAfterMs).toBeLessThan(20_000);
    // no run was made or recorded for it
    const runs = await rawPool(url, 1).query("select 1 from leasehold.runs where job = 'orphan'");
    expect(runs.rows).toEqual([]);
    const status = await cli(['status', '--json'], { DATABASE_URL: url });
    const job = (JSON.parse(status.stdout) as { jobs: Array<{ job: string; attention: string | null }> }).jobs.find((j) => j.job === 'orphan');
    expect(job?.attention).toBe('missing');
    // the handler's name is readable where a user looks next
    const history = await cli(['runs', 'orphan', '--wide'], { DATABASE_URL: url });
    expect(history.stdout).toMatch(/no live worker has handler "nobody-has-it"/);
  }, 60_000);
});

describe('register_liveness with handlers (SQL)', () => {
  it('counts a worker session\'s handlers in define_schedule\'s live_workers while its key is live, and refuses them without worker', async () => {
    const pool = rawPool(url, 1);
    const define = async () =>
      (await pool.query<{ live_workers: number }>(`select live_workers from leasehold.define_schedule('sql-handled', 'sql-handler', 'ops', p_every => '1 hour')`)).rows[0]!
        .live_workers;
    expect(await define()).toBe(0);
    const [session] = await connections(url, 1);
    await session!.query(`select leasehold.register_liveness(true, 'sql-worker', array['sql-handler'])`);
    expect(await define()).toBe(1);
    await expect(session!.query(`select leasehold.register_liveness(false, 'sql-worker', array['sql-handler'])`)).rejects.toMatchObject({ code: '22023' });
    await expect(session!.query(`select leasehold.register_liveness(true, '', array['sql-handler'])`)).rejects.toMatchObject({ code: 'LH004' });
    await session!.end();
    await waitFor(async () => (await define()) === 0, 5_000, 20);
  });
});
