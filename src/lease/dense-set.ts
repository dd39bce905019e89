// A set of objects kept in an array, each member holding its own position in a field: adding
// and deleting are O(1) without a hash table. A worker adds thousands of leases to its client's
// collections at a tick and deletes them as the runs end; each Map of them (held leases, kept
// alive, local deadlines, runs) grew and shrank its table every tick, about 500 bytes of
// garbage per run in all, and iterating a Map made an entry array per member.
// Iteration order is not insertion order (a delete moves the last member into the gap).

/** Where a member keeps its position in one DenseSet: read and written only by that set. */
export interface DenseSlot<T> {
  get(member: T): number;
  set(member: T, at: number): void;
}

export class DenseSet<T> {
  private readonly members: T[] = [];

  constructor(private readonly slot: DenseSlot<T>) {}

  get size(): number {
    return this.members.length;
  }

  has(member: T): boolean {
    const at = this.slot.get(member);
    return at >= 0 && this.members[at] === member;
  }

  add(member: T): void {
    if (this.has(member)) return;
    this.slot.set(member, this.members.length);
    this.members.push(member);
  }

  /** Removes `member`; false when it was not in the set. */
  delete(member: T): boolean {
    if (!this.has(member)) return false;
    const at = this.slot.get(member);
    const last = this.members.pop() as T;
    if (last !== member) {
      this.members[at] = last;
      this.slot.set(last, at);
    }
    this.slot.set(member, -1);
    return true;
  }

  clear(): void {
    for (const member of this.members) this.slot.set(member, -1);
    this.members.length = 0;
  }

  /** The members now, as an array the caller may keep (the set may change while it walks it). */
  snapshot(): T[] {
    return this.members.slice();
  }

  /** The members, read-only and live: do not add or delete while walking it. */
  view(): readonly T[] {
    return this.members;
  }
}
