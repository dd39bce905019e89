// Slot computation is pure: checked with computed slots, not by waiting. And NextSlots: jobs
// asking the same schedule for the same instant in a row share the answer.
import { describe, expect, it } from 'vitest';
import { defineJob, InvalidArgumentError, parseSchedule, slotsBetween, startWorker, type Schedule } from '../../src/index.js';
import { NextSlots } from '../../src/worker/next-slots.js';

const iso = (dates: Date[]) => dates.map((d) => d.toISOString());

describe('interval schedules', () => {
  it('align to the epoch, so every worker computes the same slots', () => {
    const every90 = parseSchedule({ every: '90s' });
    expect(iso(slotsBetween(every90, new Date('2026-01-01T00:00:10Z'), new Date('2026-01-01T00:05:00Z')))).toEqual([
      '2026-01-01T00:01:30.000Z',
      '2026-01-01T00:03:00.000Z',
      '2026-01-01T00:04:30.000Z',
    ]);
    expect(every90.nominalIntervalMs).toBe(90_000);
    expect(every90.next(new Date('2026-01-01T00:01:30Z'))?.toISOString()).toBe('2026-01-01T00:03:00.000Z');
  });
});

describe('cron schedules across DST (Europe/Berlin, croner rules)', () => {
  const daily = parseSchedule({ cron: '30 2 * * *', timezone: 'Europe/Berlin' });

  it('spring forward: 02:30 does not exist on 2026-03-29, so it runs once at 03:00 local (01:00Z)', () => {
    expect(iso(slotsBetween(daily, new Date('2026-03-27T00:00:00Z'), new Date('2026-03-31T00:00:00Z')))).toEqual([
      '2026-03-27T01:30:00.000Z', // 02:30 CET
      '2026-03-28T01:30:00.000Z', // 02:30 CET
      '2026-03-29T01:00:00.000Z', // 03:00 CEST: the first valid time after the gap
      '2026-03-30T00:30:00.000Z', // 02:30 CEST
    ]);
  });

  it('fall back: 02:30 happens twice on 2026-10-25, and the job runs once, at the first (00:30Z)', () => {
    expect(iso(slotsBetween(daily, new Date('2026-10-23T12:00:00Z'), new Date('2026-10-27T00:00:00Z')))).toEqual([
      '2026-10-24T00:30:00.000Z', // 02:30 CEST
      '2026-10-25T00:30:00.000Z', // 02:30 CEST, the first of the two
      '2026-10-26T01:30:00.000Z', // 02:30 CET
    ]);
  });

  it('an hourly job runs in both repeated hours of the fall-back night', () => {
    const hourly = parseSchedule({ cron: '30 * * * *', timezone: 'Europe/Berlin' });
    expect(iso(slotsBetween(hourly, new Date('2026-10-24T23:45:00Z'), new Date('2026-10-25T02:00:00Z')))).toEqual([
      '2026-10-25T00:30:00.000Z', // 02:30 CEST
      '2026-10-25T01:30:00.000Z', // 02:30 CET
    ]);
  });

  it('supports a seconds field and reports the nominal interval', () => {
    const s = parseSchedule({ cron: '*/5 * * * * *' });
    expect(s.nominalIntervalMs).toBe(5_000);
    expect(parseSchedule({ cron: '*/5 9-17 * * 1-5' }).nominalIntervalMs).toBe(300_000);
  });
});

describe('schedules sharing a cron pattern', () => {
  it('answer each next() with a fresh Date, the same slot for the same instant, whatever was asked before', () => {
    const a = parseSchedule({ cron: '0 3 * * *' });
    const b = parseSchedule({ cron: '0 3 * * *' });
    const at = new Date('2026-01-01T12:00:00Z');
    const first = a.next(at);
    const second = b.next(new Date(at.getTime()));
    expect(first?.toISOString()).toBe('2026-01-02T03:00:00.000Z');
    expect(second).not.toBe(first);
    first?.setTime(0);
    expect(b.next(at)?.toISOString()).toBe('2026-01-02T03:00:00.000Z');
    expect(a.next(new Date('2026-01-02T03:00:00Z'))?.toISOString()).toBe('2026-01-03T03:00:00.000Z');
    expect(b.next(at)?.toISOString()).toBe('2026-01-02T03:00:00.000Z');
  });
});

