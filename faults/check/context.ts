// The checker's shared indexes, built once per check: the fault model (which worker may fail
// when, as intervals on the shared monotonic clock), the database-to-monotonic time mapping, and
// the histories and database snapshot indexed by run, slot and fence. Each property's module
// (./fences.ts, ./skips.ts, ...) reads what it needs from here.
import type { CheckInput, DbSnapshot, Property } from '../checker.js';
import type { HistoryLine } from '../common.js';

/** Reports one violation of a property (the checker counts and lists it). */
export type Violate = (property: Property, kind: string, message: string) => void;

/** How long the library's pools keep an idle connection (idleTimeoutMillis in src/db/connection.ts). */
export const POOL_IDLE_MS = 30_000;

export type Interval = readonly [number, number];
export const covers = (list: readonly Interval[] | undefined, t: number) => !!list?.some(([a, b]) => a <= t && t <= b);
export const overlaps = (list: readonly Interval[] | undefined, from: number, to: number) => !!list?.some(([a, b]) => a <= to && from <= b);
/** Reasons a holder gives up its lease by itself (its own clock or connection). */
export const LOCAL_LOSS = new Set(['expired', 'renew-timeout', 'renew-failed', 'liveness-lost']);

export function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}

export function increment(record: Record<string, number>, key: string, by = 1): void {
  record[key] = (record[key] ?? 0) + by;
}

export type CheckContext = ReturnType<typeof buildContext>;

