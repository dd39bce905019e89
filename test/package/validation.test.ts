// Bad input gets a typed error that says what to do, before anything reaches the database.
import { beforeAll, describe, expect, it } from 'vitest';
import {
  createLeasehold,
  DatabaseUnavailableError,
  InvalidArgumentError,
  LeaseholdError,
  LeaseLostError,
  type Leasehold,
} from '../../src/index.js';
import { formatDuration, parseDuration } from '../../src/validate/duration.js';
import { freePort } from '../../src/db/embedded.js';
import { silentLogger, stderrLogger, type Logger } from '../../src/observe/logger.js';
import { childLogger } from '../../src/observe/child-logger.js';
import { codePoints } from '../../src/validate/names.js';
import { defineJob, startWorker } from '../../src/index.js';
import { client, freshDatabase, waitFor } from '../support/db.js';

describe('durations', () => {
  it.each([
    [1500, 1500],
    ['500ms', 500],
    ['30s', 30_000],
    ['5m', 300_000],
    ['1h30m', 5_400_000],
    ['1.5s', 1_500],
    ['1d', 86_400_000],
    [' 2m ', 120_000],
    // whole milliseconds: 4.1 * 60,000 is 245999.99999999997 in floating point
    ['4.1m', 246_000],
    ['1.001s', 1_001],
    ['8.3m', 498_000],
  ])('parses %j as %d ms', (input, ms) => {
    expect(parseDuration(input, 'ttl')).toBe(ms);
  });

  it.each(['', 'abc', '5 minutes', '1x', '-5s', '5s5', 's'])('rejects %j with a hint', (input) => {
    expect(() => parseDuration(input, 'ttl')).toThrow(/ttl '.*' is not a duration: use milliseconds or a string such as '500ms', '30s'/);
  });

  it.each([
    [2500.4, /ttl must be a whole number of milliseconds \(got 2500\.4\)/],
    ['0.5ms', /ttl '0\.5ms' is not a whole number of milliseconds \(0\.5 ms\)/],
    ['1.0005s', /ttl '1\.0005s' is not a whole number of milliseconds \(1000\.5 ms\)/],
  ])('refuses %j, a fraction of a millisecond', (input, message) => {
    expect(() => parseDuration(input, 'ttl')).toThrow(message);
  });

  it.each(['5', '60000', ' 1.5 '])('rejects the unitless %j, naming the unit it lacks', (input) => {
    expect(() => parseDuration(input, 'ttl')).toThrow(`ttl '${input}' is not a duration: it has no unit; write '${input.trim()}ms', or the same in s, m, h or d.`);
  });

  it('formats durations the way people write them', () => {
    expect([250, 1500, 90_000, 5_400_000, 86_400_000].map(formatDuration)).toEqual(['250ms', '1.5s', '1m30s', '1h30m', '1d']);
  });
});

