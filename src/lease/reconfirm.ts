// Taking leases back after the server ended the liveness session they were granted under (a
// restart, a failover): leasehold.reconfirm_leases, on the new session, keeps each lease that
// is still ours and whose liveness evidence belongs to an earlier server incarnation, and
// records the new key with it (sql/baseline/1_leases.sql). Every other lease is lost,
// as a dropped session's leases always were.
import { performance } from 'node:perf_hooks';
import type pg from 'pg';
import { timedQuery } from '../db/connection.js';
import { clientQuery } from '../db/handle.js';
import type { LeaseControl } from './lease-control.js';
import type { LeaseRuntime } from './runtime.js';

interface ReconfirmRow {
  name: string;
  reconfirmed: boolean;
  expires_at: Date | null;
  reason: string;
  database_time: Date;
}

const WHY: Record<string, string> = {
  'same-incarnation': 'the server ended the liveness session without restarting, so anyone could take the lease from then on',
  expired: 'it expired before the server was back',
  'taken-over': 'someone else holds it now',
  released: 'it was released',
  unknown: 'the server has no such lease',
};

export interface ReconfirmOutcome {
  kept: number;
  lost: number;
}

/** Takes back, on `client` (which holds liveness key `key`), the suspended `controls`. Throws when the statement fails. */
export async function reconfirm(runtime: LeaseRuntime, client: pg.Client, key: string, controls: readonly LeaseControl[]): Promise<ReconfirmOutcome> {
  const waiting = controls.filter((control) => control.held && control.suspended);
  if (waiting.length === 0) return { kept: 0, lost: 0 };
  const sentAt = performance.now();
  const { rows } = await clientQuery<ReconfirmRow>(
    client,
    `select r.name, r.reconfirmed, r.expires_at, r.reason, r.database_time
       from leasehold.reconfirm_leases($1::bigint, $2::text[], $3::uuid[], $4::bigint[], $5::interval[]) r`,
    [
      key,
      waiting.map((c) => c.grant.name),
      waiting.map((c) => c.grant.token),
      waiting.map((c) => String(c.grant.fence)),
      waiting.map((c) => `${c.grant.ttlMs} milliseconds`),
    ],
    runtime.queryTimeoutMs,
    runtime.where,
  );
  const first = rows[0];
  if (first) runtime.clock.observe(first.database_time, sentAt, performance.now());
  let kept = 0;
  waiting.forEach((control, i) => {
    const row = rows[i];
    if (row?.name === control.grant.name && row.reconfirmed && row.expires_at) {
      control.reconfirmed(key, row.expires_at, sentAt, control.grant.ttlMs);
      kept++;
    } else {
      control.markLost('liveness-lost', undefined, WHY[row?.reason ?? ''] ?? 'not taken back after the server ended the liveness session');
    }
  });
  return { kept, lost: waiting.length - kept };
}

/**
 * Whether the server that ended a liveness session registered on `incarnation` is still the same
 * run of the same server (it did not restart: pg_terminate_backend, a crash-restart cycle, which
 * keeps the postmaster): then the leases are lost at once, without waiting for a new session.
 * One statement on a pooled connection; false when it cannot be asked (the server is restarting).
 */
export async function sameIncarnation(runtime: LeaseRuntime, incarnation: string): Promise<boolean> {
  try {
    const { rows } = await timedQuery<{ incarnation: string }>(
      runtime.renewPool,
      'select incarnation from leasehold.epoch_source()',
      [],
      Math.min(runtime.queryTimeoutMs, 2_000),
      runtime.where,
    );
    return rows[0]?.incarnation === incarnation;
  } catch {
    return false;
  }
}
