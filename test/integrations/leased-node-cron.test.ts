// leased() under node-cron: three replicas fire every second on their own timers; with the
// wrapper each slot runs once across them or is recorded as skipped (the handler overruns every
// 4th second); in the same test three replicas without it run every slot three times.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, freshDatabase, rawPool } from '../support/db.js';
import { JsonLinesProcess, startFixture } from '../support/processes.js';
import { leased } from '../../src/index.js';
import { parseSchedule } from '../../src/schedule/schedule.js';
import { occurrenceAtOrBefore, occurrenceFor } from '../../src/integrations/occurrence.js';

const REPLICA = fileURLToPath(new URL('../fixtures/node-cron-replica.ts', import.meta.url));
let url: string;
const children: JsonLinesProcess[] = [];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  await rawPool(url, 2).query('create table cron_witness (mode text, job text, slot timestamptz, holder text)');
});

afterAll(async () => {
  await Promise.all(children.splice(0).map((c) => c.kill()));
});

describe('occurrence mapping', () => {
  it('maps a call to the occurrence at or just before it, counting an early call (within the tolerance) for the coming one', () => {
    const everySecond = parseSchedule({ cron: '* * * * * *' });
    const at = (iso: string) => new Date(iso);
    expect(occurrenceFor(everySecond, at('2026-12-01T10:00:00.700Z'), 500)).toEqual(at('2026-12-01T10:00:01.000Z'));
    expect(occurrenceFor(everySecond, at('2026-12-01T10:00:00.300Z'), 500)).toEqual(at('2026-12-01T10:00:00.000Z'));
    expect(occurrenceFor(everySecond, at('2026-12-01T10:00:00.000Z'), 0)).toEqual(at('2026-12-01T10:00:00.000Z'));
    // a weekday schedule on a Sunday: Friday's occurrence, past the weekend gap
    const weekdays = parseSchedule({ cron: '0 9 * * 1-5', timezone: 'Europe/Berlin' });
    expect(occurrenceAtOrBefore(weekdays, at('2026-11-29T12:00:00Z'))).toEqual(at('2026-11-27T08:00:00.000Z'));
    const every90s = parseSchedule({ every: '90s' });
    expect(occurrenceAtOrBefore(every90s, at('1970-01-01T00:02:00Z'))).toEqual(at('1970-01-01T00:01:30Z'));
  });

  it('refuses a call without a schedule, unknown options and a tolerance beyond the interval', async () => {
    const leasehold = await client(url, { liveness: false });
    const handler = async () => undefined;
    expect(() => leased(leasehold, { name: 'x' }, handler)).toThrow(/give the schedule your scheduler fires on/);
    expect(() => leased(leasehold, { name: 'x', every: '1s', tz: 'UTC' } as never, handler)).toThrow(/unknown option 'tz' \(did you mean 'timezone'\?\)/);
    expect(() => leased(leasehold, { name: 'x', every: '1s', tolerance: '2s' }, handler)).toThrow(/tolerance/);
  });
});

// libfaketime (Debian's faketime package, which .ci/run installs) skews the leased replicas'
// clocks, so node-cron fires on each at a different moment; without it they share the clock.
const libfaketime = ['/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1', '/usr/lib/faketime/libfaketime.so.1'].find(existsSync);
const SKEWS = ['+0.35', '0', '-0.35'];
const skew = (i: number): Record<string, string> =>
  libfaketime && SKEWS[i] !== '0' ? { LD_PRELOAD: libfaketime, FAKETIME: SKEWS[i]!, DONT_FAKE_MONOTONIC: '1' } : {};

