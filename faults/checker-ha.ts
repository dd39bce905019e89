// The checker's properties for the replicated tier (faults/README.md):
// (g) failover: per job, every acknowledged grant has a fence of its own (no fence value is
//     acknowledged twice, whatever the replication mode lost), and a grant acknowledged after a
//     failover has a fence above every grant acknowledged before it; right after a failover, no
//     worker is granted a lease while its previous holder still believes it holds it (the holder's
//     run neither ended nor was told the lease was lost), unless that holder's grant was lost
//     with the old primary (asynchronous replication); no stale-token probe (a fenced check
//     with the token of a run that had ended: released, or superseded) is accepted, on either
//     side of a failover.
// (h) database clock steps: no missed slot is recorded inside the database-time interval a
//     forward step jumped over (those slots never existed), except per job the latest one, which
//     the workers' catch-up policy ('latest') picks to run and which may fail to be claimed; after a backward step, scheduling
//     resumes on the database's new time (some write is accepted within the step plus a bound).
//
// Worker histories are the witness here, not the database: in asynchronous mode the new primary
// never saw the grants the old one lost, but the workers that were told of them did.
import type { CheckInput } from './checker.js';
import type { FaultRecord, HistoryLine } from './common.js';

export type HaProperty = 'g' | 'h';

export interface HaCounts {
  failovers: number;
  clockSteps: { forward: number; backward: number };
  /** Acknowledged grants compared across failovers (g). */
  grantsAcrossFailovers: number;
  /** Backward steps whose resumption could be checked before the run ended (h). */
  backwardStepsChecked: number;
  /** Slots inside a forward step recorded as missed that catch-up 'latest' had picked to run (allowed, one per job and step). */
  catchUpSlotsMissed: number;
  /** Stale-token probes: refused (as they must be), failed (no answer), accepted (violations). */
  probes: { refused: number; failed: number; accepted: number; afterFailover: number };
  /**
   * For the failover table (docs/high-availability.md): ms during which a worker was granted a
   * lease while another still believed it held it (its run neither ended nor lost, its process
   * up), summed over such pairs; an end logged within SLACK_MS of the next grant is not counted
   * (the end line follows the acknowledged release).
   */
  twoBelieversMs: number;
  /** Slots started by two runs (different worker or fence), whatever replication lost. */
  slotsStartedTwice: number;
}

type Grant = Extract<HistoryLine, { type: 'grant' }>;

/** Margin for two lines written by different processes about one instant, ms. */
const SLACK_MS = 100;

