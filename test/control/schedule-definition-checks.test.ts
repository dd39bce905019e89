// Definitions no worker can run, or that break the readers of leasehold.jobs, are refused at the
// door (sql/baseline/4_control.sql): timezones PostgreSQL and the workers' Intl read differently,
// names blank or with whitespace at either end, payloads nested more than 32 levels. Through the
// client (InvalidArgumentError naming the field), raw SQL (LH001 / LH005) and the CLI (exit 2);
// nothing is stored.
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { InvalidArgumentError, type Leasehold } from '../../src/index.js';
import { checkSchedule, type ScheduleOptions } from '../../src/control/schedules.js';
import { ZONE_NAME, checkZoneName } from '../../src/validate/timezone.js';
import { cli } from '../support/cli.js';
import { leaseholdAs, pool, ROLE, urlAs, usePrivilegeFixture } from '../support/privileges.js';

let url: string;
let owner: pg.Pool;
usePrivilegeFixture((fixture) => ({ url, owner } = fixture));

const app = (): Promise<Leasehold> => leaseholdAs(url, ROLE.app1);

/** The argument the client refuses `options` for before any round trip (checkSchedule), or null. */
function refusedBeforeSending(options: Partial<ScheduleOptions>): string | null {
  try {
    checkSchedule({ name: 'x', handler: 'h', by: 'app', ...options } as ScheduleOptions);
    return null;
  } catch (error) {
    if (error instanceof InvalidArgumentError) return error.argument;
    throw error;
  }
}

/** The SQLSTATE and message a statement fails with, or 'ok'. */
async function refusal(p: pg.Pool, text: string, values: unknown[] = []): Promise<{ code: string; message: string }> {
  try {
    await p.query(text, values);
    return { code: 'ok', message: '' };
  } catch (error) {
    return { code: (error as { code?: string }).code ?? String(error), message: (error as Error).message };
  }
}

async function stored(prefix: string): Promise<string[]> {
  const { rows } = await owner.query<{ name: string }>('select name from leasehold.jobs where starts_with(name, $1)', [prefix]);
  return rows.map((r) => r.name).sort();
}

/** Arrays nested `depth` deep, as JSON text: [[[]]] is 3. */
const nestedArrays = (depth: number): string => '['.repeat(depth) + ']'.repeat(depth);
/** Objects nested `depth` deep, as JSON text: {"a":{"a":1}} is 2. */
const nestedObjects = (depth: number): string => '{"a":'.repeat(depth) + '1' + '}'.repeat(depth);

/** Whether this process's Intl knows the zone (what croner needs on a worker). */
function intlKnows(zone: string): boolean {
  try {
    new Intl.DateTimeFormat('en-US', { timeZone: zone });
    return true;
  } catch {
    return false;
  }
}

function clientAccepts(zone: string): boolean {
  try {
    checkZoneName(zone, 'schedule "z"');
  } catch (error) {
    if (error instanceof InvalidArgumentError && error.argument === 'timezone') return false;
    throw error;
  }
  return intlKnows(zone);
}

// Real zones of every shape the tz database has: two and three parts, hyphens, Etc offsets.
const REAL_ZONES = ['Europe/Berlin', 'America/Argentina/Buenos_Aires', 'America/Indiana/Knox', 'America/Port-au-Prince',
  'America/New_York', 'Asia/Kolkata', 'Australia/Lord_Howe', 'Pacific/Port_Moresby', 'Antarctica/DumontDUrville',
  'Etc/GMT+5', 'Etc/GMT-14', 'Etc/UTC', 'UTC'];
// What PostgreSQL takes and the workers refuse, or both take and map to zones of their own choosing.
const HOSTILE_ZONES = ['posixrules', 'Factory', 'localtime', 'UTC+5', 'EST5EDT', 'EST', 'CET', 'GMT', 'Japan', 'PST', 'Z',
  '+05:00', 'posix/Europe/Berlin', 'Posix/Europe/Berlin', 'right/UTC', 'europe/berlin', 'utc', 'Europe/Nowhere',
  'Etc/Unknown', ' Europe/Berlin', 'Europe/Berlin ', 'Europe/../UTC'];