describe('acquire arguments', () => {
  let lh: Leasehold;
  beforeAll(async () => {
    lh = await client(await freshDatabase(), { liveness: false });
  });

  it.each([
    ['', { ttl: '30s' }, /lease name must not be empty/],
    ['x'.repeat(201), { ttl: '30s' }, /lease name must be 1–200 characters \(got 201\)/],
    ['tab\there', { ttl: '30s' }, /must not contain control, bidirectional or invisible characters \(found U\+0009, a control character, at position 3\)/],
    ['job', { ttl: 0 }, /ttl must be positive \(got 0ms\)/],
    ['job', { ttl: -1000 }, /ttl must be positive/],
    ['job', { ttl: '0s' }, /ttl must be positive/],
    ['job', { ttl: 50 }, /ttl must be between 100ms and 7d \(got 50ms\)/],
    ['job', { ttl: '30d' }, /ttl must be between 100ms and 7d \(got 30d\)/],
    ['job', { ttl: Number.NaN }, /ttl must be a finite number of milliseconds/],
    ['job', { ttl: 'soon' }, /ttl 'soon' is not a duration/],
    ['job', { ttl: '30s', slot: new Date('nope') }, /slot must be a valid Date/],
    ['job', { ttl: '3s', heartbeat: true, heartbeatInterval: '2s' }, /ttl must be at least 2 × heartbeatInterval/],
  ])('acquire(%j, %j) fails with %s', async (name, options, message) => {
    const error = await lh.acquire(name as string, options as { ttl: string }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toBeInstanceOf(LeaseholdError);
    expect(error).not.toBeInstanceOf(LeaseLostError);
    expect(error).toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(message) });
  });

  it.each([
    ['invoice\u202Egnp.exe', /found U\+202E, a bidirectional control, at position 7/],
    ['pay\u200Bments', /found U\+200B, an invisible character, at position 3/],
    ['\u{1F600}\u2066x', /found U\+2066, a bidirectional control, at position 1/],
    ['bom\uFEFF', /found U\+FEFF, an invisible character, at position 3/],
    ['tag\u{E0041}', /found U\+E0041, an invisible character, at position 3/],
  ])('refuses the disguised name %j in TypeScript and in SQL (LH001)', async (name, message) => {
    await expect(lh.acquire(name, { ttl: '30s' })).rejects.toMatchObject({ code: 'INVALID_ARGUMENT', message: expect.stringMatching(message) });
    // the database refuses it too, for callers in other languages, with the same description
    const sql = await lh.pool.query(`select leasehold.check_name($1)`, [name]).catch((e: unknown) => e);
    expect(sql).toMatchObject({ code: 'LH001', message: expect.stringMatching(message) });
    const direct = await lh.pool.query(`insert into leasehold.leases (name) values ($1)`, [name]).catch((e: unknown) => e);
    expect(direct).toMatchObject({ code: '23514' });
    const holder = await lh.pool.query(`select leasehold.check_holder($1)`, [name]).catch((e: unknown) => e);
    expect(holder).toMatchObject({ code: 'LH004', message: expect.stringMatching(message) });
  });

  it('measures names in code points: 200 emoji are valid everywhere, 201 are not', async () => {
    const name = '\u{1F600}'.repeat(200);
    expect(name.length).toBe(400); // UTF-16 units
    const result = await lh.acquire(name, { ttl: '30s' });
    expect(result.acquired).toBe(true);
    if (result.acquired) await result.lease.release();
    await expect(lh.acquire(`${name}x`, { ttl: '30s' })).rejects.toThrow(/lease name must be 1–200 characters \(got 201\)/);
    await expect(lh.pool.query(`select leasehold.check_name($1), leasehold.check_holder($1)`, [name])).resolves.toBeTruthy();
    await expect(lh.pool.query(`select leasehold.check_name($1)`, [`${name}x`])).rejects.toMatchObject({ code: 'LH001' });
  });

  it('needs a ttl', async () => {
    await expect(lh.acquire('job', undefined as unknown as { ttl: string })).rejects.toThrow(/needs a ttl/);
  });
});