export function checkFailoverAndClock(input: CheckInput, violate: (property: HaProperty, kind: string, message: string) => void): HaCounts {
  const { history, faults, processes, db, config } = input;
  const failovers = faults.filter((f) => f.kind === 'failover').sort((a, b) => a.t0 - b.t0);
  const steps = faults.filter((f) => f.kind === 'clock-step').sort((a, b) => a.t0 - b.t0);
  const counts: HaCounts = { failovers: failovers.length, clockSteps: { forward: 0, backward: 0 }, grantsAcrossFailovers: 0, backwardStepsChecked: 0, catchUpSlotsMissed: 0, probes: { refused: 0, failed: 0, accepted: 0, afterFailover: 0 }, twoBelieversMs: 0, slotsStartedTwice: 0 };
  const grants = history.filter((l): l is Grant => l.type === 'grant').sort((a, b) => a.mono - b.mono);

  // ---- (g) fences never repeat, never go back -------------------------------------------
  const byFence = new Map<string, Grant>();
  for (const g of grants) {
    const key = `${g.job}|${g.fence}`;
    const seen = byFence.get(key);
    if (seen) violate('g', 'fence-repeated', `${g.job}: fence ${g.fence} acknowledged to ${seen.worker} (slot ${seen.slot}) and again to ${g.worker} (slot ${g.slot})`);
    else byFence.set(key, g);
  }
  for (const f of failovers) {
    const maxBefore = new Map<string, Grant>();
    // acknowledged before the primary went away (the failover's start includes the hold-back)
    const downAt = f.t0 + Number(f.params.holdBackMs ?? 0);
    for (const g of grants) {
      if (g.mono >= downAt) break;
      const top = maxBefore.get(g.job);
      if (!top || g.fence > top.fence) maxBefore.set(g.job, g);
    }
    for (const g of grants) {
      if (g.mono <= f.t1) continue;
      const top = maxBefore.get(g.job);
      if (!top) continue;
      counts.grantsAcrossFailovers++;
      if (g.fence <= top.fence) {
        violate('g', 'fence-backwards', `${g.job}: fence ${g.fence} acknowledged to ${g.worker} after failover ${f.id}, not above fence ${top.fence} acknowledged to ${top.worker} before it`);
      }
    }
  }

  // ---- (g) released or superseded tokens stay dead ---------------------------------------
  for (const line of history) {
    if (line.type !== 'probe') continue;
    counts.probes[line.status]++;
    // the run ended while the failover was under way (its start includes any replication hold-back)
    const across = failovers.find((f) => line.endedMono >= f.t0 - config.ttlMs && line.endedMono <= f.t1 && line.mono >= f.t0 + Number(f.params.holdBackMs ?? 0));
    if (across) counts.probes.afterFailover++;
    if (line.status === 'accepted') {
      violate('g', 'released-token-accepted', `${line.job}: ${line.worker}'s token of fence ${line.fence} was accepted${line.by ? ` (probed by the ${line.by} on the promoted standby)` : ''} ${Math.round(line.mono - line.endedMono)} ms after its run ended${across ? ` (across failover ${across.id})` : ''}`);
    }
  }

  // ---- (g) no second believer right after a failover ------------------------------------
  const runKey = (worker: string, job: string, fence: number) => `${worker}|${job}|${fence}`;
  const over = new Map<string, number>();
  for (const line of history) {
    if (line.type !== 'end' && line.type !== 'lost') continue;
    const key = runKey(line.worker, line.job, line.fence);
    over.set(key, Math.min(over.get(key) ?? Number.POSITIVE_INFINITY, line.mono));
  }
  const exitedAt = new Map(processes.map((p) => [p.worker, p.exitedAt ?? Number.POSITIVE_INFINITY]));
  // A grant the failover lost (asynchronous replication): the new primary never knew of it, and
  // its holder learns at its next renewal. The documented limit of asynchronous replication.
  const kept = new Set(db.grants.map((g) => `${g.job}|${g.fence}`));
  // a kill of the earlier holder, or a clock step (every lease expires at once), explains a takeover
  const otherFaults = faults.filter((f) => f.kind !== 'failover' && f.kind !== 'skew');
  for (const f of failovers) {
    const until = f.t1 + 3 * config.ttlMs;
    for (const g of grants) {
      if (g.mono < f.t0 || g.mono > until) continue;
      const before = grants.filter((p) => p.job === g.job && p.worker !== g.worker && p.mono < g.mono && p.fence < g.fence);
      for (const p of before) {
        const endedAt = Math.min(over.get(runKey(p.worker, p.job, p.fence)) ?? Number.POSITIVE_INFINITY, exitedAt.get(p.worker) ?? Number.POSITIVE_INFINITY);
        if (endedAt <= g.mono + SLACK_MS || !kept.has(`${p.job}|${p.fence}`)) continue;
        if (otherFaults.some((o: FaultRecord) => o.t0 <= g.mono && (o.target === null || o.target === p.worker) && o.t0 >= p.mono - config.ttlMs)) continue;
        // what a rare case needs to be explained: where the earlier grant lies against the
        // failover and the ttl, and the clock steps and other faults near it
        const near = faults
          .filter((o) => o !== f && o.t0 >= p.mono - 2 * config.ttlMs && o.t0 <= g.mono)
          .map((o) => `${o.kind}${o.target ? ` of ${o.target}` : ''} at ${Math.round(o.t0 - f.t0)} ms`);
        violate('g', 'two-believers', `${g.job}: ${g.worker} was granted fence ${g.fence} ${Math.round(g.mono - f.t1)} ms after failover ${f.id} while ${p.worker} still believed it held fence ${p.fence} (until ${Number.isFinite(endedAt) ? `${Math.round(endedAt - g.mono)} ms later` : 'the end'}; its grant at ${Math.round(p.mono - f.t0)} ms from the failover's start, which took ${Math.round(f.t1 - f.t0)} ms, ttl ${config.ttlMs} ms; faults near: ${near.join(', ') || 'none'})`);
      }
    }
  }

  // ---- the failover table's counts, over the whole run ------------------------------------
  const believedUntil = (p: Grant) => Math.min(over.get(runKey(p.worker, p.job, p.fence)) ?? config.stopAt, exitedAt.get(p.worker) ?? config.stopAt, config.stopAt);
  const byJob = new Map<string, Grant[]>();
  for (const g of grants) byJob.set(g.job, [...(byJob.get(g.job) ?? []), g]);
  for (const list of byJob.values()) {
    for (let i = 0; i < list.length; i++) {
      const p = list[i] as Grant;
      const until = believedUntil(p);
      for (let j = i + 1; j < list.length && (list[j] as Grant).mono < until; j++) {
        const g = list[j] as Grant;
        if (g.worker === p.worker || until - g.mono <= SLACK_MS) continue;
        counts.twoBelieversMs += Math.min(until, believedUntil(g)) - g.mono;
      }
    }
  }
  counts.twoBelieversMs = Math.round(counts.twoBelieversMs);
  const startedBy = new Map<string, Set<string>>();
  for (const line of history) {
    if (line.type !== 'start') continue;
    const key = `${line.job}|${line.slot}`;
    startedBy.set(key, (startedBy.get(key) ?? new Set()).add(`${line.worker}|${line.fence}`));
  }
  for (const runs of startedBy.values()) counts.slotsStartedTwice += runs.size - 1;

  // ---- (h) clock steps --------------------------------------------------------------------
  const maxEvery = Math.max(...config.jobs.map((j) => j.everyMs));
  const spawned = new Map(processes.map((p) => [p.worker, p.spawnedAt]));
  const accepted = history.filter((l) => l.type === 'write' && l.status === 'accepted').map((l) => l.mono);
  for (const s of steps) {
    const delta = Number(s.params.deltaMs);
    if (delta > 0) {
      counts.clockSteps.forward++;
      const from = Number(s.params.fromDb);
      const to = Number(s.params.toDb);
      // The catch-up policy's pick (the workers' 'latest': the last slot of the window) may be
      // recorded as missed when its claim fails; any other slot of the window never existed.
      const inside = db.missed.filter((m) => m.slot > from && m.slot <= to).sort((x, y) => y.slot - x.slot);
      const picked = new Set<string>();
      for (const m of inside) {
        if (picked.size < config.jobs.length && !picked.has(m.job)) {
          picked.add(m.job);
          counts.catchUpSlotsMissed++;
          continue;
        }
        // told apart for the report: a recorder started after the step reads the window from
        // leasehold.clock_steps (a violation either way)
        const spawnedAt = spawned.get(m.recordedBy);
        const kind = spawnedAt !== undefined && spawnedAt > s.t0 ? 'missed-inside-step-after-start' : 'missed-inside-step';
        violate('h', kind, `${m.job}: slot ${new Date(m.slot).toISOString()} recorded as missed (${m.reason}) by ${m.recordedBy}, inside the +${delta / 1000} s clock step`);
      }
    } else {
      counts.clockSteps.backward++;
      // the slots ahead are |delta| further away; then one period, and the usual bound
      const busy = failovers.filter((f) => f.t0 >= s.t0 && f.t0 <= s.t1 + 60_000).reduce((sum, f) => sum + (f.t1 - f.t0) + Number(f.params.rebuildMs ?? 0), 0);
      const by = s.t1 + Math.abs(delta) + maxEvery + config.ttlMs + config.boundMs + busy + 2_000;
      if (by > config.stopAt - 500) continue;
      counts.backwardStepsChecked++;
      const resumed = accepted.some((t) => t > s.t1 + Math.abs(delta) - 5_000 && t <= by);
      if (!resumed) violate('h', 'scheduling-stopped', `no write accepted within ${Math.round(by - s.t1)} ms after the ${delta / 1000} s clock step ${s.id}`);
    }
  }
  return counts;
}
