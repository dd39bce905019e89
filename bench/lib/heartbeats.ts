// The heartbeats part: renewal statements per minute for many running leases held by one
// client, with the shared heartbeat (one leasehold.renew_leases statement per beat) against the
// baseline measured in the same run: one renew_leases statement per lease every ttl/3, each
// lease on its own timer (what the client did before, written out here with Lease.renew()).
// Statements are counted where they leave: every renewal checks a connection out of the client's
// renew pool once. The server's committed transactions over the window are reported too.
import os from 'node:os';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { createLeasehold, silentLogger, type Lease, type Leasehold } from '../../src/index.js';
import { trackerOf } from '../../src/lease/tracker.js';
import { round } from './stats.js';
import type { Table } from './table.js';

export interface HeartbeatSettings {
  leases: number;
  ttlMs: number;
  windowSeconds: number;
}

export interface HeartbeatMode {
  mode: 'per-lease (baseline)' | 'shared heartbeat';
  /** Renewal statements the client sent in the window, scaled to one minute. */
  statementsPerMinute: number;
  /** Lease renewals confirmed in the window, scaled to one minute. */
  renewalsPerMinute: number;
  /** Transactions the server committed in the bench database in the window, scaled to one minute. */
  serverCommitsPerMinute: number;
  /** Client process CPU (user + system) in the window, ms per minute. */
  clientCpuMsPerMinute: number;
  lost: number;
  loadAverage: number[];
}