describe('connecting', () => {
  it('fails fast with a clear message when nothing listens at the address', async () => {
    const port = await freePort();
    const started = performance.now();
    const error = await createLeasehold({
      connectionString: `postgres://postgres@127.0.0.1:${port}/nowhere`,
      connectTimeout: '2s',
      logger: silentLogger(),
    }).catch((e: unknown) => e);
    expect(performance.now() - started).toBeLessThan(3_000);
    expect(error).toBeInstanceOf(DatabaseUnavailableError);
    expect((error as Error).message).toMatch(new RegExp(`Could not reach PostgreSQL at 127.0.0.1:${port}/nowhere: .*ECONNREFUSED.*DATABASE_URL`));
    expect((error as Error).message).not.toMatch(/postgres@/); // no credentials in messages
  });

  it('fails within the connect timeout when the address does not answer', async () => {
    // a listening socket that never speaks the protocol, like a blackholed server
    const { createServer } = await import('node:net');
    const sockets: import('node:net').Socket[] = [];
    const server = createServer((socket) => sockets.push(socket)).listen(0, '127.0.0.1');
    await new Promise((resolve) => server.once('listening', resolve));
    const port = (server.address() as { port: number }).port;
    try {
      const started = performance.now();
      const error = await createLeasehold({ connectionString: `postgres://u:secret@127.0.0.1:${port}/db`, connectTimeout: 500, logger: silentLogger() }).catch((e: unknown) => e);
      expect(performance.now() - started).toBeLessThan(2_500);
      expect(error).toBeInstanceOf(DatabaseUnavailableError);
      expect((error as Error).message).not.toMatch(/secret/);
      // says that nothing answered in time, where, and which timeout; not "Connection terminated"
      expect(error).toMatchObject({ reason: 'connect-timeout', code: 'DATABASE_UNAVAILABLE' });
      expect((error as Error).message).toBe(
        `PostgreSQL at 127.0.0.1:${port}/db did not answer within the connect timeout (500ms): the host may be down or unreachable, ` +
          'or a firewall drops the traffic. Check the host and port in DATABASE_URL (or the connectionString option).',
      );
    } finally {
      sockets.forEach((s) => s.destroy());
      server.close();
    }
  });

  it('names a missing database and an unknown role as such, not as a server to start', async () => {
    const server = new URL(await freshDatabase());
    const at = (user: string, database: string) => `postgres://${user}@${server.host}/${database}`;
    // with the user's own password: a server with password authentication (the embedded one) checks it first
    const withPassword = `postgres://${server.username}${server.password ? `:${server.password}` : ''}@${server.host}/no_such_db_v`;
    const noDatabase = await createLeasehold({ connectionString: withPassword, logger: silentLogger() }).catch((e: unknown) => e);
    expect(noDatabase).toMatchObject({ code: 'DATABASE_UNAVAILABLE', reason: 'no-database' });
    expect((noDatabase as Error).message).toBe(
      `PostgreSQL at ${server.host} has no database "no_such_db_v": create it (createdb -h ${server.hostname} -p ${server.port} no_such_db_v) ` +
        'or fix the database name in DATABASE_URL (or the connectionString option).',
    );
    const noRole = await createLeasehold({ connectionString: at('no_such_role_v', server.pathname.slice(1)), logger: silentLogger() }).catch((e: unknown) => e);
    expect(noRole).toMatchObject({ code: 'DATABASE_UNAVAILABLE', reason: 'login-refused' });
    // a trust server says the role does not exist; a password server refuses the password
    expect((noRole as Error).message).toMatch(/^PostgreSQL at \S+ (has no role "no_such_role_v": create it \(createuser|refused the login of "no_such_role_v")/);
    expect((noRole as Error).message).not.toMatch(/Check that the server is running/);
  });

  it('refuses a multi-host URL with a typed error that says what is supported', async () => {
    const url = 'postgres://u:secret@127.0.0.1:1,127.0.0.1:2/db?target_session_attrs=read-write';
    const error = await createLeasehold({ connectionString: url, logger: silentLogger() }).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect(error).toMatchObject({ argument: 'connectionString' });
    expect((error as Error).message).toMatch(/^connectionString names 2 hosts \(127\.0\.0\.1:1, 127\.0\.0\.1:2\): .*one host per URL/);
    expect((error as Error).message).not.toMatch(/secret/);
  });

  it('says how to give a database when there is none', async () => {
    const saved = process.env.DATABASE_URL;
    delete process.env.DATABASE_URL;
    try {
      await expect(createLeasehold({ logger: silentLogger() })).rejects.toThrow(/set DATABASE_URL, or pass \{ connectionString \} or \{ pool \}/);
    } finally {
      if (saved !== undefined) process.env.DATABASE_URL = saved;
    }
  });

  it.each([
    [{ holder: '' }, /holder must not be empty/],
    [{ holder: 'h'.repeat(201) }, /holder must be 1–200 characters/],
    [{ queryTimeout: '0s' }, /queryTimeout must be positive/],
    [{ poolSize: 0 }, /poolSize must be an integer from 1 to 1000/],
  ])('rejects options %j', async (options, message) => {
    await expect(createLeasehold({ connectionString: 'postgres://127.0.0.1:1/x', ...options })).rejects.toThrow(message);
  });
});

describe('unknown option keys are refused with the valid ones', () => {
  const handler = async () => undefined;

  it.each([
    [{ tz: 'Europe/Berlin' }, /job "j": unknown option 'tz' \(did you mean 'timezone'\?\); valid options are name, cron, timezone, every, ttl/],
    [{ overlapp: 'allow' }, /unknown option 'overlapp' \(did you mean 'overlap'\?\)/],
    [{ catchup: 'none' }, /unknown option 'catchup' \(did you mean 'catchUp'\?\)/],
    [{ retry: { attempts: 2, backoff: '1s' } }, /job "j": retry: unknown option 'backoff'; valid options are attempts, delay\./],
    [{ retry: 3 }, /job "j": retry must be an object such as \{ attempts: 3, delay: '5s' \} \(got 3\)/],
    [{ catchUp: { all: 3, max: 5 } }, /job "j": catchUp: unknown option 'max'; valid options are all\./],
  ])('defineJob refuses %j', (extra, message) => {
    expect(() => defineJob({ name: 'j', cron: '* * * * *', handler, ...(extra as object) })).toThrow(message);
    expect(() => defineJob({ name: 'j', cron: '* * * * *', handler, ...(extra as object) })).toThrow(InvalidArgumentError);
  });

  it('createLeasehold, acquire, run and startWorker refuse unknown keys before connecting', async () => {
    const nowhere = 'postgres://127.0.0.1:1/x';
    await expect(createLeasehold({ connectionString: nowhere, queryTimout: '1s' } as object)).rejects.toThrow(
      /createLeasehold\(\): unknown option 'queryTimout' \(did you mean 'queryTimeout'\?\); valid options are connectionString, pool/,
    );
    await expect(startWorker({ connectionString: nowhere, jobs: [{ name: 'j', every: '1m', handler }], shutdownGrace: '1s', grace: '1s' } as never)).rejects.toThrow(
      /startWorker\(\): unknown option 'grace' \(did you mean 'shutdownGrace'\?\)/,
    );
    await expect(startWorker({ connectionString: nowhere, jobs: [{ name: 'j', every: '1m', handler, tz: 'UTC' } as never] })).rejects.toThrow(/unknown option 'tz'/);
    const lh = await client(await freshDatabase(), { liveness: false });
    await expect(lh.acquire('job', { ttl: '1s', heartbeats: true } as never)).rejects.toThrow(/acquire\(\): unknown option 'heartbeats' \(did you mean 'heartbeat'\?\)/);
    await expect(lh.run('job', { ttl: '1s', histroy: false } as never, handler)).rejects.toThrow(/run\(\): unknown option 'histroy' \(did you mean 'history'\?\)/);
    // run() takes no 'heartbeat': it always heartbeats
    await expect(lh.run('job', { ttl: '1s', heartbeat: false } as never, handler)).rejects.toThrow(/run\(\): unknown option 'heartbeat'/);
  });
});

describe('a job logger', () => {
  it("logs log.info('message') as a message, and keeps pino's (fields, message) and (error, message)", () => {
    const lines: Array<{ fields: object; message: string | undefined }> = [];
    const sink: Logger = {
      debug: (fields, message) => lines.push({ fields, message }),
      info: (fields, message) => lines.push({ fields, message }),
      warn: (fields, message) => lines.push({ fields, message }),
      error: (fields, message) => lines.push({ fields, message }),
    };
    const log = childLogger(sink, { job: 'j', fence: 3 });
    log.info('plain message');
    log.warn({ rows: 2 }, 'with fields');
    log.error(new Error('boom'), 'failed');
    expect(lines[0]).toEqual({ fields: { job: 'j', fence: 3 }, message: 'plain message' });
    expect(lines[1]).toEqual({ fields: { job: 'j', fence: 3, rows: 2 }, message: 'with fields' });
    expect(lines[2]!.message).toBe('failed');
    expect(lines[2]!.fields).toMatchObject({ job: 'j', err: { type: 'Error', message: 'boom' } });
  });

  it("reaches the worker's logger as (fields, message) from a real run", async () => {
    const lines: Array<{ fields: Record<string, unknown>; message: string | undefined }> = [];
    const keep = (fields: object, message?: string) => void lines.push({ fields: fields as Record<string, unknown>, message });
    const worker = await startWorker({
      connectionString: await freshDatabase(),
      jobs: [{ name: 'logs', every: '1s', handler: async (ctx) => ctx.log.info('hello from the handler') }],
      logger: { debug: keep, info: keep, warn: keep, error: keep },
      handleSignals: false,
    });
    try {
      await waitFor(() => lines.find((l) => l.message === 'hello from the handler'), 20_000, 50);
    } finally {
      await worker.stop();
    }
    const line = lines.find((l) => l.message === 'hello from the handler')!;
    expect(line.fields).toMatchObject({ job: 'logs', fence: expect.any(Number) });
    expect(line.fields).not.toHaveProperty('0');
  });

  it('the default logger writes a message alone as msg', () => {
    const written: string[] = [];
    const original = process.stderr.write.bind(process.stderr);
    process.stderr.write = ((chunk: string) => written.push(chunk) > 0) as typeof process.stderr.write;
    try {
      (stderrLogger('info').info as (message: unknown) => void)('hello');
    } finally {
      process.stderr.write = original;
    }
    expect(JSON.parse(written[0]!)).toMatchObject({ level: 'info', msg: 'hello' });
    expect(JSON.parse(written[0]!)).not.toHaveProperty('0');
  });
});

describe('defaults and lengths of job definitions', () => {
  it('a job that leaves its options out gets the same values as one that states the defaults', () => {
    const handler = async () => undefined;
    const bare = defineJob({ name: 'd', cron: '0 3 * * *', handler });
    const stated = defineJob({ name: 'd', cron: '0 3 * * *', ttl: '30s', bufferLimit: 10, retry: { attempts: 1, delay: '1s' }, jitter: 0, handler });
    expect({ ...bare, schedule: null }).toEqual({ ...stated, schedule: null });
    expect(bare.ttlMs).toBe(30_000);
    expect(bare.retry).toEqual({ attempts: 1, delayMs: 1_000 });
  });

  it('counts code points as for…of does: a surrogate pair is one, a lone surrogate one', () => {
    const forOf = (value: string) => [...value].length;
    for (const value of ['', 'abc', '\u{1F680}', 'a\u{1F680}b', '\ud800', '\udc00\ud800', 'x\ud83d', '\ud83d\ude00\ude00', '\u{1F680}'.repeat(200)]) {
      expect(codePoints(value)).toBe(forOf(value));
    }
    expect(() => defineJob({ name: '\u{1F680}'.repeat(200), every: '1m', handler: async () => undefined })).not.toThrow();
    expect(() => defineJob({ name: '\u{1F680}'.repeat(201), every: '1m', handler: async () => undefined })).toThrow(/got 201/);
  });
});
