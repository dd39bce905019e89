// A probe of the database clock from outside the library: where the database's clock_timestamp()
// stands against a local clock, from the sample with the shortest round trip. The library keeps
// its own running estimate (src/schedule/database-clock.ts); this is for the processes that
// watch it (the demo's narrator, the fault suite, the benchmark) and for tests.

/** Anything with pg's query(text) shape: a Pool, a Client. */
export interface ClockQueryable {
  query(text: string): Promise<{ rows: unknown[] }>;
}

export interface ClockProbe {
  /** Database clock minus local clock, ms, at the best sample. */
  offsetMs: number;
  /** The best sample's round trip, ms. */
  roundTripMs: number;
  /** The database time the best sample read (epoch ms). */
  databaseMs: number;
}

export const DATABASE_TIME_SQL = 'select (extract(epoch from clock_timestamp()) * 1000)::float8 as ms';

/**
 * Reads the database clock `samples` times; the offset is taken at the midpoint of the round
 * trip. `now` is the local clock to compare with. @default Date.now
 */
export async function probeDatabaseClock(db: ClockQueryable, options: { samples?: number; now?: () => number } = {}): Promise<ClockProbe> {
  const now = options.now ?? Date.now;
  let best: ClockProbe | undefined;
  for (let i = 0; i < (options.samples ?? 3); i++) {
    const sent = now();
    const { rows } = await db.query(DATABASE_TIME_SQL);
    const received = now();
    const databaseMs = Number((rows[0] as { ms?: unknown } | undefined)?.ms);
    if (!Number.isFinite(databaseMs)) throw new Error(`the database clock read ${String(databaseMs)}`);
    const roundTripMs = received - sent;
    if (!best || roundTripMs < best.roundTripMs) best = { offsetMs: databaseMs - (sent + received) / 2, roundTripMs, databaseMs };
  }
  if (!best) throw new Error('probeDatabaseClock needs at least one sample');
  return best;
}
