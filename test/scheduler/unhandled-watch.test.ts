// How often the first worker of a service asks for schedules no live worker can run
// (src/worker/unhandled.ts): every 5 s while one is unhandled or changes are polled; while
// notifications arrive and nothing is unhandled, only when poked (a definition changed, a worker
// came or went) and every 30 s. Fake timers: the cadence, not the machine's speed, is under test.
// test/control/unhandled-schedules.test.ts runs the whole path on a real worker and database.
import { afterEach, describe, expect, it, vi } from 'vitest';
import type { SchedulerStore, UnhandledRow } from '../../src/worker/claims.js';
import { LeaseholdEmitter } from '../../src/observe/events.js';
import { silentLogger } from '../../src/observe/logger.js';
import { NOTIFIED_POLL_MS } from '../../src/worker/change-listener.js';
import { PeerList } from '../../src/worker/shares.js';
import { UNHANDLED_CHECK_MS, UnhandledWatch } from '../../src/worker/unhandled.js';

function watchWith(rows: () => UnhandledRow[], isFirst = () => true) {
  let asked = 0;
  const store = {
    unhandledSchedules: async () => {
      asked++;
      return rows();
    },
    recordMissedMany: async () => new Map<string, Date[]>(),
  } as unknown as SchedulerStore;
  const logger = silentLogger();
  const watch = new UnhandledWatch({ store, events: new LeaseholdEmitter(logger), logger, holder: 'w', isFirst });
  return { watch, asked: () => asked };
}

const orphan = (): UnhandledRow => ({
  job: 'orphan', handler: 'nobody-has-it', schedule: 'not a schedule', timezone: null, interval_ms: null, since: new Date(), database_time: new Date(),
});

afterEach(() => {
  vi.useRealTimers();
});

describe('the unhandled-schedules watch', () => {
  it('asks every 5 s while it polls, every 30 s while notified with nothing unhandled, and at once when poked', async () => {
    vi.useFakeTimers();
    const { watch, asked } = watchWith(() => []);
    const stop = watch.start();
    await vi.advanceTimersByTimeAsync(UNHANDLED_CHECK_MS * 3);
    expect(asked()).toBe(3); // not notified: polls as before

    watch.setNotified(true);
    await vi.advanceTimersByTimeAsync(UNHANDLED_CHECK_MS); // the look armed before
    const quietFrom = asked();
    await vi.advanceTimersByTimeAsync(NOTIFIED_POLL_MS - 1);
    expect(asked()).toBe(quietFrom);
    await vi.advanceTimersByTimeAsync(1);
    expect(asked()).toBe(quietFrom + 1); // the slow look that heals a lost notification

    watch.poke(); // a definition changed, or the list of live workers did
    await vi.advanceTimersByTimeAsync(0);
    expect(asked()).toBe(quietFrom + 2);
    stop();
    await vi.advanceTimersByTimeAsync(NOTIFIED_POLL_MS * 2);
    expect(asked()).toBe(quietFrom + 2);
  });

  it('keeps asking every 5 s while a schedule is unhandled, so that its slots are recorded as they pass', async () => {
    vi.useFakeTimers();
    let rows: UnhandledRow[] = [];
    const { watch, asked } = watchWith(() => rows);
    watch.setNotified(true);
    const stop = watch.start();
    rows = [orphan()];
    watch.poke(); // the schedule was defined
    await vi.advanceTimersByTimeAsync(0);
    expect(asked()).toBe(1);
    await vi.advanceTimersByTimeAsync(UNHANDLED_CHECK_MS * 4);
    expect(asked()).toBe(5);
    rows = []; // a worker with the handler came
    await vi.advanceTimersByTimeAsync(UNHANDLED_CHECK_MS);
    const handled = asked();
    await vi.advanceTimersByTimeAsync(NOTIFIED_POLL_MS - 1);
    expect(asked()).toBe(handled);
    stop();
  });

  it('asks nothing in a worker that is not the first of its service', async () => {
    vi.useFakeTimers();
    const { watch, asked } = watchWith(() => [orphan()], () => false);
    const stop = watch.start();
    watch.poke();
    await vi.advanceTimersByTimeAsync(UNHANDLED_CHECK_MS * 3);
    expect(asked()).toBe(0);
    stop();
  });

  it('is poked by a list of live workers that changed, not by one read again unchanged', async () => {
    let reads: Array<Array<{ key: string; role: string | null }>> = [];
    const list = new PeerList(async () => reads.shift() ?? []);
    let changes = 0;
    list.onChange(() => changes++);
    reads = [
      [{ key: '1', role: 'shop' }, { key: '2', role: 'shop' }],
      [{ key: '2', role: 'shop' }, { key: '1', role: 'shop' }], // the same workers, another order
      [{ key: '1', role: 'shop' }], // worker 2 went
      [{ key: '1', role: 'billing' }], // the same key under another role
    ];
    for (let i = 0; i < 4; i++) {
      list.expire();
      await list.refresh('1');
    }
    expect(changes).toBe(3);
  });
});
