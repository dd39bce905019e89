// (e) token-checked release: a lease is released only by its own run, in the transaction that
// records the run's outcome, after the run's write.
import type { DbSnapshot } from '../checker.js';
import { type CheckContext, type Violate } from './context.js';

export function checkReleases(ctx: CheckContext, violate: Violate) {
  const { db, iso, own, runByFence } = ctx;
  const firstRelease = new Map<string, DbSnapshot['releases'][number]>();
  for (const rel of db.releases ?? []) {
    const key = `${rel.job}|${rel.fence}`;
    const seen = firstRelease.get(key);
    if (!seen || rel.ord < seen.ord) firstRelease.set(key, rel);
  }
  // And a run releases its lease in the transaction that records its outcome (finish_run,
  // finish_runs); a release in any other transaction used a token that was not its own.
  const ended = new Set((db.runEnds ?? []).map((e) => `${e.txid}|${e.job}|${e.fence}`));
  for (const rel of db.releases ?? []) {
    if (!ended.has(`${rel.txid}|${rel.job}|${rel.fence}`)) {
      const run = runByFence.get(`${rel.job}|${rel.fence}`);
      violate('e', 'release-by-another', `${rel.job}: the lease of fence ${rel.fence}${run ? ` (${run.holder}'s run of ${iso(run.slot)})` : ''} was released at ${iso(rel.at)} by a transaction that did not finish that run`);
    }
  }
  for (const o of db.outputs) {
    const rel = firstRelease.get(`${o.job}|${o.fence}`);
    if (rel && rel.ord < o.ord) {
      violate('e', 'released-before-own-write', `${o.job}: the lease of fence ${o.fence} (${o.worker}) was released at ord ${rel.ord}, before that run's own write at ord ${o.ord}`);
    }
  }
}
