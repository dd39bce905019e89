// One failover scenario on a fresh primary + standby: client processes churn through leases,
// fenced writes and slot claims through one address; one client holds a lease across it; the
// primary is killed or frozen (with replication held back first when asynchronous), the
// standby is promoted, the address is switched to it, a second client tries to take the held
// lease, and the checks count what went wrong.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { installMutant, type FailoverMutantName } from '../../faults/mutants.js';
import { FaultProxy } from '../../faults/proxy.js';
import { JsonLinesProcess, type Line } from './processes.js';
import type { ClusterTemplate, ReplicatedPair, ReplicationMode } from '../../faults/replication.js';
import {
  backwardFences,
  deadTokens,
  doubleFences,
  doubleSlots,
  history,
  overlaps,
  twoBelieversMs,
  type Overlap,
  writesWithDeadTokens,
  type History,
} from './failover-checks.js';

const CLIENT = fileURLToPath(new URL('../fixtures/failover-client.ts', import.meta.url));

export interface ScenarioOptions {
  mode: ReplicationMode;
  fault: 'kill' | 'freeze';
  /** Broken protocol rules (faults/mutants.ts) installed on the primary before the clients start. */
  mutants?: FailoverMutantName[];
  /** Where to write every client's lines, for reading a failure (test-artifacts/). */
  linesFile?: string;
  /** TTL of the lease held across the failover (heartbeats every ttl/3, the default). */
  holdTtlMs?: number;
}

export interface ScenarioResult {
  /** Fence values acknowledged to two different acquisitions. */
  doubleFences: number;
  /** Acquisitions acknowledged with a fence not above one acknowledged before they were sent. */
  backwardFences: number;
  /** Tokens released or superseded before the failover, accepted for a fenced write after it. */
  resurrectedTokens: number;
  /** Slots acknowledged to two acquisitions; and of those, with different idempotency keys. */
  slotsTwice: number;
  slotsTwiceDifferentKeys: number;
  /** ms during which two processes believed they held the same lease: the held lease; all leases. */
  twoBelieversHeldMs: number;
  twoBelieversAllMs: number;
  /** The first few overlaps behind twoBelieversAllMs, to explain them. */
  overlaps: Overlap[];
  /** Fenced writes acknowledged before the failover that the new primary does not have. */
  lostWrites: number;
  /** Whether (and how long after the switch) the second client took the held lease. */
  takeoverAfterSwitchMs: number | null;
  /** The old holder learned of its loss this long after the fault (null: never, within the run). */
  holderLearnedAfterFaultMs: number | null;
  acquisitions: number;
  acknowledgedWrites: number;
  probedTokens: number;
  /** Where the time went (ms): pair set-up, client start, the whole scenario. */
  timings: Record<string, number>;
}

const PARKED = ['parked-1', 'parked-2', 'parked-3'];
const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/**
 * The client processes and the one address they use, shared by the scenarios of a file:
 * starting a TypeScript process costs seconds of CPU on a loaded machine.
 */
export class Fleet {
  private constructor(
    readonly proxy: FaultProxy,
    readonly clients: JsonLinesProcess[],
  ) {}

  static async start(count = 3): Promise<Fleet> {
    const proxy = new FaultProxy(0);
    await proxy.listen();
    const url = `postgres://postgres@127.0.0.1:${proxy.port}/postgres`;
    const started = await Promise.allSettled(
      Array.from({ length: count }, () => JsonLinesProcess.startScript(CLIENT, { DATABASE_URL: url })),
    );
    const clients = started.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    const failed = started.find((r) => r.status === 'rejected');
    if (failed) {
      await Promise.allSettled(clients.map((c) => c.kill()));
      await proxy.close();
      throw failed.reason;
    }
    return new Fleet(proxy, clients);
  }

  async close(): Promise<void> {
    await Promise.allSettled(this.clients.map((c) => c.kill()));
    await this.proxy.close();
  }
}