export interface HeartbeatResults {
  settings: HeartbeatSettings;
  modes: HeartbeatMode[];
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

async function acquireAll(leasehold: Leasehold, settings: HeartbeatSettings, heartbeat: boolean): Promise<Lease[]> {
  const leases: Lease[] = [];
  for (let start = 0; start < settings.leases; start += 50) {
    const batch = Array.from({ length: Math.min(50, settings.leases - start) }, (_, i) =>
      leasehold.acquire(`heartbeat-bench-${start + i}`, { ttl: settings.ttlMs, heartbeat }),
    );
    for (const result of await Promise.all(batch)) {
      if (!result.acquired) throw new Error(`heartbeat bench: ${result.name} was not acquired (${result.reason})`);
      leases.push(result.lease);
    }
  }
  return leases;
}

/** The baseline: each lease renewed by its own timer, one statement per lease every ttl/3. */
function perLeaseHeartbeats(leases: Lease[], intervalMs: number): () => void {
  const timers = new Set<NodeJS.Timeout>();
  let stopped = false;
  const beat = (lease: Lease) => {
    const timer = setTimeout(() => {
      timers.delete(timer);
      void lease
        .renew()
        .catch(() => undefined)
        .finally(() => {
          if (!stopped && !lease.lost && !lease.released) beat(lease);
        });
    }, intervalMs);
    timers.add(timer);
  };
  leases.forEach(beat);
  return () => {
    stopped = true;
    timers.forEach((timer) => clearTimeout(timer));
  };
}

async function commits(admin: pg.Client): Promise<number> {
  const { rows } = await admin.query<{ n: string }>(`select pg_stat_get_db_xact_commit(oid)::text as n from pg_database where datname = current_database()`);
  return Number(rows[0]?.n ?? 0);
}

async function measureMode(url: string, settings: HeartbeatSettings, mode: HeartbeatMode['mode']): Promise<HeartbeatMode> {
  const leasehold = await createLeasehold({ connectionString: url, logger: silentLogger(), holder: `heartbeat-bench-${mode === 'shared heartbeat' ? 'shared' : 'baseline'}` });
  const admin = new pg.Client({ connectionString: url });
  await admin.connect();
  try {
    const shared = mode === 'shared heartbeat';
    const leases = await acquireAll(leasehold, settings, shared);
    const stopBaseline = shared ? () => undefined : perLeaseHeartbeats(leases, settings.ttlMs / 3);
    let statements = 0;
    let renewals = 0;
    trackerOf(leasehold).runtime.renewPool.on('acquire', () => statements++);
    leasehold.on('lease:renewed', () => renewals++);
    // one interval to settle (the baseline's timers start where the acquisitions were), then the window
    await sleep(settings.ttlMs / 3);
    statements = 0;
    renewals = 0;
    const commitsBefore = await commits(admin);
    const cpuBefore = process.cpuUsage();
    const started = performance.now();
    await sleep(settings.windowSeconds * 1000);
    const minutes = (performance.now() - started) / 60_000;
    const cpu = process.cpuUsage(cpuBefore);
    const measured = { statements, renewals };
    const commitsAfter = await commits(admin);
    stopBaseline();
    return {
      mode,
      statementsPerMinute: round(measured.statements / minutes, 1),
      renewalsPerMinute: round(measured.renewals / minutes, 0),
      serverCommitsPerMinute: round((commitsAfter - commitsBefore) / minutes, 0),
      clientCpuMsPerMinute: round((cpu.user + cpu.system) / 1000 / minutes, 0),
      lost: leases.filter((lease) => lease.lost).length,
      loadAverage: os.loadavg().map((n) => round(n, 2)),
    };
  } finally {
    await admin.end();
    await leasehold.close();
  }
}

export async function measureHeartbeats(url: string, settings: HeartbeatSettings, progress: (message: string) => void): Promise<HeartbeatResults> {
  const modes: HeartbeatMode[] = [];
  for (const mode of ['per-lease (baseline)', 'shared heartbeat'] as const) {
    progress(`heartbeats: ${settings.leases} leases, ttl ${settings.ttlMs} ms, ${mode}, ${settings.windowSeconds} s`);
    modes.push(await measureMode(url, settings, mode));
  }
  return { settings, modes };
}

export function heartbeatTable(results: HeartbeatResults): Table {
  const baseline = results.modes[0];
  return {
    align: ['l', 'r', 'r', 'r', 'r', 'r', 'r', 'l'],
    headers: ['heartbeat', 'renewal statements/min', 'vs baseline', 'renewals/min', 'server commits/min', 'client CPU ms/min', 'leases lost', 'load (1 5 15 min)'],
    rows: results.modes.map((m) => [
      m.mode,
      m.statementsPerMinute.toLocaleString('en-US'),
      baseline && baseline.statementsPerMinute > 0 ? `${(m.statementsPerMinute / baseline.statementsPerMinute).toFixed(4)}x` : 'n/a',
      m.renewalsPerMinute.toLocaleString('en-US'),
      m.serverCommitsPerMinute.toLocaleString('en-US'),
      m.clientCpuMsPerMinute.toLocaleString('en-US'),
      String(m.lost),
      m.loadAverage.join(' '),
    ]),
  };
}

export function heartbeatLines(results: HeartbeatResults, render: (table: Table) => string): string[] {
  const { leases, ttlMs, windowSeconds } = results.settings;
  return [
    `Heartbeats: ${leases.toLocaleString('en-US')} running leases on one client, ttl ${ttlMs} ms (renewed every ${Math.round(ttlMs / 3)} ms), ${windowSeconds} s per mode`,
    render(heartbeatTable(results)),
    '',
  ];
}

/** The design's target: the shared heartbeat's statements do not grow with the number of leases. */
export function heartbeatTargets(results: HeartbeatResults): Array<{ what: string; target: string; measured: string; met: boolean }> {
  const shared = results.modes.find((m) => m.mode === 'shared heartbeat');
  if (!shared) return [];
  const beatsPerMinute = 60_000 / (results.settings.ttlMs / 3);
  return [
    {
      what: `renewal statements per minute, ${results.settings.leases} leases, shared heartbeat`,
      target: `≤ ${Math.ceil(beatsPerMinute) + 2} (one per beat)`,
      measured: `${shared.statementsPerMinute}, ${shared.lost} lost`,
      met: shared.statementsPerMinute <= Math.ceil(beatsPerMinute) + 2 && shared.lost === 0,
    },
  ];
}
