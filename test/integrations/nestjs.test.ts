// leasehold/nestjs: the decorators keep @nestjs/schedule's metadata in both orders, and a real
// NestJS application (@nestjs/core, @nestjs/schedule from the registry) in three processes runs
// each @Cron occurrence of a @Leased() method once, records and logs skips, moves on to another
// replica on time when one is SIGKILLed, and shuts down cleanly through enableShutdownHooks.
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { setTimeout as sleep } from 'node:timers/promises';
import 'reflect-metadata';
import { Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, Interval, ScheduleModule } from '@nestjs/schedule';
import { silentLogger } from '../../src/observe/logger.js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, freshDatabase, rawPool } from '../support/db.js';
import { JsonLinesProcess, startFixture, type Line } from '../support/processes.js';
import { Leased, LeaseholdJob, LeaseholdModule, nestLogger } from '../../src/nestjs/index.js';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const APP = fileURLToPath(new URL('../fixtures/nest/app.ts', import.meta.url));
const STALL_APP = fileURLToPath(new URL('../fixtures/nest/stall-app.ts', import.meta.url));
const APP_TSCONFIG = fileURLToPath(new URL('../fixtures/nest/tsconfig.json', import.meta.url));
let url: string;
const children: JsonLinesProcess[] = [];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  await rawPool(url, 2).query('create table nest_witness (job text, slot timestamptz, fence bigint, holder text)');
});

afterAll(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill()));
});

/** Applies method decorators as TypeScript does (the last listed first) and returns the method. */
function decorate(decorators: MethodDecorator[]): (...args: unknown[]) => unknown {
  class Target {
    method(): void {}
  }
  const descriptor = Object.getOwnPropertyDescriptor(Target.prototype, 'method')!;
  for (const decorator of [...decorators].reverse()) decorator(Target.prototype, 'method', descriptor);
  return descriptor.value as (...args: unknown[]) => unknown;
}

describe('decorators', () => {
  const meta = Reflect as unknown as { getMetadata(key: string, target: object): unknown };
  it.each([
    ['@Cron above @Leased', [Cron('*/5 * * * * *', { timeZone: 'Europe/Berlin' }), Leased()]],
    ['@Leased above @Cron', [Leased(), Cron('*/5 * * * * *', { timeZone: 'Europe/Berlin' })]],
  ])('%s: @nestjs/schedule finds its metadata on the method that replaces it', (_, decorators) => {
    const method = decorate(decorators as MethodDecorator[]);
    expect(meta.getMetadata('SCHEDULER_TYPE', method)).toBe(1); // SchedulerType.CRON
    expect(meta.getMetadata('SCHEDULE_CRON_OPTIONS', method)).toMatchObject({ cronTime: '*/5 * * * * *', timeZone: 'Europe/Berlin' });
    expect(meta.getMetadata('leasehold:leased', method)).toBeDefined();
  });

  it('works with @Interval in both orders', () => {
    for (const decorators of [[Interval(5_000), Leased()], [Leased(), Interval(5_000)]]) {
      const method = decorate(decorators);
      expect(meta.getMetadata('SCHEDULE_INTERVAL_OPTIONS', method)).toEqual({ timeout: 5_000 });
    }
  });

  it('a method called outside a module says what is missing', async () => {
    const method = decorate([Leased()]);
    await expect(method.call({})).rejects.toThrow(/import LeaseholdModule\.forRoot/);
  });

  it('nestLogger writes leasehold lines to a Nest LoggerService', () => {
    const seen: string[] = [];
    const service = { log: (m: unknown) => seen.push(`log ${String(m)}`), debug: (m: unknown) => seen.push(`debug ${String(m)}`), warn: (m: unknown) => seen.push(`warn ${String(m)}`), error: (m: unknown) => seen.push(`error ${String(m)}`) };
    const logger = nestLogger(service);
    logger.warn({ event: 'slot:skipped' }, 'skipped "x" slot …');
    logger.info({ event: 'run:started' });
    expect(seen).toEqual(['warn skipped "x" slot …', 'debug run:started']);
  });

  it('refuses unknown module options with the closest valid one', () => {
    expect(() => LeaseholdModule.forRoot({ conectionString: 'x' } as never)).toThrow(/unknown option 'conectionString' \(did you mean 'connectionString'\?\)/);
    expect(() => LeaseholdModule.forRootAsync({ useFactory: () => ({}), injects: [] } as never)).toThrow(/unknown option 'injects'/);
  });

  it('the fixture application type-checks with experimentalDecorators (as Nest projects compile)', { timeout: 120_000 }, async () => {
    await promisify(execFile)(process.execPath, [`${ROOT}node_modules/typescript/bin/tsc`, '-p', APP_TSCONFIG], { cwd: ROOT });
  });
});