export function buildContext(input: CheckInput) {
  const { history, faults, processes, db, config } = input;
  const segments: Array<{ from: number; to: number; offset: number }> = [];
  {
    let from = Number.NEGATIVE_INFINITY;
    let offset = config.dbOffsetMs;
    for (const f of [...faults].filter((x) => x.kind === 'clock-step').sort((x, y) => x.t0 - y.t0)) {
      segments.push({ from, to: f.t0, offset });
      from = f.t1;
      offset = Number(f.params.toDb) - f.t1;
    }
    segments.push({ from, to: Number.POSITIVE_INFINITY, offset });
  }
  /** Monotonic time of a database time: in the latest stretch whose database times contain it. */
  const toMono = (dbMs: number) => {
    for (let i = segments.length - 1; i >= 0; i--) {
      const seg = segments[i] as (typeof segments)[number];
      if (dbMs - seg.offset >= seg.from && dbMs - seg.offset <= seg.to) return dbMs - seg.offset;
    }
    // inside the interval a forward step jumped over: the step itself
    const after = segments.find((seg) => dbMs - seg.offset < seg.from);
    return after ? after.from : dbMs - config.dbOffsetMs;
  };
  const iso = (ms: number | null) => (ms === null ? 'null' : new Date(ms).toISOString());
  const { ttlMs, boundMs: B } = config;

  // ---- fault model -------------------------------------------------------------------
  // own: intervals during which a worker's own runs may legitimately fail.
  // blocking: intervals during which a worker, as the lease holder, may keep others from
  //   claiming without a skip record (bounded by the TTL: a correct lease is free by then).
  // down: intervals during which a worker cannot be counted on to claim.
  // global: database restarts (everything may fail).
  const own = new Map<string, Interval[]>();
  // tight: a fault and its direct after-effects only, for "a healthy holder lost its lease":
  // until 300 ms after it ended, or until the worker noticed that its liveness session was
  // gone (its next liveness-lost line within 4 s), whichever is later.
  const tight = new Map<string, Interval[]>();
  const livenessLostAt = new Map<string, number[]>();
  for (const line of history) if (line.type === 'liveness-lost') push(livenessLostAt, line.worker, line.mono);
  const noticed = (worker: string, from: number, to: number) =>
    Math.max(to, ...(livenessLostAt.get(worker) ?? []).filter((t) => t >= from && t <= to + 4_000).slice(0, 1));
  const blocking = new Map<string, Interval[]>();
  const down = new Map<string, Interval[]>();
  const global: Interval[] = [];
  const faultCounts: Record<string, number> = {};
  let faultsOnLeaseHolders = 0;
  for (const f of faults) {
    increment(faultCounts, f.kind);
    if (f.targetHeld) faultsOnLeaseHolders++;
    const w = f.target;
    const start = f.t0 - 200;
    if (w && f.kind !== 'skew') push(tight, w, [start, f.kind === 'kill' ? Number.POSITIVE_INFINITY : noticed(w, f.t0, f.t1) + 300]);
    switch (f.kind) {
      case 'restart':
        // every session ends: runs in progress lose their leases, claims fail until it is up
        global.push([f.t0 - 1_000, f.t1 + B]);
        break;
      case 'kill':
        if (!w) break;
        push(own, w, [start, Number.POSITIVE_INFINITY]);
        push(blocking, w, [start, f.t0 + B]);
        push(down, w, [start, Number.POSITIVE_INFINITY]);
        break;
      case 'pause':
      case 'blackhole':
        if (!w) break;
        push(own, w, [start, f.t1 + ttlMs + B]);
        push(blocking, w, [start, Math.min(f.t1, f.t0 + ttlMs) + B]);
        push(down, w, [start, f.t1 + 500]);
        break;
      case 'drop':
        if (!w) break;
        push(own, w, [start, f.t1 + ttlMs + B]);
        push(blocking, w, [start, f.t0 + B]);
        push(down, w, [start, f.t1 + 500]);
        break;
      case 'terminate':
        if (!w) break;
        push(own, w, [start, f.t0 + ttlMs + B]);
        push(blocking, w, [start, f.t0 + B]);
        break;
      case 'skew':
        break; // a static clock skew must not matter at all
      case 'failover':
        // every session ends and the clients reconnect to the new primary
        global.push([f.t0 - 1_000, f.t1 + ttlMs + B]);
        break;
      case 'clock-step': {
        // forward: every lease expires at once; backward: the slots ahead are further away
        const delta = Number(f.params.deltaMs);
        global.push([f.t0 - 1_000, f.t1 + ttlMs + B + (delta < 0 ? -delta + Math.max(...config.jobs.map((j) => j.everyMs)) : 0)]);
        break;
      }
    }
  }
  let stalls = 0;
  for (const line of history) {
    if (line.type !== 'stall') continue;
    stalls++;
    push(own, line.worker, [line.from - 100, line.to + ttlMs + B]);
    push(tight, line.worker, [line.from - 100, noticed(line.worker, line.from, line.to) + 300]);
    push(blocking, line.worker, [line.from - 100, Math.min(line.to, line.from + ttlMs) + B]);
    push(down, line.worker, [line.from - 100, line.to + 500]);
  }
  const processByWorker = new Map(processes.map((p) => [p.worker, p]));
  for (const p of processes) {
    // not yet able to claim before it is ready; gone once it exited
    push(down, p.worker, [Number.NEGATIVE_INFINITY, p.readyAt ?? Number.POSITIVE_INFINITY]);
    if (p.exitedAt !== null) push(down, p.worker, [p.exitedAt, Number.POSITIVE_INFINITY]);
  }
  const healthyAt = (t: number) => processes.some((p) => !covers(down.get(p.worker), t)) && !covers(global, t);

  // ---- history indexes ----------------------------------------------------------------
  const runKey = (worker: string, job: string, fence: number) => `${worker}|${job}|${fence}`;
  const grantLine = new Map<string, number>();
  const endLine = new Map<string, { mono: number; outcome: string }>();
  const lostLine = new Map<string, { mono: number; reason: string; message: string }>();
  const writeLines: Array<Extract<HistoryLine, { type: 'write' }>> = [];
  const skipLines: Array<Extract<HistoryLine, { type: 'skip' }>> = [];
  const skipLogs = new Set<string>();
  const leasesLost: Record<string, number> = {};
  let takeovers = 0;
  let logLines = 0;
  for (const line of history) {
    switch (line.type) {
      case 'grant':
        grantLine.set(runKey(line.worker, line.job, line.fence), line.mono);
        if (line.tookOver) takeovers++;
        break;
      case 'end':
        endLine.set(runKey(line.worker, line.job, line.fence), { mono: line.mono, outcome: line.outcome });
        break;
      case 'lost':
        increment(leasesLost, line.reason);
        if (!lostLine.has(runKey(line.worker, line.job, line.fence))) {
          lostLine.set(runKey(line.worker, line.job, line.fence), { mono: line.mono, reason: line.reason, message: line.message ?? '' });
        }
        break;
      case 'write':
        writeLines.push(line);
        break;
      case 'skip':
        skipLines.push(line);
        break;
      case 'skip-log':
        logLines++;
        if (line.holder && line.msg.includes(line.holder)) skipLogs.add(`${line.worker}|${line.job}|${line.slot}`);
        break;
      default:
        break;
    }
  }

  const grantsByJob = new Map<string, DbSnapshot['grants']>();
  for (const g of db.grants) push(grantsByJob, g.job, g);
  const outputsByJob = new Map<string, DbSnapshot['outputs']>();
  for (const o of db.outputs) push(outputsByJob, o.job, o);
  const slotKey = (job: string, slot: number) => `${job}|${slot}`;
  const runsBySlot = new Map<string, DbSnapshot['runs']>();
  const runByFence = new Map<string, DbSnapshot['runs'][number]>();
  // Backward clock steps, for comparisons of database times (a run's start and end, a skip's record).
  const backSteps = faults.filter((f) => f.kind === 'clock-step' && Number(f.params.deltaMs) < 0);
  const backMs = Math.abs(Math.min(0, ...backSteps.map((f) => Number(f.params.deltaMs))));
  const steppedBack = (r: DbSnapshot['runs'][number]) => {
    // database times inside a repeated stretch map ambiguously: widen by the step on both sides
    const from = toMono(r.startedAt) - backMs - 1_000;
    const to = r.finishedAt === null ? Number.POSITIVE_INFINITY : Math.max(toMono(r.finishedAt), toMono(r.startedAt)) + backMs + 3_000;
    return backSteps.some((f) => f.t0 >= from && f.t0 <= to);
  };
  const runsByJob = new Map<string, DbSnapshot['runs']>();
  const runsByOutcome: Record<string, number> = {};
  for (const r of db.runs) {
    push(runsBySlot, slotKey(r.job, r.slot), r);
    runByFence.set(`${r.job}|${r.fence}`, r);
    push(runsByJob, r.job, r);
    increment(runsByOutcome, r.outcome);
  }
  const outputsBySlot = new Map<string, DbSnapshot['outputs']>();
  for (const o of db.outputs) push(outputsBySlot, slotKey(o.job, o.slot), o);
  return {
    history,
    faults,
    processes,
    db,
    config,
    segments,
    toMono,
    iso,
    ttlMs,
    B,
    own,
    tight,
    blocking,
    down,
    global,
    faultCounts,
    faultsOnLeaseHolders,
    stalls,
    processByWorker,
    healthyAt,
    noticed,
    runKey,
    grantLine,
    endLine,
    lostLine,
    writeLines,
    skipLines,
    skipLogs,
    leasesLost,
    takeovers,
    logLines,
    grantsByJob,
    outputsByJob,
    slotKey,
    runsBySlot,
    runByFence,
    backSteps,
    backMs,
    steppedBack,
    runsByJob,
    runsByOutcome,
    outputsBySlot,
  };
}