describe('three node-cron replicas every second, a handler that overruns every 4th second', () => {
  it('with leased(): each slot runs exactly once or is recorded skipped; without it: three times', { timeout: 120_000 }, async () => {
    const started = await Promise.all(
      ['leased', 'control'].flatMap((mode) =>
        [0, 1, 2].map((i) =>
          startFixture(url, { MODE: mode, HOLDER: `${mode}-${i + 1}`, JOB: 'cron-every-second', ...(mode === 'leased' ? skew(i) : {}) }, REPLICA),
        ),
      ),
    );
    children.push(...started);
    // the window: whole seconds after every replica scheduled, before any is stopped
    const from = new Date(Math.ceil(Date.now() / 1000) * 1000 + 1000);
    await sleep(12_000);
    const until = new Date(Math.floor(Date.now() / 1000) * 1000 - 2000);
    await Promise.all(started.map(async (c) => c.signal('SIGTERM')));
    const codes = await Promise.all(started.map(async (c) => (await c.exited).code));
    expect(codes).toEqual([0, 0, 0, 0, 0, 0]);
    for (const c of started) expect(c.lines.filter((l) => l.event === 'error')).toEqual([]);

    const db = rawPool(url, 2);
    const seconds: number[] = [];
    for (let t = from.getTime(); t <= until.getTime(); t += 1000) seconds.push(t);
    expect(seconds.length).toBeGreaterThanOrEqual(6);
    const count = async (sql: string, mode?: string) => {
      const { rows } = await db.query<{ slot: Date; n: number }>(sql, mode ? [from, until, mode] : [from, until]);
      return new Map(rows.map((r) => [r.slot.getTime(), Number(r.n)]));
    };
    const window = 'slot >= $1 and slot <= $2';
    const leasedRuns = await count(`select slot, count(*) n from cron_witness where mode = $3 and ${window} group by slot`, 'leased');
    const historyRuns = await count(`select slot, count(*) n from leasehold.runs where job = 'cron-every-second' and ${window} group by slot`);
    const skips = await count(`select slot, count(*) n from leasehold.skips where job = 'cron-every-second' and ${window} group by slot`);
    const missed = await count(`select slot, count(*) n from leasehold.missed where job = 'cron-every-second' and ${window} group by slot`);
    const control = await count(`select slot, count(*) n from cron_witness where mode = $3 and ${window} group by slot`, 'control');

    const accounted = seconds.map((t) => ({ ran: leasedRuns.get(t) ?? 0, history: historyRuns.get(t) ?? 0, skipped: skips.get(t) ?? 0, missed: missed.get(t) ?? 0 }));
    for (const [i, slot] of accounted.entries()) {
      const at = new Date(seconds[i]!).toISOString();
      expect(slot.ran, at).toBeLessThanOrEqual(1); // never twice
      expect(slot.history, at).toBe(slot.ran); // the history says the same
      expect(slot.ran + slot.skipped, at).toBe(1); // exactly once, or skipped
      expect(slot.missed, at).toBe(0);
    }
    const ran = accounted.filter((s) => s.ran === 1).length;
    // whatever each replica's clock says, no run started before its slot by the database clock
    const { rows: lateness } = await db.query<{ ms: number }>(
      `select extract(epoch from started_at - slot) * 1000 as ms from leasehold.runs where job = 'cron-every-second' and ${window}`,
      [from, until],
    );
    for (const { ms } of lateness) expect(Number(ms)).toBeGreaterThanOrEqual(0);
    const holders = (await db.query<{ holder: string }>(`select distinct holder from leasehold.runs where job = 'cron-every-second' and ${window}`, [from, until])).rows;
    const skipped = accounted.filter((s) => s.skipped === 1).length;
    expect(skipped).toBeGreaterThan(0); // the overruns did make slots skip
    const controlRuns = seconds.map((t) => control.get(t) ?? 0);
    const controlTotal = controlRuns.reduce((a, b) => a + b, 0);
    // node-cron alone runs (nearly) every slot on all three replicas
    expect(controlTotal).toBeGreaterThanOrEqual(2.5 * seconds.length);
    expect(Math.max(...controlRuns)).toBe(3);
    const skipHolders = (await db.query<{ holder: string }>("select distinct holder from leasehold.skips where job = 'cron-every-second'")).rows.map((r) => r.holder);
    for (const h of skipHolders) expect(h).toMatch(/^leased-[123]$/);
    console.log(JSON.stringify({ skewed: Boolean(libfaketime), slots: seconds.length, leased: { ran, skipped, missed: 0, duplicates: 0, holders: holders.length, maxLateMs: Math.round(Math.max(...lateness.map((l) => Number(l.ms)))) }, control: { executions: controlTotal, perSlot: controlTotal / seconds.length } }));
  });
});
