// (c) no slot lost while a healthy worker was up, beyond the bound B after a fault: every slot in
// the checked window completed, was skipped (recorded), or is excused by a fault; otherwise LOST.
// And no healthy holder loses its lease to someone else ((e) when it was released under it).
import type { DbSnapshot } from '../checker.js';
import type { HistoryLine } from '../common.js';
import { POOL_IDLE_MS, covers, overlaps, LOCAL_LOSS, increment, type CheckContext, type Violate } from './context.js';

export function checkNoSlotLost(ctx: CheckContext, violate: Violate, skipRows: ReadonlyMap<string, unknown>, writeByRun: ReadonlyMap<string, Extract<HistoryLine, { type: 'write' }>>) {
  const { faults, db, config, segments, toMono, iso, own, tight, blocking, global, processByWorker, healthyAt, runKey, grantLine, endLine, lostLine, slotKey, runsBySlot, runsByJob, outputsBySlot } = ctx;
  const slots = { checked: 0, completed: 0, skipped: 0, excused: {} as Record<string, number>, lost: 0 };
  const missedRows = new Set(db.missed.map((m) => slotKey(m.job, m.slot)));
  // When a run started and when it first went wrong (lease lost, write not accepted, run
  // ended, process gone), on the shared monotonic clock.
  const runFailure = (
    r: DbSnapshot['runs'][number],
  ): [number, number, { mono: number; reason: string; message: string } | undefined, Extract<HistoryLine, { type: 'write' }> | undefined] => {
    const key = runKey(r.holder, r.job, r.fence);
    const from = grantLine.get(key) ?? toMono(r.startedAt);
    const lost = lostLine.get(key);
    const write = writeByRun.get(key);
    const candidates = [
      lost?.mono,
      write && write.status !== 'accepted' ? write.mono : undefined,
      endLine.get(key)?.mono,
      processByWorker.get(r.holder)?.exitedAt ?? undefined,
      r.finishedAt !== null ? toMono(r.finishedAt) : undefined,
      config.stopAt,
    ].filter((t): t is number => typeof t === 'number' && Number.isFinite(t));
    return [from, Math.min(...candidates), lost, write];
  };
  // after a backward step the database repeats times whose slots were checked before it
  const checkedSlots = new Set<string>();
  // A pooled connection left idle through a failover still points at the old primary; its next
  // use is answered with a reset (the moved address), seconds after the failover. The run fails
  // (typed, nothing committed) and its slot with it: an effect of the failover, not a bug.
  const failoverEnds = faults.filter((f) => f.kind === 'failover').map((f) => f.t1 + Number(f.params.rebuildMs ?? 0));
  // For a violation's message: the faults that ended last before `t`, and how long before, so
  // that a failure in CI can be read against the fault windows without the run's data files.
  const faultsBefore = (t: number) => {
    const last = faults
      .filter((f) => f.kind !== 'skew' && f.t0 <= t)
      .sort((x, y) => y.t0 - x.t0)
      .slice(0, 2)
      .map((f) => {
        const params = Object.entries(f.params).map(([k, v]) => `${k} ${typeof v === 'number' ? Math.round(v) : String(v)}`);
        return `${f.kind}${f.target ? ` of ${f.target}` : ''} ${Math.round(t - f.t1)} ms before${params.length > 0 ? ` (${params.join(', ')})` : ''}`;
      });
    return last.length > 0 ? `last faults: ${last.join('; ')}` : 'no fault before';
  };
  const staleAfterFailover = (failAt: number, write: Extract<HistoryLine, { type: 'write' }> | undefined) =>
    !!write?.reason?.includes('connection broke') && failoverEnds.some((end) => failAt >= end - 5_000 && failAt <= end + POOL_IDLE_MS);
  for (const spec of config.jobs) for (const segment of segments) {
    const monoFrom = Math.max(config.windowFrom, segment.from);
    // the last slots need time to finish before the workers are stopped
    const monoTo = Math.min(config.windowTo, config.stopAt - spec.maxMs - 1_500, segment.to);
    if (monoTo < monoFrom) continue;
    const fromDb = monoFrom + segment.offset;
    const toDb = monoTo + segment.offset;
    for (let slot = Math.ceil(fromDb / spec.everyMs) * spec.everyMs; slot <= toDb; slot += spec.everyMs) {
      const key = slotKey(spec.name, slot);
      if (checkedSlots.has(key)) continue;
      checkedSlots.add(key);
      slots.checked++;
      const excuse = (reason: string) => increment(slots.excused, reason);
      if ((outputsBySlot.get(key)?.length ?? 0) > 0) {
        slots.completed++;
        continue;
      }
      if (skipRows.has(key)) {
        slots.skipped++;
        continue;
      }
      const t = slot - segment.offset;
      const missedNote = missedRows.has(key) ? ' (recorded as missed)' : '';
      const runs = runsBySlot.get(key) ?? [];
      if (runs.length > 0) {
        let explained: string | undefined;
        const details: string[] = [];
        for (const r of runs) {
          // Only what happened before the run first failed can explain the failure.
          const [from, failAt, lost, write] = runFailure(r);
          const lo = Math.min(from, failAt);
          const hi = Math.max(from, failAt);
          if (overlaps(global, lo, hi)) explained ??= 'claimant-db-restart';
          else if (staleAfterFailover(failAt, write)) explained ??= 'claimant-failover-connection';
          else if (overlaps(own.get(r.holder), lo, hi)) explained ??= 'claimant-fault';
          else if (r.outcome === 'aborted' && failAt >= config.stopAt - 500) explained ??= 'shutdown';
          else if (lost && LOCAL_LOSS.has(lost.reason)) explained ??= `claimant-local-loss:${lost.reason}`;
          details.push(
            `fence ${r.fence} by ${r.holder}: outcome ${r.outcome}${r.error ? ` (${r.error.slice(0, 80)})` : ''}, write ${write ? `${write.status}${write.reason ? ` (${write.reason})` : ''}` : 'none'}${lost ? `, lease lost (${lost.reason}) ${Math.round(lost.mono - from)} ms after the grant` : ''}, no fault on ${r.holder} before; ${faultsBefore(from)}`,
          );
        }
        if (explained) {
          excuse(explained);
          continue;
        }
        slots.lost++;
        violate('c', 'slot-lost', `${spec.name} slot ${iso(slot)}: claimed by a healthy worker but not completed${missedNote}: ${details.join('; ')}`);
        continue;
      }
      // Nobody claimed it and nobody recorded a skip.
      if (covers(global, t)) {
        excuse('db-restart');
        continue;
      }
      const holderRun = [...(runsByJob.get(spec.name) ?? [])]
        .filter((r) => r.startedAt <= slot + 100 && (r.finishedAt === null || r.finishedAt >= slot - 100))
        .sort((x, y) => y.fence - x.fence)[0];
      if (holderRun && covers(blocking.get(holderRun.holder), t)) {
        excuse('holder-fault');
        continue;
      }
      if (!healthyAt(t) || !healthyAt(t + 100)) {
        excuse('no-healthy-worker');
        continue;
      }
      slots.lost++;
      violate(
        'c',
        'slot-lost',
        `${spec.name} slot ${iso(slot)}: not claimed, not skipped${missedNote}; lease holder then: ${holderRun ? `${holderRun.holder} (fence ${holderRun.fence}, slot ${iso(holderRun.slot)}, ${holderRun.outcome})` : 'none'}`,
      );
    }
  }

  // A lease taken away from a healthy holder before its write (released or taken over by
  // someone else, or refused at the fence) is a bug even when the slot did complete elsewhere.
  for (const r of db.runs) {
    const [from, , lost, write] = runFailure(r);
    if (!lost || LOCAL_LOSS.has(lost.reason) || lost.mono >= config.stopAt - 500) continue;
    if (write && write.mono < lost.mono) continue; // the heartbeat raced the run's own release
    const end = endLine.get(runKey(r.holder, r.job, r.fence));
    if (end && end.mono <= lost.mono) continue;
    // Only the run itself can release its lease (release checks the token), and it does so
    // after its handler: "released" before that is a bug whatever faults happened.
    if (lost.reason === 'released' || lost.message.includes('the lease was released')) {
      violate('e', 'lease-released-under-holder', `${r.job}: ${r.holder}'s lease (fence ${r.fence}, slot ${iso(r.slot)}) was released by someone else while its run was still working`);
      continue;
    }
    const lo = Math.min(from, lost.mono);
    const granted = Math.min(lo, toMono(r.startedAt));
    if (overlaps(global, granted, lost.mono) || overlaps(tight.get(r.holder), granted, lost.mono)) continue;
    violate(
      'c',
      'lease-lost-while-healthy',
      `${r.job}: ${r.holder}'s lease (fence ${r.fence}, slot ${iso(r.slot)}) was lost (${lost.reason}: ${lost.message.slice(0, 120)}) ${Math.round(lost.mono - granted)} ms after it was granted, with no fault on ${r.holder} since; ${faultsBefore(granted)}`,
    );
  }
  return slots;
}