describe('timezones: only names both PostgreSQL and the workers read alike', () => {
  it('accepts real zone names and refuses the rest, in the client and in SQL, storing nothing refused', async () => {
    const lh = await app();
    const p = pool(url, ROLE.app1);
    for (const [i, timezone] of REAL_ZONES.entries()) {
      await expect(lh.control.define({ name: `tz-ok-${i}`, handler: 'h', by: 'app', cron: '0 12 * * *', timezone })).resolves.toMatchObject({ created: true });
      expect((await lh.control.get(`tz-ok-${i}`))?.timezone).toBe(timezone);
      expect(await refusal(p, `select * from leasehold.define_schedule($1, 'h', 'app', p_cron => '0 12 * * *', p_timezone => $2)`, [`tz-sql-${i}`, timezone])).toEqual({ code: 'ok', message: '' });
    }
    for (const [i, timezone] of HOSTILE_ZONES.entries()) {
      expect(refusedBeforeSending({ cron: '0 12 * * *', timezone }), timezone).toBe('timezone');
      const error = await lh.control.define({ name: `tz-bad-${i}`, handler: 'h', by: 'app', cron: '0 12 * * *', timezone }).catch((e: unknown) => e);
      expect(error, timezone).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument, timezone).toBe('timezone');
      expect((error as Error).message, timezone).toMatch(/timezone/);
      const sql = await refusal(p, `select * from leasehold.define_schedule($1, 'h', 'app', p_cron => '0 12 * * *', p_timezone => $2)`, [`tz-bad-${i}`, timezone]);
      expect(sql.code, timezone).toBe('LH005');
      expect(sql.message, timezone).toMatch(/^timezone: /);
    }
    expect(await stored('tz-bad-')).toEqual([]);
  });

  it('agrees with the client on every zone either engine lists', async () => {
    const { rows } = await owner.query<{ name: string }>('select name from pg_timezone_names');
    const pgZones = new Set(rows.map((r) => r.name));
    const intlZones = Intl.supportedValuesOf('timeZone');
    const all = [...new Set([...pgZones, ...intlZones, ...REAL_ZONES, ...HOSTILE_ZONES])];
    const { rows: verdicts } = await owner.query<{ zone: string; problem: string | null }>(
      'select z as zone, leasehold.timezone_problem(z) as problem from unnest($1::text[]) z', [all]);
    const sqlAccepts = new Map(verdicts.map((v) => [v.zone, v.problem === null]));
    // each zone Node names is taken by both sides (where this server knows it at all)
    for (const zone of intlZones) {
      expect(clientAccepts(zone), zone).toBe(true);
      if (pgZones.has(zone)) expect(sqlAccepts.get(zone), zone).toBe(true);
    }
    // and each zone the server lists gets the client's answer; a zone newer than this Node's ICU
    // is the one gap (SQL accepts, the workers refuse: docs/sql-api.md)
    const disagree = [...pgZones].filter((zone) => intlKnows(zone) && sqlAccepts.get(zone) !== clientAccepts(zone));
    expect(disagree).toEqual([]);
    expect([...pgZones].filter((zone) => sqlAccepts.get(zone) && !ZONE_NAME.test(zone))).toEqual([]);
    // the listed hazards are in the server's list and refused there
    for (const zone of ['posixrules', 'Factory', 'EST', 'GMT']) if (pgZones.has(zone)) expect(sqlAccepts.get(zone), zone).toBe(false);
  });
});

describe('names: not blank, no whitespace at either end', () => {
  it('refuses them in the client (lease name) and in SQL (LH001), and keeps spaces inside a name', async () => {
    const lh = await app();
    const p = pool(url, ROLE.app1);
    const names = [' ', '   ', ' ws-lead', 'ws-trail ', '\u00a0ws-nbsp', 'ws-ideographic\u3000', '\u2003ws-em'];
    for (const name of names) {
      expect(refusedBeforeSending({ name, every: '1m' }), JSON.stringify(name)).toBe('lease name');
      const error = await lh.control.define({ name, handler: 'h', by: 'app', every: '1m' }).catch((e: unknown) => e);
      expect(error, JSON.stringify(name)).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).toBe('lease name');
      expect((error as Error).message).toMatch(/whitespace/);
      const sql = await refusal(p, `select * from leasehold.define_schedule($1, 'h', 'app', p_every => '1 minute')`, [name]);
      expect(sql.code, JSON.stringify(name)).toBe('LH001');
      expect(sql.message).toMatch(/^lease name must not begin or end with whitespace/);
    }
    const { rows } = await owner.query<{ n: number }>(`select count(*)::int as n from leasehold.jobs where name ~ '^\\s*$' or name like '%ws-%'`);
    expect(rows[0]?.n).toBe(0);
    await expect(lh.control.define({ name: 'ws inside ok', handler: 'h', by: 'app', every: '1m' })).resolves.toMatchObject({ created: true });
  });
});

