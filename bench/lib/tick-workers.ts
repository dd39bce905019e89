// The tick-worker processes of the scheduler benchmark (bench/fixtures/tick-worker.ts), driven
// through the JSON-lines toolkit: start, wait until ready, ask for their records and usage.
import { fileURLToPath } from 'node:url';
import { JsonLinesProcess, killAll } from '../../src/testing/json-lines.js';
import { sleep } from './stats.js';
import { isUsageSample, isWorkerDump, type UsageSample, type WorkerDump } from './tick-protocol.js';

const TICK_WORKER = fileURLToPath(new URL('../fixtures/tick-worker.ts', import.meta.url));

const START_TIMEOUT_MS = 240_000;

export function spawnWorker(connectionString: string, holder: string, env: Record<string, string>): JsonLinesProcess {
  return JsonLinesProcess.nodeScript(TICK_WORKER, { label: holder, env: { DATABASE_URL: connectionString, HOLDER: holder, ...env }, nodeArgs: ['--expose-gc', ...workerNodeArgs()] });
}

export async function waitReady(child: JsonLinesProcess): Promise<{ at: number; startMs: number; build: string }> {
  const line = await child.waitFor((l) => l.event === 'ready', START_TIMEOUT_MS);
  return { at: Number(line.at), startMs: Number(line.startMs), build: String(line.build ?? 'src') };
}

export async function dump(child: JsonLinesProcess): Promise<WorkerDump> {
  const answer = await child.send({ cmd: 'dump' }, 60_000);
  if (!isWorkerDump(answer)) throw new Error(`${child.label}: unexpected dump ${JSON.stringify(answer).slice(0, 200)}`);
  return answer;
}

export async function usage(child: JsonLinesProcess, gc = false): Promise<UsageSample> {
  const answer = await child.send({ cmd: 'usage', gc });
  if (!isUsageSample(answer)) throw new Error(`${child.label}: unexpected usage ${JSON.stringify(answer).slice(0, 200)}`);
  return answer;
}

/** BENCH_WORKER_NODE_ARGS: extra node flags for the tick workers, e.g. '--cpu-prof --cpu-prof-dir=/tmp/prof' to see where a tick goes. */
function workerNodeArgs(): string[] {
  return (process.env.BENCH_WORKER_NODE_ARGS ?? '').split(' ').filter((arg) => arg.length > 0);
}

/**
 * Stops the workers as an application would (worker.stop(), then exit) so that what node writes
 * at exit (a --cpu-prof profile) is written; then kills whatever has not exited within 10 s.
 */
export async function stopWorkers(children: readonly JsonLinesProcess[]): Promise<void> {
  await Promise.allSettled(children.map((child) => child.send({ cmd: 'stop' }, 10_000)));
  await Promise.allSettled(children.map((child) => Promise.race([child.exited, sleep(10_000)])));
  await killAll(children);
}