describe('job definitions fail at definition time with a clear message', () => {
  const handler = async () => undefined;
  it.each([
    [{ name: 'a', cron: '61 * * * *', handler }, /invalid cron '61 \* \* \* \*': field 1 \(minute\) has an invalid value '61'/],
    [{ name: 'a', cron: '0 25 * * *', handler }, /field 2 \(hour\) has an invalid value '25'/],
    [{ name: 'a', cron: '0 0 * * * x', handler }, /field 6 \(day of week\) 'x' contains illegal characters/],
    [{ name: 'a', cron: '* * * *', handler }, /it has 4 field\(s\); a pattern has 5 \('minute hour day month weekday'\), or 6 with seconds first/],
    [{ name: 'a', cron: '0 0 31 2 *', handler }, /never fires/],
    [{ name: 'a', cron: '* * * * *', timezone: 'Mars/Olympus', handler }, /unknown timezone 'Mars\/Olympus': use an IANA name/],
    [{ name: 'a', every: '0s', handler }, /every must be positive/],
    [{ name: 'a', every: '10ms', handler }, /every must be between 1s and/],
    [{ name: 'a', handler }, /give exactly one of cron or every/],
    [{ name: 'a', cron: '* * * * *', every: '1m', handler }, /give exactly one of cron/],
    [{ name: 'a', every: '1m', ttl: 0, handler }, /ttl must be positive/],
    [{ name: 'a', every: '1m', ttl: '-5s', handler }, /ttl '-5s' is not a duration/],
    [{ name: 'a', every: '1m', ttl: '200ms', handler }, /ttl must be at least 300ms for a scheduled job/],
    [{ name: 'a', every: '1m', overlap: 'queue', handler }, /overlap must be one of skip, buffer-one, buffer-all, replace, allow \(got 'queue'\)/],
    [{ name: 'a', every: '1m', catchUp: { all: 0 }, handler }, /catchUp must be 'latest', 'none' or \{ all: n \}/],
    [{ name: '', every: '1m', handler }, /lease name must not be empty/],
    [{ name: 'a', every: '1m' }, /handler must be an async function/],
  ])('%j', (options, message) => {
    expect(() => defineJob(options as Parameters<typeof defineJob>[0])).toThrow(message);
    expect(() => defineJob(options as Parameters<typeof defineJob>[0])).toThrow(InvalidArgumentError);
  });

  it('refuses a duplicate job name in one worker before connecting', async () => {
    await expect(
      startWorker({
        connectionString: 'postgres://127.0.0.1:1/unused',
        jobs: [
          { name: 'twice', every: '1m', handler },
          { name: 'twice', cron: '* * * * *', handler },
        ],
      }),
    ).rejects.toThrow(/job "twice" is defined twice in this worker/);
  });
});

describe('NextSlots', () => {
  it('shares one Date between copies of a cached schedule asked for the same instant', () => {
    const slots = new NextSlots();
    const at = new Date('2026-01-01T12:00:00Z');
    const a = slots.of(parseSchedule({ cron: '0 3 * * *' }), at);
    const b = slots.of(parseSchedule({ cron: '0 3 * * *' }), new Date(at.getTime()));
    expect(a?.toISOString()).toBe('2026-01-02T03:00:00.000Z');
    expect(b).toBe(a);
  });

  it('asks again for another instant or another schedule', () => {
    const slots = new NextSlots();
    const at = new Date('2026-01-01T12:00:00Z');
    expect(slots.of(parseSchedule({ cron: '0 3 * * *' }), at)?.toISOString()).toBe('2026-01-02T03:00:00.000Z');
    expect(slots.of(parseSchedule({ cron: '0 4 * * *' }), at)?.toISOString()).toBe('2026-01-02T04:00:00.000Z');
    expect(slots.of(parseSchedule({ cron: '0 4 * * *', timezone: 'Europe/Berlin' }), at)?.toISOString()).toBe('2026-01-02T03:00:00.000Z');
    expect(slots.of(parseSchedule({ cron: '0 3 * * *' }), new Date('2026-01-02T03:00:00Z'))?.toISOString()).toBe('2026-01-03T03:00:00.000Z');
  });

  it('tells apart schedules that share a next() method but not their pattern', () => {
    const next = function (this: { ms: number }, after: Date): Date {
      return new Date((Math.floor(after.getTime() / this.ms) + 1) * this.ms);
    };
    const every = (ms: number): Schedule & { ms: number } => ({ ms, description: `every ${ms}`, expression: `${ms}`, timezone: null, nominalIntervalMs: ms, next });
    const slots = new NextSlots();
    const at = new Date(10_500);
    expect(slots.of(every(1_000), at)?.getTime()).toBe(11_000);
    expect(slots.of(every(4_000), at)?.getTime()).toBe(12_000);
  });
});