export async function runScenario(template: ClusterTemplate, fleet: Fleet, options: ScenarioOptions): Promise<ScenarioResult> {
  const holdTtlMs = options.holdTtlMs ?? 2_000;
  const started = Date.now();
  const timings: Record<string, number> = {};
  const clients = fleet.clients;
  const pair = await template.pair(options.mode, fleet.proxy);
  timings.pair = Date.now() - started;
  try {
    if (options.mutants?.length) {
      const client = new pg.Client({ connectionString: pair.primary.url() });
      await client.connect();
      try {
        for (const mutant of options.mutants) await installMutant(client, mutant);
      } finally {
        await client.end();
      }
    }
    const generations = await Promise.all(clients.map((c) => c.send({ cmd: 'connect' })));
    // this scenario's events: those of the client generation just started
    const lines = () => clients.map((c, i) => c.lines.filter((l) => l.gen === generations[i]?.gen));
    timings.clients = Date.now() - started - timings.pair;
    const [a, b, c] = clients as [JsonLinesProcess, JsonLinesProcess, JsonLinesProcess];
    const held = await a.send({ cmd: 'hold', name: 'held', ttl: `${holdTtlMs}ms` });
    if (held.acquired !== true) throw new Error(`the first holder did not acquire: ${JSON.stringify(held)}`);
    // Leases held from before the hold-back and released during it: with asynchronous
    // replication the releases are lost, and their tokens are what a resurrection would use.
    for (const name of PARKED) await c.send({ cmd: 'hold', name, ttl: '10s' });
    for (const client of clients) await client.send({ cmd: 'churn', jobs: ['job-1', 'job-2', 'job-3'], slotJob: 'slots', ttl: '10s' });
    await sleep(1_000);
    if (options.mode === 'async') {
      // From here on the standby receives nothing: every grant, release and write the primary
      // acknowledges now is lost with it.
      await pair.waitForCatchUp();
      pair.replicationProxy.setMode('blackhole');
    }
    await sleep(300);
    for (const name of PARKED) await c.send({ cmd: 'release', name });
    await sleep(900);
    const faultAt = Date.now();
    if (options.fault === 'kill') await pair.primary.kill();
    else pair.primary.freeze();
    await pair.standby.promote();
    // Before any client reaches the new primary (which would take the leases over and retire
    // the old tokens anyway): does it accept a fenced write under a token that was dead before?
    const dead = deadTokens(history(lines(), faultAt), faultAt);
    const probe = await probeTokens(pair, dead);
    // as a moved virtual IP: the old server's answers stop, a client's next packet is reset
    pair.clientProxy.retarget(pair.standby.port, 'reset-on-send');
    const switchedAt = Date.now();

    // The second client tries the held lease until it gets it or the TTL has long passed.
    let takeoverAt: number | null = null;
    while (Date.now() < switchedAt + holdTtlMs + 3_000) {
      const reply = await b.send({ cmd: 'hold', name: 'held', ttl: `${holdTtlMs}ms` });
      if (reply.acquired === true) {
        takeoverAt = Date.now();
        break;
      }
      await sleep(50);
    }
    const minimumEnd = switchedAt + 1_500;
    if (Date.now() < minimumEnd) await sleep(minimumEnd - Date.now());
    await Promise.all(clients.map((client) => client.send({ cmd: 'disconnect' }, 30_000)));
    const endAt = Date.now();
    timings.failoverToEnd = endAt - faultAt;

    if (options.linesFile) {
      writeFileSync(options.linesFile, `${JSON.stringify({ faultAt, switchedAt, endAt, clients: lines() })}\n`);
    }
    const h = history(lines(), endAt);
    const lostWrites = await countLostWrites(pair, h, faultAt);
    const slots = doubleSlots(h);
    const heldHistory: History = { ...h, acquired: h.acquired.filter((x) => x.name === 'held') };
    const holderLost = lines()[0]?.find((l: Line) => l.event === 'lost' && l.name === 'held' && Number(l.at) >= faultAt);
    return {
      doubleFences: doubleFences(h),
      backwardFences: backwardFences(h),
      resurrectedTokens: probe + writesWithDeadTokens(h, faultAt, faultAt),
      slotsTwice: slots.twice,
      slotsTwiceDifferentKeys: slots.differentKeys,
      twoBelieversHeldMs: twoBelieversMs(heldHistory),
      twoBelieversAllMs: twoBelieversMs(h),
      overlaps: overlaps(h).slice(0, 5),
      lostWrites,
      takeoverAfterSwitchMs: takeoverAt === null ? null : takeoverAt - switchedAt,
      holderLearnedAfterFaultMs: holderLost ? Number(holderLost.at) - faultAt : null,
      acquisitions: h.acquired.length,
      acknowledgedWrites: h.writes.length,
      probedTokens: dead.length,
      timings: { ...timings, total: Date.now() - started },
    };
  } finally {
    await pair.close();
  }
}

async function sql(url: string, text: string, values: unknown[] = []): Promise<pg.QueryResult> {
  const client = new pg.Client({ connectionString: url });
  client.on('error', () => undefined);
  await client.connect();
  try {
    return await client.query(text, values);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Tries a fenced write with every dead token on the promoted standby; counts the ones accepted. */
async function probeTokens(pair: ReplicatedPair, dead: Array<{ name: string; token: string; fence: bigint }>): Promise<number> {
  const client = new pg.Client({ connectionString: pair.standby.url() });
  client.on('error', () => undefined);
  await client.connect();
  let accepted = 0;
  try {
    for (const d of dead) {
      await client.query('begin');
      try {
        await client.query('select leasehold.assert_lease($1, $2::uuid, $3::bigint)', [d.name, d.token, d.fence.toString()]);
        await client.query('insert into fenced_writes (name, fence, token, value) values ($1, $2, $3, $4)', [
          d.name,
          d.fence.toString(),
          d.token,
          `probe:${d.token}`,
        ]);
        await client.query('commit');
        accepted++;
      } catch {
        await client.query('rollback');
      }
    }
  } finally {
    await client.end().catch(() => undefined);
  }
  return accepted;
}

/** Acknowledged fenced writes sent before the fault that the promoted standby does not have. */
async function countLostWrites(pair: ReplicatedPair, h: History, faultAt: number): Promise<number> {
  const { rows } = await sql(pair.standby.url(), 'select value from fenced_writes');
  const present = new Set(rows.map((r: { value: string }) => r.value));
  return h.writes.filter((w) => w.at < faultAt && !present.has(w.value)).length;
}
