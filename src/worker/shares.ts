// Hash shares of the due jobs: each live worker claims its own share first and the rest after
// a short delay. This only orders the claims to cut lock contention and rows; which worker
// runs a slot is still decided by the database alone (claim(): slot > last_slot under the row
// lock). A stale or different worker list, or workers with different job sets, can only make
// a job wait for the second pass, never run it twice.
// Refreshing the list costs one statement; a tick every second need not pay it every time.
const REFRESH_EVERY_MS = 10_000;
/**
 * The second pass waits twice as long as this worker's own share took (peers' shares are alike,
 * and after their claims they start their runs: a second pass over 7,500 slots they hold costs
 * the database a probe each, better spent after their starts), within these bounds.
 */
export const STEAL_DELAY_FACTOR = 2;
export const STEAL_DELAY_MIN_MS = 50;
export const STEAL_DELAY_MAX_MS = 2_000;

/** FNV-1a: the same 32-bit hash of a name in every worker. */
export function nameHash(name: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < name.length; i++) {
    h ^= name.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** A second hash of a name (djb2, xor form): with nameHash, two unrelated hashes of a (job, slot) pair (share-reports.ts). */
export function digestHash(name: string): number {
  let h = 5381;
  for (let i = 0; i < name.length; i++) h = (Math.imul(h, 33) ^ name.charCodeAt(i)) >>> 0;
  return h;
}

/** Which of `keys` (sorted live liveness keys) owns `name`; -1 without keys. */
export function ownerIndex(name: string, keys: readonly string[]): number {
  return keys.length === 0 ? -1 : nameHash(name) % keys.length;
}

/**
 * The hash that decides a slot's share: the job's name hash mixed with the slot's second
 * (murmur3's finalizer). By the name alone, a small fleet's few jobs could all hash into one
 * worker's share, and that worker ran nearly every run (2 workers, 4 jobs: 105 runs to 2); mixed
 * with the slot, each slot of each job falls to a live worker at random, the same one in every
 * worker that has the same list.
 */
export function slotHash(nameHashValue: number, slot: Date): number {
  let h = (nameHashValue ^ Math.floor(slot.getTime() / 1000)) >>> 0;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

/** A worker's place among `count` live workers; null: every job is its own. */
export type Share = { index: number; count: number } | null;

/** Whether a job whose name hashes to `hash` (nameHash) is in `share`. */
export function owns(share: Share, hash: number): boolean {
  return share === null || hash % share.count === share.index;
}

/** A live worker: its liveness key and, when it registered handlers, its login role. */
export interface LivePeer {
  key: string;
  role: string | null;
}

export class PeerList {
  /** Live liveness keys, sorted as text: the same order in every worker that read the same list. */
  private keys: string[] = [];
  /** Each key's login role (null: unknown). */
  private roles = new Map<string, string | null>();
  private readAt = Number.NEGATIVE_INFINITY;
  private reading: Promise<void> | undefined;
  private readonly changeListeners: Array<() => void> = [];

  constructor(private readonly read: () => Promise<ReadonlyArray<string | LivePeer>>) {}

  /** Re-reads the list when it is old or lacks `ownKey`; never throws (a failed read keeps the old list). */
  refresh(ownKey: string | null, now = Date.now()): Promise<void> {
    const fresh = now - this.readAt < REFRESH_EVERY_MS && (ownKey === null || this.keys.includes(ownKey));
    if (fresh || this.reading) return this.reading ?? Promise.resolve();
    this.reading = this.read()
      .then((peers) => {
        this.setKeys(peers);
        this.readAt = now;
      })
      .catch(() => undefined)
      .finally(() => (this.reading = undefined));
    return this.reading;
  }

  /** The share of the worker with `ownKey` (see owns()): null when it is not in the list, or alone in it. */
  share(ownKey: string | null): Share {
    const index = ownKey === null ? -1 : this.keys.indexOf(ownKey);
    return index < 0 || this.keys.length < 2 ? null : { index, count: this.keys.length };
  }

  /** The sorted live keys now (the array is replaced, never changed, when the list is read again). */
  keysNow(): readonly string[] {
    return this.keys;
  }

  /** Whether `ownKey` is the first of the list: one worker of the fleet for a chore of the fleet's. */
  isFirst(ownKey: string | null): boolean {
    return ownKey !== null && this.keys[0] === ownKey;
  }

  /** Whether `ownKey` is the first of the workers with its login role: one per service for a service's chore. */
  isFirstOfRole(ownKey: string | null): boolean {
    if (ownKey === null || !this.roles.has(ownKey)) return false;
    const role = this.roles.get(ownKey);
    return this.keys.find((k) => this.roles.get(k) === role) === ownKey;
  }

  /** Calls `listener` whenever a read finds workers came or went (or changed role). */
  onChange(listener: () => void): void {
    this.changeListeners.push(listener);
  }

  /** Makes the next refresh() read the list again, however recent it is. */
  expire(): void {
    this.readAt = Number.NEGATIVE_INFINITY;
  }

  /** Also for tests: use this list as if read from the database. */
  setKeys(peers: ReadonlyArray<string | LivePeer>): void {
    const list = peers.map((p) => (typeof p === 'string' ? { key: p, role: null } : p));
    const keys = list.map((p) => p.key).sort();
    const roles = new Map(list.map((p) => [p.key, p.role]));
    const changed = keys.length !== this.keys.length || keys.some((k, i) => k !== this.keys[i] || roles.get(k) !== this.roles.get(k));
    this.keys = keys;
    this.roles = roles;
    this.readAt = Date.now();
    if (changed) for (const listener of this.changeListeners) listener();
  }
}