describe('in one process', () => {
  it('@Interval(ms) becomes `every`, and @Leased({ every }) overrides a @Cron schedule', { timeout: 60_000 }, async () => {
    class Ticks {
      seen: Array<{ job: string; slot: Date }> = [];
      async interval(ctx: { job: string; slot: Date }): Promise<void> {
        this.seen.push(ctx);
      }
      async overridden(ctx: { job: string; slot: Date }): Promise<void> {
        this.seen.push(ctx);
      }
    }
    const apply = (key: 'interval' | 'overridden', decorators: MethodDecorator[]) => {
      const descriptor = Object.getOwnPropertyDescriptor(Ticks.prototype, key)!;
      for (const decorator of [...decorators].reverse()) decorator(Ticks.prototype, key, descriptor);
      Object.defineProperty(Ticks.prototype, key, descriptor);
    };
    apply('interval', [Interval(1_000), Leased({ ttl: '5s' })]);
    apply('overridden', [Leased({ ttl: '5s', every: '2s' }), Cron('* * * * * *')]);
    Injectable()(Ticks);
    class AppModule {}
    Module({ imports: [ScheduleModule.forRoot(), LeaseholdModule.forRoot({ connectionString: url, holder: 'in-process', logger: silentLogger() })], providers: [Ticks] })(AppModule);
    const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
    await app.init();
    await sleep(4_500);
    await app.close();
    const seen = app.get(Ticks).seen;
    const interval = seen.filter((s) => s.job === 'Ticks.interval');
    const overridden = seen.filter((s) => s.job === 'Ticks.overridden');
    expect(interval.length).toBeGreaterThanOrEqual(2);
    expect(overridden.length).toBeGreaterThanOrEqual(1);
    for (const s of interval) expect(s.slot.getTime() % 1_000).toBe(0);
    for (const s of overridden) expect(s.slot.getTime() % 2_000).toBe(0);
    const { rows } = await rawPool(url, 2).query<{ name: string; schedule: string }>("select name, schedule from leasehold.jobs where name like 'Ticks.%' order by name");
    expect(rows).toEqual([
      { name: 'Ticks.interval', schedule: '1s' },
      { name: 'Ticks.overridden', schedule: '2s' },
    ]);
  });
});

describe('the @LeaseholdJob() worker', () => {
  const appWith = (options: Parameters<typeof LeaseholdModule.forRoot>[0], job: string) => {
    class Every {
      seen: Date[] = [];
      async run(ctx: { slot: Date }): Promise<void> {
        this.seen.push(ctx.slot);
      }
    }
    const descriptor = Object.getOwnPropertyDescriptor(Every.prototype, 'run')!;
    LeaseholdJob({ name: job, every: '1s', ttl: '10s' })(Every.prototype, 'run', descriptor);
    Object.defineProperty(Every.prototype, 'run', descriptor);
    Injectable()(Every);
    class AppModule {}
    Module({ imports: [LeaseholdModule.forRoot({ connectionString: url, holder: job, logger: silentLogger(), ...options })], providers: [Every] })(AppModule);
    return { AppModule, Every };
  };

  /** Runs the application for `ms`: the slots its job ran, how long before its last slot the lease was taken, and the sessions listening for changes. */
  const runFor = async (options: Parameters<typeof LeaseholdModule.forRoot>[0], job: string, ms: number) => {
    const { AppModule, Every } = appWith(options, job);
    const app = await NestFactory.createApplicationContext(AppModule, { logger: false });
    await app.init();
    await sleep(ms);
    const db = rawPool(url, 2);
    const lead = await db.query<{ lead_ms: number }>('select extract(epoch from (last_slot - acquired_at)) * 1000 as lead_ms from leasehold.leases where name = $1', [job]);
    const listening = await db.query<{ n: number }>("select count(*)::int as n from pg_stat_activity where datname = current_database() and query ~* '^\\s*listen'");
    await app.close();
    return { runs: app.get(Every).seen.length, leadMs: Number(lead.rows[0]?.lead_ms), listening: Number(listening.rows[0]?.n) };
  };

  it('gets the module\'s claimAhead and notifications', { timeout: 60_000 }, async () => {
    const { runs, leadMs, listening } = await runFor({ claimAhead: '400ms', scheduleRefresh: '200ms', notifications: false }, 'nest-ahead', 3_500);
    expect(runs).toBeGreaterThanOrEqual(2);
    // each slot's lease was taken about 400 ms before the slot (the default 'auto' claims at the
    // slot: a tick of one job never takes 50 ms)
    expect(leadMs).toBeGreaterThan(150);
    expect(listening).toBe(0);
  });

  it('listens for changes by default, and claims at the slot', { timeout: 60_000 }, async () => {
    const { runs, leadMs, listening } = await runFor({}, 'nest-default', 2_500);
    expect(runs).toBeGreaterThanOrEqual(1);
    expect(leadMs).toBeLessThanOrEqual(0);
    expect(listening).toBeGreaterThanOrEqual(1);
  });

  it('refuses a worker option out of its bounds where the module is configured', () => {
    expect(() => LeaseholdModule.forRoot({ claimAhead: '20s' })).toThrow(/claimAhead must be between 0ms and 10s \(got 20s\)/);
    expect(() => LeaseholdModule.forRoot({ scheduleRefresh: '1ms' })).toThrow(/scheduleRefresh/);
    expect(() => LeaseholdModule.forRoot({ notifications: 'yes' as never })).toThrow(/notifications must be true or false/);
  });
});

