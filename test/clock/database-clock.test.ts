// The step detector of the database clock estimate, fed samples as a real server would answer
// them (database time, sent, received on the monotonic clock). The end-to-end behaviour on a
// server whose clock steps is in test/clock/step.test.ts.
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { afterAll, expect, it } from 'vitest';
import { DatabaseClock, type ClockStep } from '../../src/schedule/database-clock.js';

// never connected: observe() only computes
const pool = new pg.Pool({ max: 1 });
afterAll(() => pool.end());

function clockWithSteps(): { clock: DatabaseClock; steps: ClockStep[] } {
  const steps: ClockStep[] = [];
  const clock = new DatabaseClock(pool, 1_000, 'nowhere', { onStep: (step) => steps.push(step) });
  return { clock, steps };
}

const DB_EPOCH = Date.parse('2026-01-01T00:00:00Z');

it('ignores drift and slow answers, and reports a step of more than a second, once', () => {
  const { clock, steps } = clockWithSteps();
  const t = performance.now();
  clock.observe(new Date(DB_EPOCH + 5), t, t + 10);
  expect(clock.synced).toBe(true);
  // 300 ms of drift, then an answer that took 2 s (the database time could be anywhere in it)
  clock.observe(new Date(DB_EPOCH + 60_000 + 300), t + 60_000, t + 60_010);
  clock.observe(new Date(DB_EPOCH + 120_000 + 1_900), t + 120_000, t + 122_000);
  expect(steps).toEqual([]);
  // +1 h
  clock.observe(new Date(DB_EPOCH + 3_600_000 + 180_000), t + 180_000, t + 180_010);
  expect(steps).toHaveLength(1);
  expect(steps[0]!.deltaMs).toBeGreaterThan(3_599_000);
  expect(steps[0]!.deltaMs).toBeLessThan(3_601_000);
  // the estimate moved with it: the next consistent sample is no step
  clock.observe(new Date(DB_EPOCH + 3_600_000 + 240_000), t + 240_000, t + 240_010);
  expect(steps).toHaveLength(1);
  // -30 s
  clock.observe(new Date(DB_EPOCH + 3_600_000 + 300_000 - 30_000), t + 300_000, t + 300_010);
  expect(steps).toHaveLength(2);
  expect(steps[1]!.deltaMs).toBeLessThan(-29_000);
  expect(steps[1]!.deltaMs).toBeGreaterThan(-31_000);
});

it('does not call a sub-second difference a step', () => {
  const { clock, steps } = clockWithSteps();
  const t = performance.now();
  clock.observe(new Date(DB_EPOCH), t, t + 2);
  clock.observe(new Date(DB_EPOCH + 1_000 + 800), t + 1_000, t + 1_002);
  clock.observe(new Date(DB_EPOCH + 2_000 + 100), t + 2_000, t + 2_002);
  expect(steps).toEqual([]);
});
