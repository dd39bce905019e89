// A clock step window stored after missed slots inside it were recorded clears them: a worker
// that did not see a forward step (started a moment before it) can claim the first slot after the
// step and record the jumped-over slots before a worker that saw the step stores its window. The
// fault suite's replicated tier found this order. Whichever comes first, the history must end as
// if the window had been stored first. Plain SQL on the test server: no libfaketime needed.
import type pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { client, freshDatabase, rawPool } from '../support/db.js';

let pool: pg.Pool;

beforeAll(async () => {
  const url = await freshDatabase();
  await client(url); // migrates
  pool = rawPool(url, 2);
});

const MIN = 60_000;

async function missed(job: string): Promise<string[]> {
  const { rows } = await pool.query<{ slot: Date }>('select slot from leasehold.missed where job = $1 order by slot', [job]);
  return rows.map((r) => r.slot.toISOString());
}

/** Records one missed slot per minute from `fromMin` to `toMin` minutes before the database's now. */
async function recordMissedMinutes(job: string, fromMin: number, toMin: number, holder = 'late-worker'): Promise<Date[]> {
  const { rows } = await pool.query<{ now: Date }>('select date_trunc(\'minute\', now()) as now');
  const now = rows[0]!.now.getTime();
  const slots: Date[] = [];
  for (let m = fromMin; m >= toMin; m--) slots.push(new Date(now - m * MIN));
  const recorded = await pool.query<{ n: number }>('select (select count(*)::int from leasehold.record_missed_slots(array_fill($1::text, array[cardinality($2::timestamptz[])]), $2::timestamptz[], $3, $4)) as n', [job, slots, 'downtime', holder]);
  expect(recorded.rows[0]?.n).toBe(slots.length);
  return slots;
}

describe('record_clock_step after record_missed', () => {
  it('deletes the missed slots inside the window, keeps those outside it and those recorded before it began', async () => {
    // slots 20 .. 1 minutes ago recorded missed now (a worker that did not see the step)
    const slots = await recordMissedMinutes('a', 20, 1);
    // a row recorded before the window began is not the step's doing: it stays
    const early = new Date(slots[10]!.getTime());
    await pool.query(`insert into leasehold.missed (job, slot, reason, recorded_by, recorded_at) values ('a0', $1, 'downtime', 'w0', $2)`, [early, new Date(slots[0]!.getTime() - 60 * MIN)]);
    // another job's slots inside the window go too: the step jumped over every job's slots
    const other = await recordMissedMinutes('b', 12, 12);
    // the step jumped from 15 to 5 minutes ago (database time): slots 14 .. 5 minutes ago never existed
    const from = new Date(slots[5]!.getTime()); // 15 minutes ago: excluded, (from, to]
    const to = new Date(slots[15]!.getTime()); // 5 minutes ago: included
    const stored = await pool.query<{ stored: boolean }>(`select leasehold.record_clock_step($1, $2, 'saw-the-step') as stored`, [from, to]);
    expect(stored.rows[0]?.stored).toBe(true);
    const expected = slots.filter((s) => s <= from || s > to).map((s) => s.toISOString());
    expect(await missed('a')).toEqual(expected);
    expect(await missed('b')).toEqual([]);
    expect(await missed('a0')).toEqual([early.toISOString()]);
    expect(other).toHaveLength(1);
    // and record_missed still refuses them afterwards
    const again = await pool.query<{ n: number }>('select (select count(*)::int from leasehold.record_missed_slots(array_fill($1::text, array[cardinality($2::timestamptz[])]), $2::timestamptz[], $3, $4)) as n', ['a', slots, 'downtime', 'late-worker']);
    expect(again.rows[0]?.n).toBe(0);
    expect(await missed('a')).toEqual(expected);
  });

  it('widening a stored window by a later report clears what lies in the widened part', async () => {
    const slots = await recordMissedMinutes('c', 30, 21);
    // a first report covers 28 .. 25 minutes ago; slots 27 .. 25 go
    const first = await pool.query<{ stored: boolean }>(`select leasehold.record_clock_step($1, $2, 'w1') as stored`, [slots[1], slots[5]]);
    expect(first.rows[0]?.stored).toBe(true);
    expect(await missed('c')).toEqual([slots[0], slots[1], ...slots.slice(6)].map((s) => s!.toISOString()));
    // a second worker measured the same step wider (its samples bracket it differently)
    const second = await pool.query<{ stored: boolean }>(`select leasehold.record_clock_step($1, $2, 'w2') as stored`, [slots[4], slots[7]]);
    expect(second.rows[0]?.stored).toBe(false);
    expect(await missed('c')).toEqual([slots[0], slots[1], ...slots.slice(8)].map((s) => s!.toISOString()));
    const windows = await pool.query<{ n: string }>(`select count(*) as n from leasehold.clock_steps where from_time <= $2 and $1 <= to_time`, [slots[0], slots[9]]);
    expect(Number(windows.rows[0]?.n)).toBe(1);
  });
});