type Run = { slot: Date; holder: string; outcome: string; started_at: Date };

describe('a NestJS application in three processes', () => {
  it('runs each @Cron occurrence once, records and logs skips, survives a SIGKILL on time, shuts down cleanly', { timeout: 180_000 }, async () => {
    const start = (i: number) => JsonLinesProcess.start(process.execPath, ['--import', 'tsx', APP], { DATABASE_URL: url, HOLDER: `nest-${i}`, LOG: 'json', TSX_TSCONFIG_PATH: APP_TSCONFIG }, undefined, 60_000);
    const apps = await Promise.all([1, 2, 3].map(start));
    children.push(...apps);
    for (const app of apps) {
      // the client is injectable by its class and by LEASEHOLD_CLIENT, configured by forRootAsync
      const ready = app.lines.find((l) => l.event === 'ready');
      expect(ready).toMatchObject({ clientHolder: app.holderName, sameClient: true });
    }
    const db = rawPool(url, 2);
    const dbNow = async () => (await db.query<{ now: Date }>('select clock_timestamp() as now')).rows[0]!.now;
    const from = new Date(Math.ceil((await dbNow()).getTime() / 1000) * 1000 + 1000);
    await sleep(7_000);

    // SIGKILL the replica holding nest-a right now (it may be in an overrun)
    let victim: JsonLinesProcess | undefined;
    for (let i = 0; i < 100 && !victim; i++) {
      const { rows } = await db.query<{ holder: string }>("select holder from leasehold.leases where name = 'nest-a' and token is not null");
      victim = apps.find((a) => a.holderName === rows[0]?.holder);
      if (!victim) await sleep(50);
    }
    expect(victim).toBeDefined();
    victim!.signal('SIGKILL');
    await victim!.exited;
    const killedAt = await dbNow();
    await sleep(6_000);
    const until = new Date(Math.floor((await dbNow()).getTime() / 1000) * 1000 - 2000);

    const survivors = apps.filter((a) => a !== victim);
    for (const s of survivors) s.signal('SIGTERM');
    await Promise.all(survivors.map((s) => s.exited));
    for (const s of survivors) expect(s.lines.some((l) => l.event === 'closed'), s.stderr).toBe(true);

    const runs = async (job: string) =>
      (await db.query<Run>('select slot, holder, outcome, started_at from leasehold.runs where job = $1 and slot >= $2 and slot <= $3 order by slot', [job, from, until])).rows;
    const bySlot = <T extends { slot: Date }>(rows: T[]) => {
      const map = new Map<number, T[]>();
      for (const row of rows) map.set(row.slot.getTime(), [...(map.get(row.slot.getTime()) ?? []), row]);
      return map;
    };
    const seconds: number[] = [];
    for (let t = from.getTime(); t <= until.getTime(); t += 1000) seconds.push(t);
    expect(seconds.length).toBeGreaterThanOrEqual(10);
    const summary: Record<string, object> = {};
    for (const job of ['nest-a', 'nest-b', 'nest-own']) {
      const ran = bySlot(await runs(job));
      const skipped = bySlot((await db.query<{ slot: Date }>('select slot from leasehold.skips where job = $1 and slot >= $2 and slot <= $3', [job, from, until])).rows);
      const witnessed = bySlot((await db.query<{ slot: Date }>('select slot from nest_witness where job = $1 and slot >= $2 and slot <= $3', [job, from, until])).rows);
      for (const t of seconds) {
        const at = `${job} ${new Date(t).toISOString()}`;
        expect(ran.get(t)?.length ?? 0, at).toBeLessThanOrEqual(1);
        expect(witnessed.get(t)?.length ?? 0, at).toBeLessThanOrEqual(1);
        expect((ran.get(t)?.length ?? 0) + (skipped.get(t)?.length ?? 0), at).toBe(1);
      }
      summary[job] = { slots: seconds.length, ran: ran.size, skipped: skipped.size, holders: [...new Set([...ran.values()].flat().map((r) => r.holder))].length };
    }

    // skips: recorded for the overruns of nest-a, each logged by the replica that recorded it
    const skips = (await db.query<{ slot: Date; recorded_by: string }>("select slot, recorded_by from leasehold.skips where job = 'nest-a'")).rows;
    expect(skips.length).toBeGreaterThan(0);
    const logged = apps.flatMap((a) => a.lines.filter((l: Line) => l.event === 'log' && l.logEvent === 'slot:skipped' && l.job === 'nest-a').map((l) => `${a.holderName} ${String(l.slot)}`));
    for (const skip of skips) expect(logged).toContain(`${skip.recorded_by} ${skip.slot.toISOString()}`);

    // after the SIGKILL: the next occurrence ran on another replica, long before the 10 s TTL
    const next = (await runs('nest-a')).find((r) => r.slot.getTime() >= Math.ceil(killedAt.getTime() / 1000) * 1000 + 1000 && r.outcome !== 'lost');
    expect(next).toBeDefined();
    expect(next!.holder).not.toBe(victim!.holderName);
    const lateMs = next!.started_at.getTime() - next!.slot.getTime();
    expect(lateMs).toBeLessThan(5_000);
    const victimRunning = await db.query("select 1 from leasehold.runs where holder = $1 and outcome = 'running'", [victim!.holderName]);
    expect(victimRunning.rowCount).toBe(0); // its last run was taken over (lost) or had finished

    // clean shutdown: no run left running, no lease left held by the survivors
    const names = survivors.map((s) => s.holderName);
    expect((await db.query("select 1 from leasehold.runs where holder = any($1) and outcome = 'running'", [names])).rowCount).toBe(0);
    expect((await db.query('select 1 from leasehold.leases where holder = any($1) and token is not null', [names])).rowCount).toBe(0);
    console.log(JSON.stringify({ ...summary, killed: victim!.holderName, nextSlotAfterKill: { holder: next!.holder, startedMsAfterSlot: lateMs } }));
  });
});

