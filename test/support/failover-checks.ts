// The failover test's checks: pure functions of what the client processes acknowledged (their
// JSON lines, with wall-clock times of one machine) and of probes after the failover. Each
// check is a count, so before/after numbers can be compared and a mutant must raise one.
import type { Line } from './processes.js';

export interface Acquired {
  name: string;
  token: string;
  fence: bigint;
  slot: string | null;
  key: string;
  sentAt: number;
  at: number;
  client: number;
}

export interface History {
  acquired: Acquired[];
  /** Fenced writes the server acknowledged (COMMIT answered). */
  writes: Array<{ name: string; token: string; fence: bigint; value: string; sentAt: number; at: number }>;
  /** Acknowledged releases (ok: whether the server still had the lease). */
  releases: Array<{ name: string; token: string; ok: boolean; sentAt: number; at: number }>;
  /** Releases sent, answered or not: the sender stopped counting on the lease then. */
  releasing: Array<{ name: string; token: string; at: number }>;
  lost: Array<{ name: string; token: string; at: number; reason: string }>;
  /** When each client's history ends (it stopped believing anything after that). */
  endAt: number;
}

/** Collects the events of every client process (index = client number). */
export function history(clients: Line[][], endAt: number): History {
  const h: History = { acquired: [], writes: [], releases: [], releasing: [], lost: [], endAt };
  clients.forEach((lines, client) => {
    for (const l of lines) {
      const base = { name: String(l.name), token: String(l.token), at: Number(l.at) };
      if (l.event === 'acquired') {
        h.acquired.push({ ...base, fence: BigInt(String(l.fence)), slot: (l.slot as string | null) ?? null, key: String(l.key), sentAt: Number(l.sentAt), client });
      } else if (l.event === 'write' && l.ok === true) {
        h.writes.push({ ...base, fence: BigInt(String(l.fence)), value: String(l.value), sentAt: Number(l.sentAt) });
      } else if (l.event === 'released') {
        h.releases.push({ ...base, ok: l.ok === true, sentAt: Number(l.sentAt) });
      } else if (l.event === 'releasing') {
        h.releasing.push(base);
      } else if (l.event === 'lost') {
        h.lost.push({ ...base, reason: String(l.reason) });
      }
    }
  });
  return h;
}

/** Fence values acknowledged to more than one acquisition (same name, same fence, other token). */
export function doubleFences(h: History): number {
  const tokens = new Map<string, Set<string>>();
  for (const a of h.acquired) {
    const key = `${a.name}\u0000${a.fence}`;
    const set = tokens.get(key) ?? new Set<string>();
    set.add(a.token);
    tokens.set(key, set);
  }
  let count = 0;
  for (const set of tokens.values()) count += set.size - 1;
  return count;
}

/**
 * Acquisitions whose fence is not above that of an acquisition of the same name acknowledged
 * before this one was even asked for (real-time order, so no clock in the database is trusted).
 */
export function backwardFences(h: History): number {
  const byName = groupBy(h.acquired, (a) => a.name);
  let count = 0;
  for (const list of byName.values()) {
    for (const later of list) {
      if (list.some((earlier) => earlier.at < later.sentAt && earlier.fence >= later.fence && earlier.token !== later.token)) count++;
    }
  }
  return count;
}

/** Slots acknowledged to more than one acquisition, and those among them with different idempotency keys. */
export function doubleSlots(h: History): { twice: number; differentKeys: number } {
  const bySlot = groupBy(
    h.acquired.filter((a) => a.slot !== null),
    (a) => `${a.name}\u0000${a.slot}`,
  );
  let twice = 0;
  let differentKeys = 0;
  for (const list of bySlot.values()) {
    const tokens = new Set(list.map((a) => a.token));
    if (tokens.size > 1) twice += tokens.size - 1;
    const keys = new Set(list.map((a) => a.key));
    if (keys.size > 1) differentKeys += keys.size - 1;
  }
  return { twice, differentKeys };
}

/**
 * Tokens that were dead before `before`: released (acknowledged), or superseded by a later
 * acquisition of the same name acknowledged before it.
 */
export function deadTokens(h: History, before: number): Array<{ name: string; token: string; fence: bigint }> {
  const dead = new Map<string, { name: string; token: string; fence: bigint }>();
  const byToken = new Map(h.acquired.map((a) => [a.token, a]));
  for (const r of h.releases) {
    const a = byToken.get(r.token);
    if (r.ok && r.at < before && a) dead.set(a.token, { name: a.name, token: a.token, fence: a.fence });
  }
  for (const a of h.acquired) {
    // only tokens that existed before: a later grant below an earlier fence is a backward fence, counted there
    if (a.at >= before) continue;
    if (h.acquired.some((b) => b.name === a.name && b.fence > a.fence && b.at < before && b.token !== a.token)) {
      dead.set(a.token, { name: a.name, token: a.token, fence: a.fence });
    }
  }
  return [...dead.values()];
}

/** Acknowledged fenced writes made with a token that was dead before `before`, sent after `after`. */
export function writesWithDeadTokens(h: History, before: number, after: number): number {
  const dead = new Set(deadTokens(h, before).map((d) => d.token));
  return h.writes.filter((w) => w.sentAt >= after && dead.has(w.token)).length;
}

export interface Overlap {
  name: string;
  ms: number;
  /** The two beliefs: client number, fence, and how each ended. */
  first: { client: number; fence: string; ended: string };
  second: { client: number; fence: string; ended: string };
}

/**
 * Periods during which two processes believed they held the same lease, over all pairs of
 * acquisitions of one name. A process believes from the acknowledgement of its acquire until
 * its lease is reported lost, or until it sends the release (answered or not), or until its
 * history ends.
 */
export function overlaps(h: History): Overlap[] {
  const intervals = h.acquired.map((a) => {
    const ends = [
      ...h.lost.filter((l) => l.token === a.token).map((l) => ({ at: l.at, how: `lost (${l.reason})` })),
      ...h.releasing.filter((r) => r.token === a.token).map((r) => ({ at: r.at, how: 'released' })),
      { at: h.endAt, how: 'end of run' },
    ].sort((x, y) => x.at - y.at);
    const end = ends[0] as { at: number; how: string };
    return { name: a.name, token: a.token, client: a.client, fence: a.fence.toString(), start: a.at, end: end.at, ended: end.how };
  });
  const found: Overlap[] = [];
  for (const list of groupBy(intervals, (i) => i.name).values()) {
    for (let i = 0; i < list.length; i++) {
      for (let j = i + 1; j < list.length; j++) {
        const a = list[i] as (typeof list)[number];
        const b = list[j] as (typeof list)[number];
        if (a.token === b.token) continue;
        const ms = Math.min(a.end, b.end) - Math.max(a.start, b.start);
        if (ms <= 0) continue;
        const [x, y] = a.start <= b.start ? [a, b] : [b, a];
        found.push({
          name: a.name,
          ms,
          first: { client: x.client, fence: x.fence, ended: x.ended },
          second: { client: y.client, fence: y.fence, ended: y.ended },
        });
      }
    }
  }
  return found;
}

/** Milliseconds of two believers, summed over all overlaps. */
export function twoBelieversMs(h: History): number {
  return overlaps(h).reduce((sum, o) => sum + o.ms, 0);
}

function groupBy<T>(items: T[], key: (item: T) => string): Map<string, T[]> {
  const map = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const list = map.get(k) ?? [];
    list.push(item);
    map.set(k, list);
  }
  return map;
}