describe('payload: at most 32 levels of arrays and objects', () => {
  it('refuses deeper payloads in the client before sending, and in SQL what reaches the function', async () => {
    const lh = await app();
    const p = pool(url, ROLE.app1);
    await expect(lh.control.define({ name: 'deep-32', handler: 'h', by: 'app', every: '1m', payload: JSON.parse(nestedArrays(32)) })).resolves.toMatchObject({ created: true });
    await expect(lh.control.define({ name: 'deep-32o', handler: 'h', by: 'app', every: '1m', payload: JSON.parse(nestedObjects(32)) })).resolves.toMatchObject({ created: true });
    for (const [label, json] of [['33', nestedArrays(33)], ['33o', nestedObjects(33)], ['6000', nestedArrays(6_000)], ['30000', nestedArrays(30_000)], ['100000', nestedArrays(100_000)]] as const) {
      expect(refusedBeforeSending({ every: '1m', payload: JSON.parse(json) }), label).toBe('payload');
      const error = await lh.control.define({ name: `deep-bad-${label}`, handler: 'h', by: 'app', every: '1m', payload: JSON.parse(json) }).catch((e: unknown) => e);
      expect(error, label).toBeInstanceOf(InvalidArgumentError);
      expect((error as InvalidArgumentError).argument).toBe('payload');
      expect((error as Error).message).toMatch(/payload nests arrays and objects more than 32 levels deep/);
    }
    // a toJSON that nests deep is seen as JSON.stringify would write it; a cycle is still named
    const sneaky = { toJSON: () => JSON.parse(nestedArrays(40)) as unknown };
    await expect(lh.control.define({ name: 'deep-bad-tojson', handler: 'h', by: 'app', every: '1m', payload: sneaky })).rejects.toMatchObject({ argument: 'payload' });
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    await expect(lh.control.define({ name: 'deep-bad-cycle', handler: 'h', by: 'app', every: '1m', payload: cycle })).rejects.toThrow(/JSON-serialisable.*circular/i);

    const sql = (name: string, json: string) =>
      refusal(p, `select * from leasehold.define_schedule($1, 'h', 'app', p_every => '1 minute', p_payload => $2::jsonb)`, [name, json]);
    expect(await sql('deep-sql-32', nestedObjects(32))).toEqual({ code: 'ok', message: '' });
    for (const [label, json] of [['33', nestedArrays(33)], ['33o', nestedObjects(33)], ['6000', nestedArrays(6_000)], ['10000', nestedArrays(10_000)]] as const) {
      const refused = await sql(`deep-bad-sql-${label}`, json);
      expect(refused.code, label).toBe('LH005');
      expect(refused.message).toBe('payload: must nest arrays and objects at most 32 levels deep');
    }
    // deeper than PostgreSQL's own jsonb parser goes: refused (54001) as the statement parses
    // its argument, before define_schedule runs; documented for raw SQL callers
    expect((await sql('deep-bad-sql-30000', nestedArrays(30_000))).code).toBe('54001');
    expect(await stored('deep-bad')).toEqual([]);
    expect(await stored('deep-')).toEqual(['deep-32', 'deep-32o', 'deep-sql-32']);
  });
});

describe('the CLI', () => {
  it('exits 2 naming the field for each, stores nothing, and schedule list --json still reads everything', async () => {
    const asApp = { DATABASE_URL: urlAs(url, ROLE.app1) };
    const define = (name: string, ...rest: string[]) => cli(['schedule', 'define', name, '--handler', 'h', '--by', 'ops', ...rest], asApp);
    for (const tz of ['posixrules', 'Factory', 'localtime', 'UTC+5']) {
      const result = await define(`cli-tz-${tz}`, '--cron', '0 12 * * *', '--tz', tz);
      expect(result.code, result.stderr).toBe(2);
      expect(result.stderr).toMatch(/timezone must be an IANA name/);
    }
    const blank = await define('   ', '--every', '5m', '--json');
    expect(blank.code, blank.stderr).toBe(2);
    expect(JSON.parse(blank.stderr)).toMatchObject({ code: 'INVALID_ARGUMENT', error: expect.stringMatching(/lease name must not begin or end with whitespace/) });
    for (const depth of [6_000, 30_000]) {
      const deep = await define(`cli-deep-${depth}`, '--every', '5m', '--payload', nestedArrays(depth));
      expect(deep.code, deep.stderr).toBe(2);
      expect(deep.stderr).toMatch(/payload nests arrays and objects more than 32 levels deep/);
    }
    const ok = await define('cli-tz-ok', '--cron', '0 12 * * *', '--tz', 'America/Argentina/Buenos_Aires', '--payload', nestedArrays(32));
    expect(ok.code, ok.stderr).toBe(0);
    expect(await stored('cli-')).toEqual(['cli-tz-ok']);
    const listed = await cli(['schedule', 'list', '--json'], asApp);
    expect(listed.code, listed.stderr).toBe(0);
    const names = (JSON.parse(listed.stdout) as Array<{ name: string }>).map((s) => s.name);
    expect(names).toContain('cli-tz-ok');
    expect(names.filter((name) => name.trim() !== name || name.startsWith('cli-deep') || name.startsWith('deep-bad'))).toEqual([]);
  }, 60_000);
});
