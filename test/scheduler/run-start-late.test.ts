// The history records when a run's handler really started, not when its slot was claimed: a
// worker whose start comes late (here a listener that blocks the event loop between the claim
// and the start, as a long garbage collection would) is recorded with its late start, so that
// started_at - slot is the run's real lateness.
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startWorker, type Worker } from '../../src/index.js';
import { createMetrics, jobStatus } from '../../src/monitor/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { freshDatabase, rawPool, waitFor, client } from '../support/db.js';

let url: string;
const workers: Worker[] = [];

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
});

function stall(ms: number): void {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    // busy: nothing else runs
  }
}

// claimed ahead by 1 s, the start is held 400 ms past the slot too: the stall outlasts the lead
for (const [claimAhead, stallMs, title] of [
  ['0ms', 400, 'claimed at the slot'],
  ['1s', 1_400, 'claimed ahead'],
] as const) {
  describe(`a run ${title}`, () => {
    it('is recorded as started when its handler was called', async () => {
      const job = `late-start-${claimAhead}`;
      const starts = new Map<number, number>();
      const worker = await startWorker({
        connectionString: url,
        logger: silentLogger(),
        handleSignals: false,
        claimAhead,
        jobs: [{ name: job, every: '2s', ttl: '10s', handler: async (ctx) => void starts.set(ctx.slot.getTime(), Date.now()) }],
      });
      workers.push(worker);
      const metrics = createMetrics();
      metrics.observe(worker);
      // every grant of this job's lease is followed by a stall in which nothing runs
      worker.on('lease:acquired', (lease) => {
        if (lease.name === job) stall(stallMs);
      });
      await waitFor(() => starts.size >= 3, 20_000, 50);
      await worker.stop();
      const { rows } = await rawPool(url, 1).query<{ slot: Date; started_at: Date }>('select slot, started_at from leasehold.runs where job = $1 order by slot', [job]);
      const compared = rows.filter((r) => starts.has(r.slot.getTime()));
      expect(compared.length).toBeGreaterThanOrEqual(3);
      for (const run of compared) {
        const actual = starts.get(run.slot.getTime())!;
        // the same machine's clock; the worker's estimate of the database clock is within a round trip
        expect(Math.abs(run.started_at.getTime() - actual), `slot ${run.slot.toISOString()}`).toBeLessThan(100);
        expect(run.started_at.getTime()).toBeGreaterThanOrEqual(run.slot.getTime());
      }
      // the lateness histogram saw the same: about 400 ms a run
      const histogram = (await metrics.registry.getSingleMetricAsString('leasehold_run_start_lateness_seconds')).split('\n');
      const count = Number(histogram.find((l) => l.startsWith('leasehold_run_start_lateness_seconds_count'))?.split(' ')[1]);
      const sum = Number(histogram.find((l) => l.startsWith('leasehold_run_start_lateness_seconds_sum'))?.split(' ')[1]);
      expect(count).toBeGreaterThanOrEqual(3);
      expect(sum / count).toBeGreaterThan(0.3);
      expect(sum / count).toBeLessThan(1);
      // and the job's status: the p95 of started_at - slot
      const [status] = await jobStatus(rawPool(url, 1), job);
      expect(status?.lateP95Seconds).toBeGreaterThan(0.3);
      expect(status?.lateP95Seconds).toBeLessThan(1);
    }, 40_000);
  });
}
