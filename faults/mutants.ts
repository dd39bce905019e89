// Deliberately broken variants of leasehold, for testing the checker: a fault run against
// each must report violations, or the scenarios are too weak to mean anything.
//
// The SQL mutants are made in the TEST DATABASE only: the function's current definition is
// read back with pg_get_functiondef(), one guard is cut out of it, and the result is
// installed with CREATE OR REPLACE FUNCTION. The shipped sql/ files are never touched.
// 'unfenced-write' is a flag of the fault worker (faults/worker.ts): its final write goes
// through a plain transaction instead of ctx.transaction.
import type pg from 'pg';
import type { MutantName } from './common.js';

/**
 * Mutants of the failover rules. They change nothing without a promotion, so the fault suite's
 * runs on one server cannot catch them; its replicated tier (test/ha/faults-ha.test.ts) and the
 * promotion tests must.
 */
export const FAILOVER_MUTANTS = ['fence-without-epoch', 'fence-by-timeline', 'epoch-not-checked', 'liveness-any-incarnation'] as const;
export type FailoverMutantName = (typeof FAILOVER_MUTANTS)[number];

interface Edit {
  fn: string;
  /** What is removed or replaced; each must match at least once. */
  pattern: RegExp;
  replacement: string;
}

export const MUTANT_DESCRIPTIONS: Record<MutantName, string> = {
  'unfenced-write': "the worker's final write runs in a plain transaction, outside ctx.transaction (no assert_lease)",
  'release-no-token-check': 'leasehold.end_runs (the release of release and finish_runs) frees the lease whatever token it is given',
  'acquire-ignores-expiry': 'leasehold.is_free (the rule of acquire and claim) never treats an expired lease as free',
  'slot-guard-off': 'leasehold.claim claims a slot even when it is not after the last claimed one',
};

export const FAILOVER_MUTANT_DESCRIPTIONS: Record<FailoverMutantName, string> = {
  'fence-without-epoch': 'leasehold.fences_after (behind next_fence and every claim) is the old fence + 1, without the epoch',
  'fence-by-timeline': "leasehold.fork_base starts a timeline's fences at (timeline - 1) << 40, the same on two forks of one timeline number",
  'epoch-not-checked': 'leasehold.holds_lease (and so assert_lease and start_run) accepts a lease confirmed before a failover',
  'liveness-any-incarnation': 'leasehold.is_free asks for the liveness lock on any server incarnation',
};

const EDITS: Record<MutantName | FailoverMutantName, Edit[]> = {
  'unfenced-write': [],
  // Each guard lives in one function (sql/baseline/1_leases.sql), so each mutant edits one.
  // (end_runs: finish_runs and release of a lease with a run in flight release through it)
  'release-no-token-check': [
    { fn: 'end_runs', pattern: /l\.token = i\.token/, replacement: 'i.token is not null' },
    // release()'s own update of a lease with no run in flight
    { fn: 'release', pattern: /l\.token = p_token and/, replacement: 'p_token is not null and' },
  ],
  // Both expiry rules go: only a released lease or a gone liveness lock frees it. The skip
  // reports use the same rule, so a stalled holder's slots are recorded as skips naming a
  // holder whose lease had expired.
  'acquire-ignores-expiry': [
    {
      fn: 'is_free',
      pattern: /\n\s+when l\.expires_at <= now\(\) and \(l\.epoch is not distinct from leasehold\.epoch\(\) or l\.expires_at \+ coalesce\(l\.ttl, interval '0'\) <= now\(\)\) then true/,
      replacement: '',
    },
  ],
  'fence-without-epoch': [
    // the rule lives in fences_after() (next_fence(), claim() and claim_requests() call it)
    { fn: 'fences_after', pattern: /greatest\(coalesce\(o\.old, 0\) \+ 1, v_base\)/, replacement: 'coalesce(o.old, 0) + 1' },
  ],
  // the base of each fork (leasehold.forks): back to the timeline number alone
  'fence-by-timeline': [
    { fn: 'fork_base', pattern: /greatest\(\(p_timeline - 1\)::bigint << 40,\s+\(\(extract\(epoch from now\(\)\) \* 1000\)::bigint - 1577836800000\) \* 1024\)/, replacement: '(p_timeline - 1)::bigint << 40' },
  ],
  'epoch-not-checked': [
    { fn: 'holds_lease', pattern: /\s+and l\.epoch = leasehold\.epoch\(\)/, replacement: '' },
  ],
  'liveness-any-incarnation': [
    { fn: 'is_free', pattern: / and l\.holder_incarnation is not distinct from leasehold\.server_incarnation\(\)/, replacement: '' },
  ],
  // the guard in claim(): both the
  // slot asked for and the slot claimed (an older buffered one) must be after the last claimed
  'slot-guard-off': [
    { fn: 'claim', pattern: /when l\.last_slot is null or \(w\.slot > l\.last_slot and w\.claim_slot > l\.last_slot\)/, replacement: 'when true' },
    // (and a slot claimed again is then a plain claim, not the re-claim of one claimed ahead)
    { fn: 'claim', pattern: /l\.last_slot is not distinct from w\.claim_slot as reclaim/, replacement: 'false as reclaim' },
  ],
};

/** Installs `mutant` into the database `client` is connected to. Throws if a guard was not found. */
export async function installMutant(client: pg.ClientBase | pg.Pool, mutant: MutantName | FailoverMutantName): Promise<string[]> {
  const changed: string[] = [];
  for (const edit of EDITS[mutant]) {
    const { rows } = await client.query<{ def: string }>(
      `select pg_get_functiondef(p.oid) as def from pg_proc p join pg_namespace n on n.oid = p.pronamespace
        where n.nspname = 'leasehold' and p.proname = $1`,
      [edit.fn],
    );
    if (rows.length !== 1) throw new Error(`mutant ${mutant}: expected one function leasehold.${edit.fn}, found ${rows.length}`);
    const original = (rows[0] as { def: string }).def;
    const global = new RegExp(edit.pattern.source, 'g');
    if (!global.test(original)) throw new Error(`mutant ${mutant}: the guard ${edit.pattern} is not in leasehold.${edit.fn} any more; update faults/mutants.ts`);
    await client.query(original.replace(global, edit.replacement));
    changed.push(`leasehold.${edit.fn}`);
  }
  return changed;
}
