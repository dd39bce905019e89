// WAL written per DECLINED acquisition, for the PostgreSQL patterns. One connection holds the
// lease (or lock) with a long TTL; on an otherwise quiet server another connection makes
// `attempts` losing claims between two reads of pg_current_wal_lsn(). Also counts transaction
// ids consumed (pg_current_snapshot's xmax), since a claim that takes an xid must also write
// and flush a commit record.
import { performance } from 'node:perf_hooks';
import type { ClaimPattern, PatternId } from './pattern.js';
import { Session } from './session.js';
import { median, round } from './stats.js';

export interface WalTrial {
  bytes: number;
  bytesPerDecision: number;
  xids: number;
  msPerDecision: number;
}

export interface WalResult {
  pattern: PatternId;
  attempts: number;
  trials: WalTrial[];
  /** Median over the trials (background activity can only add WAL). */
  bytesPerDecision: number;
  xidsPerDecision: number;
  msPerDecision: number;
}

const WARMUP_ATTEMPTS = 100;

interface Position {
  lsn: string;
  xmax: string;
}

/** The server's WAL position in bytes: what a span wrote is the difference of two reads. */
export async function walBytes(session: Session): Promise<number> {
  const [row] = await session.query<{ b: string }>("select pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::text as b");
  return Number(row?.b);
}

async function position(session: Session): Promise<Position> {
  const rows = await session.query<Position>(
    'select pg_current_wal_lsn()::text as lsn, pg_snapshot_xmax(pg_current_snapshot())::text as xmax',
  );
  const row = rows[0];
  if (!row) throw new Error('no WAL position');
  return row;
}

export async function measureDeclinedWal(options: {
  pattern: ClaimPattern;
  connectionString: string;
  attempts: number;
  trials: number;
}): Promise<WalResult> {
  const { pattern, attempts } = options;
  const name = `bench-wal-${pattern.id}`;
  const holder = await Session.open(options.connectionString, `bench-wal-holder-${pattern.id}`);
  const challenger = await Session.open(options.connectionString, `bench-wal-challenger-${pattern.id}`);
  let heldToken: string | null = null;
  try {
    await pattern.prepare(holder, name);
    // Clean the table's pages now, so that no pruning or autovacuum work lands in the window.
    if (pattern.table) await holder.query(`vacuum ${pattern.table}`);
    const held = await pattern.acquire(holder, name, 'bench-wal-holder', 3600);
    if (!held.won || !held.token) throw new Error(`${pattern.id}: the WAL holder could not take "${name}" (${held.reason})`);
    heldToken = held.token;

    const decline = async (count: number) => {
      for (let i = 0; i < count; i++) {
        const outcome = await pattern.acquire(challenger, name, 'bench-wal-challenger', 30);
        if (outcome.won) throw new Error(`${pattern.id}: a challenger won "${name}" while it was held`);
      }
    };
    // Warm caches and set hint bits (with data checksums a first touch can log a full page).
    await decline(WARMUP_ATTEMPTS);

    const trials: WalTrial[] = [];
    for (let trial = 0; trial < options.trials; trial++) {
      const before = await position(challenger);
      const startedAt = performance.now();
      await decline(attempts);
      const ms = performance.now() - startedAt;
      const after = await position(challenger);
      const diff = await challenger.query<{ bytes: number }>('select pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::float8 as bytes', [
        after.lsn,
        before.lsn,
      ]);
      const bytes = diff[0]?.bytes ?? Number.NaN;
      const xids = Number(BigInt(after.xmax) - BigInt(before.xmax));
      trials.push({ bytes, bytesPerDecision: round(bytes / attempts, 2), xids, msPerDecision: round(ms / attempts, 4) });
    }
    return {
      pattern: pattern.id,
      attempts,
      trials,
      bytesPerDecision: round(median(trials.map((t) => t.bytesPerDecision)), 2),
      xidsPerDecision: round(median(trials.map((t) => t.xids / attempts)), 3),
      msPerDecision: round(median(trials.map((t) => t.msPerDecision)), 4),
    };
  } finally {
    if (heldToken) await pattern.release(holder, name, heldToken).catch(() => undefined);
    await Promise.allSettled([holder.close(), challenger.close()]);
  }
}
