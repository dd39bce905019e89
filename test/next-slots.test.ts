// NextSlots: jobs asking the same schedule for the same instant in a row share the answer.
import { describe, expect, it } from 'vitest';
import { parseSchedule, type Schedule } from '../src/index.js';
import { NextSlots } from '../src/worker/next-slots.js';

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
