// (d) every skip recorded once with its holder: the skip row names a holder, fence, slot and age;
// that run really held the lease then (it was running, and its lease had not expired); the slot
// did not also run; exactly one worker reported it (event and log line naming the holder).
import type { DbSnapshot } from '../checker.js';
import type { HistoryLine } from '../common.js';
import { overlaps, push, type CheckContext, type Violate } from './context.js';

/** The protocol functions' lock_timeout (2 s), and 5 ms for the clock reads. */
const LOCK_WAIT_MS = 2_005;

export function checkSkips(ctx: CheckContext, violate: Violate) {
  const { db, config, faults, backMs, toMono, iso, own, global, processByWorker, skipLines, skipLogs, slotKey, runByFence, steppedBack, outputsBySlot } = ctx;
  // A holder stopped (SIGSTOP) renews nothing: its lease expires at most one ttl after the
  // pause began (a renewal in flight then may still land: its lock_timeout, 2 s, and a margin;
  // a failover adds one ttl of grace, a backward clock step its size). While it stays stopped
  // after that, the lease is free by the database's rule, and a skip naming it is wrong.
  const pauses = faults.filter((f) => f.kind === 'pause' && f.target !== null);
  const failovers = faults.some((f) => f.kind === 'failover');
  const expiredWhileStopped = (job: string, holder: string, t: number) => {
    const ttl = config.jobs.find((j) => j.name === job)?.ttlMs ?? config.ttlMs;
    const slack = 3_500 + backMs + (failovers ? ttl : 0);
    return pauses.find((f) => f.target === holder && f.t0 + ttl + slack < t && t < f.t1 - 500);
  };
  const skipRows = new Map<string, DbSnapshot['skips'][number]>();
  for (const s of db.skips) {
    skipRows.set(slotKey(s.job, s.slot), s);
    if (!s.holder || s.holderFence === null || s.holderSlot === null || s.heldForMs === null) {
      violate('d', 'skip-incomplete', `${s.job} slot ${iso(s.slot)}: skip row without holder, fence, slot or age`);
      continue;
    }
    const run = runByFence.get(`${s.job}|${s.holderFence}`);
    if (!run) {
      violate('d', 'skip-holder-unknown', `${s.job} slot ${iso(s.slot)}: skip names fence ${s.holderFence} (${s.holder}), which no run has`);
    } else if (run.holder !== s.holder || run.slot !== s.holderSlot) {
      violate('d', 'skip-holder-wrong', `${s.job} slot ${iso(s.slot)}: skip names ${s.holder} (slot ${iso(s.holderSlot)}) but fence ${s.holderFence} is ${run.holder}'s run of slot ${iso(run.slot)}`);
    } else if (steppedBack(run)) {
      // the database repeated times during that run: its times cannot be compared with the skip's
    } else if (run.startedAt > s.recordedAt + LOCK_WAIT_MS || (run.finishedAt !== null && run.finishedAt < s.recordedAt - 2_500)) {
      // (2.5 s: finish_run's own lock_timeout; a claim may read the lease as held while the
      // holder's release is committing. recorded_at is now(), the start of the recorder's
      // transaction, which then may wait for the lease row's lock, held by the holder's claim,
      // up to its lock_timeout: the claim's started_at, read after that lock, may come later;
      // seen in a burst of takeovers right after a failover)
      violate('d', 'skip-holder-not-running', `${s.job} slot ${iso(s.slot)}: skipped at ${iso(s.recordedAt)} for ${s.holder}'s fence ${s.holderFence}, which ran ${iso(run.startedAt)}–${iso(run.finishedAt)}`);
    } else {
      const pause = expiredWhileStopped(s.job, s.holder, toMono(s.recordedAt));
      if (pause) {
        violate('d', 'skip-holder-expired', `${s.job} slot ${iso(s.slot)}: skipped at ${iso(s.recordedAt)} for ${s.holder}'s fence ${s.holderFence}, stopped since ${Math.round(toMono(s.recordedAt) - pause.t0)} ms: its lease had expired`);
      }
    }
    const ran = outputsBySlot.get(slotKey(s.job, s.slot));
    if (ran && ran.length > 0) {
      violate('d', 'skipped-slot-ran', `${s.job} slot ${iso(s.slot)} was recorded as skipped (held by ${s.holder}, fence ${s.holderFence}) and also ran (fence ${ran.map((r) => r.fence).join(', ')})`);
    }
  }
  const reported = new Map<string, Array<Extract<HistoryLine, { type: 'skip' }>>>();
  for (const line of skipLines) push(reported, slotKey(line.job, Date.parse(line.slot)), line);
  for (const [key, lines] of reported) {
    const [job] = key.split('|');
    const slot = lines[0]?.slot;
    if (lines.length > 1) violate('d', 'skip-reported-twice', `${job} slot ${slot}: reported by ${lines.length} workers (${lines.map((l) => l.worker).join(', ')})`);
    const row = skipRows.get(key);
    for (const line of lines) {
      if (!row) violate('d', 'skip-reported-not-recorded', `${job} slot ${slot}: ${line.worker} reported a skip that is not in leasehold.skips`);
      else if (row.holder !== line.holder || row.recordedBy !== line.worker) {
        violate('d', 'skip-report-mismatch', `${job} slot ${slot}: ${line.worker} reported holder ${line.holder}, the row says ${row.holder} recorded by ${row.recordedBy}`);
      }
      if (!skipLogs.has(`${line.worker}|${line.job}|${line.slot}`)) violate('d', 'skip-not-logged', `${job} slot ${slot}: ${line.worker} logged no line naming the holder ${line.holder}`);
    }
  }
  for (const s of db.skips) {
    if (reported.has(slotKey(s.job, s.slot))) continue;
    // The recorder may have died, or lost its connection before the answer came back.
    const t = toMono(s.recordedAt);
    const excused = overlaps(own.get(s.recordedBy), t - 1_000, t + 1_000) || overlaps(global, t - 1_000, t + 1_000) || t > config.stopAt - 500;
    const readyAt = processByWorker.get(s.recordedBy)?.readyAt;
    if (readyAt !== undefined && (readyAt === null || t < readyAt + 50)) {
      violate('d', 'skip-event-before-start-returned', `${s.job} slot ${iso(s.slot)}: recorded by ${s.recordedBy} at ${iso(s.recordedAt)}, during startWorker() (catch-up), before its caller could listen`);
    } else if (!excused) violate('d', 'skip-not-reported', `${s.job} slot ${iso(s.slot)}: recorded by ${s.recordedBy} at ${iso(s.recordedAt)}, but no worker reported it`);
  }
  return skipRows;
}
