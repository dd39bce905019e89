// (b) each slot at most once: one claim (run row) and one accepted write per (job, slot).
import { type CheckContext, type Violate } from './context.js';

export function checkSlotsOnce(ctx: CheckContext, violate: Violate) {
  const { iso, runsBySlot, outputsBySlot } = ctx;
  for (const [key, runs] of runsBySlot) {
    if (runs.length > 1) {
      violate('b', 'slot-claimed-twice', `${key.split('|')[0]} slot ${iso(runs[0]?.slot ?? null)} claimed ${runs.length} times: ${runs.map((r) => `fence ${r.fence} by ${r.holder}`).join(', ')}`);
    }
  }
  for (const [key, rows] of outputsBySlot) {
    if (rows.length > 1) {
      violate('b', 'slot-completed-twice', `${key.split('|')[0]} slot ${iso(rows[0]?.slot ?? null)} completed ${rows.length} times: ${rows.map((r) => `fence ${r.fence} by ${r.worker}`).join(', ')}`);
    }
  }
}
