// The operator override, one statement for every caller (the client's forceRelease(), the CLI's
// release --force, the dashboard's action): leasehold.force_release frees the lease whoever holds
// it and bumps the fence, so the old holder's fenced writes fail. `by` is recorded in
// leasehold.actions and in the lost run of the holder (null: the login role is recorded).
import type { Queryable } from '../db/handle.js';
import { parseFence } from '../lease/fence.js';

export interface ForceReleaseResult {
  /** False when nobody held it (the fence moved all the same). */
  released: boolean;
  /** The holder it was taken from (when not held: the last one), and its fence. */
  previousHolder: string | null;
  previousFence: number | null;
  /** The fence after the release; null when there is no lease of that name. */
  fence: number | null;
}

/** Force-releases `name` (checked by the caller) in one statement; the caller's Queryable maps errors and timeouts. */
export async function forceReleaseLease(db: Queryable, name: string, by: string | null): Promise<ForceReleaseResult> {
  const { rows } = await db.query<{ released: boolean; previous_holder: string | null; previous_fence: string | null; fence: string | null }>(
    'select * from leasehold.force_release($1, $2)',
    [name, by],
  );
  const row = rows[0];
  return {
    released: row?.released ?? false,
    previousHolder: row?.previous_holder ?? null,
    previousFence: row?.previous_fence == null ? null : parseFence(row.previous_fence),
    fence: row?.fence == null ? null : parseFence(row.fence),
  };
}
