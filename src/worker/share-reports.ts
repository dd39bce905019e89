// Share reports: how a second pass skips the shares its peers have claimed already. Once every
// slot of a worker's share of a tick is decided (claimed, held, taken: nothing to retry), the
// worker reports that share's digest (leasehold.report_share): how many (job, slot) pairs, and two
// sums of a hash of each pair. A peer computes the digest of the same share as it sees it (the
// jobs it has due, in that worker's share by its own list of live workers) and asks which peers
// reported exactly that (leasehold.reported_shares: live keys, the caller's own login role). Those
// shares are left out of its second pass; the others are claimed as before.
//
// A digest that differs (other job sets, another list of workers, a share not yet decided, a
// report overwritten by a later tick) only means the share is claimed again, as it always was:
// a report can spare a peer its probes, never make a slot run twice. Without reports a second
// pass asked the database about every job of every other share, (workers - 1) probes per job.
import type { ClaimRequest, ClaimRow, SchedulerStore } from './claims.js';
import type { JobState } from './runs.js';
import { slotHash } from './shares.js';

/** The digest of a set of (job, slot) pairs: their count and two sums of independent 32-bit hashes (exact in a double for up to 2^21 pairs). */
export class ShareDigest {
  jobs = 0;
  sumA = 0;
  sumB = 0;

  /** Adds the pair (job, slot), given the job name's two hashes (shares.ts: nameHash, digestHash). */
  addPair(shareHash: number, digestHash: number, slot: Date): void {
    this.jobs++;
    this.sumA += slotHash(shareHash, slot);
    this.sumB += slotHash(digestHash, slot);
  }
}

/** A claim's row that leaves nothing to do again for its slot (not a retry, a re-ask at expiry or a registration). */
export function isDecided(row: ClaimRow): boolean {
  return row.claimed || !(row.reason === 'holder-committing' || row.reason === 'slot-not-due' || row.reason === 'held-ahead' || row.reason === 'unknown-job');
}

/** Whether two digests are of the same pairs. */
function sameDigest(a: ShareDigest, b: ShareDigest): boolean {
  return a.jobs === b.jobs && a.sumA === b.sumA && a.sumB === b.sumB;
}

/** The digest of the requests of a claim ahead that did not come back claimed (they are claimed at their slot). */
export function unclaimedDigest(requests: readonly ClaimRequest[], claimed: readonly ClaimRow[], states: ReadonlyMap<string, JobState>): ShareDigest {
  const digest = new ShareDigest();
  if (claimed.length >= requests.length) return digest;
  const got = new Set(claimed.map((row) => row.job));
  for (const { job, slot } of requests) {
    const state = states.get(job.name);
    if (!got.has(job.name) && state) digest.addPair(state.shareHash, state.digestHash, slot);
  }
  return digest;
}

/** The latest start (or slot, if later) of a share's runs claimed ahead: the start mark that covers it covers them all. */
export function coverOf(requests: readonly ClaimRequest[], starts: readonly Date[]): number {
  let cover = -Infinity;
  for (let i = 0; i < requests.length; i++) cover = Math.max(cover, (requests[i] as ClaimRequest).slot.getTime(), starts[i]?.getTime() ?? -Infinity);
  return cover;
}

/**
 * Sends this worker's reports. A share claimed at its slot is reported once its claim decided
 * every slot of it. A share claimed ahead is reported only once its runs are marked started
 * (start_tick): until then a peer must still be able to claim a slot again whose holder stalled
 * in the lead (claim's held-ahead), so the peer's second pass must still ask. Its slots not
 * claimed ahead (a lease still held by the previous run) are claimed at the slot; the share is
 * reported when both parts are done.
 */
export class ShareReporter {
  private pending: { full: ShareDigest; rest: ShareDigest; coverMs: number; marked: boolean; restDecided: boolean } | null = null;

  constructor(private readonly store: SchedulerStore) {}

  /** A share was claimed ahead: `full`, the digest of all its requests; `rest`, of those not claimed; `coverMs`, the latest start (or slot) of its runs. */
  claimedAhead(full: ShareDigest | null, rest: ShareDigest, coverMs: number): void {
    this.pending = full ? { full, rest, coverMs, marked: false, restDecided: rest.jobs === 0 } : null;
  }

  /** The runs claimed ahead under `holderKey` and planned by `throughMs` were marked started, none taken by a peer. */
  started(holderKey: string | null, throughMs: number): void {
    const pending = this.pending;
    if (pending && throughMs >= pending.coverMs) {
      pending.marked = true;
      this.sendIfDone(holderKey);
    }
  }

  /** Every slot of a share claimed at its slot was decided. */
  decided(holderKey: string | null, share: ShareDigest | null | undefined): void {
    if (!share) return;
    const pending = this.pending;
    if (pending && !pending.restDecided && sameDigest(pending.rest, share)) {
      pending.restDecided = true;
      this.sendIfDone(holderKey);
    } else {
      this.send(holderKey, share);
    }
  }

  private sendIfDone(holderKey: string | null): void {
    const pending = this.pending;
    if (!pending?.marked || !pending.restDecided) return;
    this.pending = null;
    this.send(holderKey, pending.full);
  }

  /** A failure only costs the peers their probes. */
  private send(holderKey: string | null, digest: ShareDigest): void {
    if (holderKey !== null && digest.jobs > 0) void this.store.reportShare(holderKey, digest).catch(() => undefined);
  }
}

/** What a tick's second pass needs to ask for reports: the live workers' keys as the tick split by them, and whose share each request is in. */
export interface SecondPass {
  /** The sorted live keys the tick's shares were made from (PeerList). */
  keys: readonly string[];
  /** Per request of the second pass: its owner's index in `keys`. */
  owners: number[];
  /** Per index in `keys`: the digest of the requests in that worker's share (its own index unused). */
  digests: ShareDigest[];
}

/** The requests of a second pass whose share no peer reported as this worker sees it (all of them when the question fails). */
export async function unreportedRequests(store: SchedulerStore, requests: readonly ClaimRequest[], pass: SecondPass): Promise<ClaimRequest[]> {
  const asked: Array<{ key: string; digest: ShareDigest }> = [];
  pass.digests.forEach((digest, index) => {
    const key = pass.keys[index];
    if (key !== undefined && digest.jobs > 0) asked.push({ key, digest });
  });
  if (asked.length === 0) return [...requests];
  const reported = await store.reportedShares(asked);
  if (reported.size === 0) return [...requests];
  const skip = pass.keys.map((key) => reported.has(key));
  return requests.filter((_, i) => !skip[pass.owners[i] as number]);
}
