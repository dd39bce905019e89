// The replication check: read at client start whether acknowledged grants can be lost when the
// database fails over (docs/high-availability.md). Reading, never deciding: the protocol's
// safety does not depend on it; it tells operators what their deployment gives.
import type pg from 'pg';

export interface ReplicationReport {
  /** The server is a standby: it takes no leases. */
  inRecovery: boolean;
  /** The session's setting (lease statements pin it to `on` for their own transaction). */
  synchronousCommit: string;
  synchronousStandbyNames: string;
  /** WAL senders to standbys (null when they could not be read). */
  standbys: number | null;
  /** Standbys whose sync_state is sync or quorum (null when not visible to this role). */
  synchronousStandbys: number | null;
  /** Why grants can be lost on failover, or null. */
  warning: string | null;
  /**
   * Where leasehold.epoch() reads the WAL timeline on this server (sql/baseline/1_leases.sql): 'wal' (the current
   * WAL file: a promotion shows at once), 'checkpoint' (the last checkpoint: a promotion shows
   * after its end-of-recovery checkpoint), 'none' (no timeline: forks of history cannot be told
   * apart); `detail` names the refused functions. Null when it could not be read.
   */
  epochSource: { source: 'wal' | 'checkpoint' | 'none'; detail: string | null } | null;
  /** What the epoch source weakens, or null ('wal'). */
  epochWarning: string | null;
}

interface Row {
  in_recovery: boolean;
  synchronous_commit: string;
  synchronous_standby_names: string;
}

export async function checkReplication(db: pg.ClientBase | pg.Pool): Promise<ReplicationReport> {
  const { rows } = await db.query<Row>(
    `select pg_is_in_recovery() as in_recovery, current_setting('synchronous_commit') as synchronous_commit,
            current_setting('synchronous_standby_names') as synchronous_standby_names`,
  );
  const row = rows[0] as Row;
  let standbys: number | null = null;
  let synchronousStandbys: number | null = null;
  try {
    // Rows are visible to every role; sync_state only with pg_read_all_stats (else null).
    const replication = await db.query<{ n: number; sync: number; visible: number }>(
      `select count(*)::int as n, count(*) filter (where sync_state in ('sync', 'quorum'))::int as sync,
              count(sync_state)::int as visible
         from pg_stat_replication`,
    );
    const r = replication.rows[0];
    if (r) {
      standbys = r.n;
      synchronousStandbys = r.visible === r.n ? r.sync : null;
    }
  } catch {
    // a restricted role or a proxy that hides the view: say what we know
  }
  // last: a failing read (a schema before 28) aborts the caller's transaction
  let epochSource: ReplicationReport['epochSource'] = null;
  try {
    const source = await db.query<{ source: 'wal' | 'checkpoint' | 'none'; detail: string | null }>('select source, detail from leasehold.epoch_source()');
    const r = source.rows[0];
    if (r) epochSource = { source: r.source, detail: r.detail };
  } catch {
    // not readable here: nothing to say
  }
  return {
    inRecovery: row.in_recovery,
    synchronousCommit: row.synchronous_commit,
    synchronousStandbyNames: row.synchronous_standby_names,
    standbys,
    synchronousStandbys,
    warning: replicationWarning(row, standbys),
    epochSource,
    epochWarning: epochWarning(epochSource),
  };
}

function epochWarning(epoch: ReplicationReport['epochSource']): string | null {
  if (!epoch || epoch.source === 'wal') return null;
  const why = epoch.detail ? ` (${epoch.detail})` : '';
  return epoch.source === 'checkpoint'
    ? `the WAL timeline is read from the last checkpoint, not the current WAL file${why}: for a moment after a promotion ` +
        '(until its end-of-recovery checkpoint) grants on the promoted server are not told apart from the old primary\'s; see docs/high-availability.md'
    : `the WAL timeline cannot be read on this server${why}: leasehold cannot tell forks of history apart, so fences are unique only ` +
        'where a failover loses no acknowledged commit (storage-level replication, or synchronous replication); see docs/high-availability.md';
}

function replicationWarning(row: Row, standbys: number | null): string | null {
  if (row.in_recovery) {
    return 'connected to a standby (read-only): leases cannot be taken or renewed here; point the connection at the primary (docs/high-availability.md)';
  }
  if (row.synchronous_standby_names.trim() === '' && standbys !== 0) {
    const streaming = standbys === null ? 'standbys may be streaming' : `${standbys} standby(s) streaming`;
    return (
      `replication is asynchronous (synchronous_standby_names is empty, ${streaming}): a failover can lose the newest ` +
      'acknowledged grants, renewals, releases and fenced writes. Fences and tokens stay safe; see docs/high-availability.md'
    );
  }
  return null;
}