describe('a NestJS application stopped (SIGSTOP) between a claim and its @Leased() method', () => {
  it('does not enter the method under a lost lease when it resumes after another replica took the next occurrence', { timeout: 120_000 }, async () => {
    const start = (holder: string, env: Record<string, string> = {}) =>
      JsonLinesProcess.start(process.execPath, ['--import', 'tsx', STALL_APP], { DATABASE_URL: url, HOLDER: holder, TSX_TSCONFIG_PATH: APP_TSCONFIG, ...env }, undefined, 60_000);
    // the fixture stops itself once a claim's answer grants it an occurrence, before the method is called
    const stale = await start('nest-stale', { STOP_AFTER_CLAIM: '1' });
    children.push(stale);
    const stopped = await stale.waitFor((l) => l.event === 'stopped-after-claim', 30_000);
    const slot = String(stopped.slot);
    const taker = await start('nest-taker');
    children.push(taker);
    // a later occurrence runs on the other replica, after the stopped one's 2 s lease expired
    await taker.waitFor((l) => l.event === 'entered' && String(l.slot) > slot, 60_000);
    const stalledMs = Date.now() - Number(stopped.at);
    expect(stalledMs).toBeGreaterThan(2_000);
    stale.signal('SIGCONT');
    const resumedAt = Date.now();
    await stale.waitFor((l) => l.event === 'lost' && l.name === 'nest-stall' && l.fence === Number(stopped.fence), 10_000);
    const lostAfterResumeMs = Date.now() - resumedAt;
    await sleep(500);
    expect(stale.lines.filter((l) => l.event === 'entered' && l.slot === slot)).toEqual([]);
    // whatever either replica entered, it entered with its signal not aborted
    expect([...stale.lines, ...taker.lines].filter((l) => l.event === 'entered' && l.aborted !== false)).toEqual([]);
    const runs = (await rawPool(url, 2).query<{ slot: Date; holder: string; outcome: string }>("select slot, holder, outcome from leasehold.runs where job = 'nest-stall' order by slot, fence")).rows;
    expect(runs.filter((r) => r.slot.toISOString() === slot).map((r) => [r.holder, r.outcome])).toEqual([['nest-stale', 'lost']]);
    // each occurrence at most once
    const ran = runs.filter((r) => r.outcome !== 'lost').map((r) => r.slot.getTime());
    expect(new Set(ran).size).toBe(ran.length);
    expect(runs.some((r) => r.holder === 'nest-taker' && r.outcome !== 'lost' && r.slot.toISOString() > slot)).toBe(true);
    console.log(JSON.stringify({ trial: 'nest', stalledMs, slotToResumeMs: resumedAt - Date.parse(slot), lostAfterResumeMs }));
  });
});
