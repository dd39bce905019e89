// Failover on real servers: a primary and a streaming standby built from PostgreSQL binaries,
// client processes behind one address, the primary killed or frozen, the standby promoted and
// the address switched. See docs/high-availability.md ("How it is tested on real servers") for what is checked and why.
import { mkdirSync, writeFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createLeasehold } from '../../src/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { ClusterTemplate, findBinaries } from '../../faults/replication.js';
import { Fleet, runScenario, type ScenarioOptions, type ScenarioResult } from '../support/failover-scenario.js';
import pg from 'pg';

const kind = inject('serverKind');
const binaries = await findBinaries(kind);
const missing = typeof binaries === 'string' ? binaries : undefined;
if (missing) process.stderr.write(`[failover] skipped: ${missing}\n`);

const results: Record<string, ScenarioResult> = {};
let template: ClusterTemplate | undefined;
let fleet: Fleet | undefined;

/** The schema, plus the table the clients' fenced writes go to. */
async function prepare(url: string): Promise<void> {
  const leasehold = await createLeasehold({ connectionString: url, logger: silentLogger(), liveness: false });
  await leasehold.close();
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(
    'create table fenced_writes (value text primary key, name text not null, fence bigint not null, token uuid not null, at timestamptz not null default now())',
  );
  await client.end();
}

async function scenario(label: string, options: ScenarioOptions): Promise<ScenarioResult> {
  if (!template || !fleet) throw new Error('no template cluster or clients');
  mkdirSync('test-artifacts', { recursive: true });
  const result = await runScenario(template, fleet, { ...options, linesFile: `test-artifacts/failover-${kind}-${label}.lines.json` });
  results[label] = result;
  return result;
}

describe.skipIf(missing !== undefined)(`failover (${kind} binaries)`, () => {
  beforeAll(async () => {
    if (typeof binaries === 'string') return;
    // the client processes load while the template cluster is initialised
    const [t, f] = await Promise.allSettled([ClusterTemplate.create(binaries, prepare), Fleet.start()]);
    if (t.status === 'fulfilled') template = t.value;
    if (f.status === 'fulfilled') fleet = f.value;
    if (t.status === 'rejected') throw t.reason;
    if (f.status === 'rejected') throw f.reason;
  });

  afterAll(async () => {
    await fleet?.close();
    template?.close();
    mkdirSync('test-artifacts', { recursive: true });
    writeFileSync(`test-artifacts/failover-${kind}.json`, `${JSON.stringify(results, null, 2)}\n`);
  });

  it('synchronous replication, primary killed: nothing acknowledged is lost, nothing granted twice, no token resurrected', async () => {
    const r = await scenario('sync-kill', { mode: 'sync', fault: 'kill' });
    expect(r.acknowledgedWrites).toBeGreaterThan(20);
    expect(r.lostWrites).toBe(0);
    expect(r.doubleFences).toBe(0);
    expect(r.backwardFences).toBe(0);
    expect(r.resurrectedTokens).toBe(0);
    expect(r.slotsTwice).toBe(0);
    expect(r.twoBelieversAllMs).toBe(0);
  });

  it('synchronous replication, primary frozen: the live holder keeps its lease and nobody else believes they hold it (0 ms of two believers)', async () => {
    const r = await scenario('sync-freeze', { mode: 'sync', fault: 'freeze' });
    expect(r.lostWrites).toBe(0);
    expect(r.doubleFences).toBe(0);
    expect(r.backwardFences).toBe(0);
    expect(r.resurrectedTokens).toBe(0);
    expect(r.slotsTwice).toBe(0);
    expect(r.twoBelieversHeldMs).toBe(0);
    expect(r.twoBelieversAllMs).toBe(0);
  });

  // With asynchronous replication the newest acknowledged commits are lost (docs/high-availability.md):
  // work under a lost grant may run again, under a new fence, and a lost slot claim may be
  // claimed again, under the same idempotency key. Fences, tokens and live holders stay safe.
  it('asynchronous replication held back, primary killed: grants are lost, yet no fence repeats or goes back and no dead token is accepted', async () => {
    const r = await scenario('async-kill', { mode: 'async', fault: 'kill' });
    expect(r.lostWrites).toBeGreaterThan(0); // the hold-back worked
    expect(r.doubleFences).toBe(0);
    expect(r.backwardFences).toBe(0);
    expect(r.resurrectedTokens).toBe(0);
    expect(r.slotsTwiceDifferentKeys).toBe(0);
    expect(r.twoBelieversHeldMs).toBe(0);
  });

  it('asynchronous replication held back, primary frozen: no fence repeats or goes back, no dead token is accepted, the live holder is not replaced', async () => {
    const r = await scenario('async-freeze', { mode: 'async', fault: 'freeze' });
    expect(r.lostWrites).toBeGreaterThan(0);
    expect(r.doubleFences).toBe(0);
    expect(r.backwardFences).toBe(0);
    expect(r.resurrectedTokens).toBe(0);
    expect(r.slotsTwiceDifferentKeys).toBe(0);
    expect(r.twoBelieversHeldMs).toBe(0);
  });

  it('the checks can fail: with the epoch cut out of the fence and of assert_lease, the same run finds fences twice and resurrected tokens', async () => {
    const r = await scenario('mutant-no-epoch', { mode: 'async', fault: 'kill', mutants: ['fence-without-epoch', 'epoch-not-checked'] });
    expect(r.lostWrites).toBeGreaterThan(0);
    expect(r.doubleFences).toBeGreaterThan(0);
    expect(r.backwardFences).toBeGreaterThan(0);
    // the three leases released during the hold-back
    expect(r.resurrectedTokens).toBeGreaterThanOrEqual(3);
  });
});
