// (a) fence safety, and (b)'s order of claimed slots: per job, in ord order (the order in which
// the database serialized grants and writes), fences of grants strictly increase, claimed slots
// strictly increase, and no write is accepted under a fence older than the latest grant. Also the
// clients' view against the database, and (f): no write begun after its lease was lost accepted.
import type { DbSnapshot } from '../checker.js';
import type { HistoryLine } from '../common.js';
import { type CheckContext, type Violate } from './context.js';

export function checkFences(ctx: CheckContext, violate: Violate) {
  const { db, config, iso, runKey, writeLines, grantsByJob, outputsByJob } = ctx;
  const jobs = new Set([...grantsByJob.keys(), ...outputsByJob.keys()]);
  for (const job of jobs) {
    const grants = [...(grantsByJob.get(job) ?? [])].sort((x, y) => x.ord - y.ord);
    for (let i = 1; i < grants.length; i++) {
      const prev = grants[i - 1] as DbSnapshot['grants'][number];
      const g = grants[i] as DbSnapshot['grants'][number];
      if (g.fence <= prev.fence) violate('a', 'fence-not-increasing', `${job}: grant of fence ${g.fence} (ord ${g.ord}) after fence ${prev.fence} (ord ${prev.ord})`);
      if (g.slot !== null && prev.slot !== null && g.slot <= prev.slot) {
        violate('b', 'slot-not-increasing', `${job}: fence ${g.fence} claimed slot ${iso(g.slot)} (ord ${g.ord}), not after fence ${prev.fence}'s slot ${iso(prev.slot)}`);
      }
    }
    type Event = { ord: number; grant?: DbSnapshot['grants'][number]; write?: DbSnapshot['outputs'][number] };
    const events: Event[] = [...grants.map((grant) => ({ ord: grant.ord, grant })), ...(outputsByJob.get(job) ?? []).map((write) => ({ ord: write.ord, write }))];
    events.sort((x, y) => x.ord - y.ord);
    let granted: DbSnapshot['grants'][number] | undefined;
    let lastWrite: DbSnapshot['outputs'][number] | undefined;
    for (const e of events) {
      if (e.grant) {
        if (!granted || e.grant.fence > granted.fence) granted = e.grant;
        continue;
      }
      const w = e.write as DbSnapshot['outputs'][number];
      if (granted && w.fence < granted.fence) {
        violate(
          'a',
          'stale-write-accepted',
          `${job}: write of fence ${w.fence} by ${w.worker} (slot ${iso(w.slot)}) accepted at ord ${w.ord}, after fence ${granted.fence} was granted to ${granted.holder} at ord ${granted.ord}`,
        );
      } else if (!granted || w.fence > granted.fence) {
        violate('a', 'write-without-grant', `${job}: write of fence ${w.fence} at ord ${w.ord} before any grant of that fence`);
      }
      if (lastWrite && w.fence < lastWrite.fence) {
        violate('a', 'writes-out-of-fence-order', `${job}: write of fence ${w.fence} (ord ${w.ord}) after a write of fence ${lastWrite.fence} (ord ${lastWrite.ord})`);
      }
      lastWrite = w;
    }
  }
  const counters = new Map(db.counters.map((c) => [c.job, c.n]));
  for (const spec of config.jobs) {
    const rows = outputsByJob.get(spec.name)?.length ?? 0;
    const n = counters.get(spec.name) ?? 0;
    if (n !== rows) violate('a', 'counter-mismatch', `${spec.name}: the read-modify-write counter is ${n} but ${rows} writes were accepted (lost or extra updates: overlapping writers)`);
  }
  // The clients' view against the database.
  const outputByRun = new Map<string, DbSnapshot['outputs'][number]>();
  for (const o of db.outputs) outputByRun.set(runKey(o.worker, o.job, o.fence), o);
  const writes = {
    accepted: 0,
    rejectedByServer: 0,
    rejectedLocally: 0,
    failedBeforeCommit: 0,
    indeterminate: 0,
    indeterminateCommitted: 0,
    indeterminateNotCommitted: 0,
    committedUnacknowledged: 0,
  };
  let staleWritesRefused = 0;
  const acknowledged = new Set<string>();
  const writeByRun = new Map<string, Extract<HistoryLine, { type: 'write' }>>();
  for (const w of writeLines) {
    writeByRun.set(runKey(w.worker, w.job, w.fence), w);
    const key = runKey(w.worker, w.job, w.fence);
    acknowledged.add(key);
    const row = outputByRun.get(key);
    switch (w.status) {
      case 'accepted':
        writes.accepted++;
        if (!row) violate('a', 'acknowledged-write-missing', `${w.job}: ${w.worker}'s write of fence ${w.fence} was acknowledged but is not in test_output`);
        if (w.afterLost) violate('f', 'write-after-lost', `${w.job}: ${w.worker}'s write of fence ${w.fence} began after its lease was lost and was accepted`);
        break;
      case 'rejected':
        // ctx.transaction() refuses locally only when the lease was already known lost when it
        // was called; otherwise the refusal came from assert_lease, the fence check in the
        // database (whatever reason the error names: a local deadline may fire meanwhile)
        if (w.afterLost) writes.rejectedLocally++;
        else writes.rejectedByServer++;
        staleWritesRefused++;
        if (row) violate('a', 'refused-write-committed', `${w.job}: ${w.worker}'s write of fence ${w.fence} was refused (${w.reason}) but is in test_output`);
        break;
      case 'failed':
        writes.failedBeforeCommit++;
        if (row) violate('a', 'failed-write-committed', `${w.job}: ${w.worker}'s write of fence ${w.fence} failed before COMMIT (${w.reason}) but is in test_output`);
        break;
      case 'indeterminate':
        writes.indeterminate++;
        if (row) writes.indeterminateCommitted++;
        else writes.indeterminateNotCommitted++;
        break;
    }
  }
  for (const o of db.outputs) if (!acknowledged.has(runKey(o.worker, o.job, o.fence))) writes.committedUnacknowledged++;
  return { writes, staleWritesRefused, writeByRun };
}
