// The acquire part of the report: its target checks, tables and prose (text and markdown).
import { comparisonOf, type ContestedComparison, type PatternComparison } from './contested.js';
import type { PatternId } from './pattern.js';
import type { AcquireResults, BenchSettings, RedisStatus, TargetCheck } from './results.js';
import { renderMarkdown, renderText, type Table } from './table.js';
import type { TakeoverMechanism, TakeoverResult } from './takeover.js';
import type { WalResult } from './wal.js';

const fixed = (value: number, digits: number) => (Number.isFinite(value) ? value.toFixed(digits) : 'n/a');

const times = (value: number) => `${fixed(value, 2)}x`;

const integer = (value: number) => Math.round(value).toLocaleString('en-US');

function takeoverOf(acquire: AcquireResults, mechanism: TakeoverMechanism): TakeoverResult | undefined {
  return acquire.takeover.find((t) => t.mechanism === mechanism);
}

function walOf(acquire: AcquireResults, pattern: PatternId): WalResult | undefined {
  return acquire.wal.find((w) => w.pattern === pattern);
}

export function acquireTargets(results: AcquireResults): TargetCheck[] {
  const checks: TargetCheck[] = [];
  // the goals of the protocol-cost work, against the advisory lock measured in the same run
  for (const comparison of results.contested.comparisons) {
    if (comparison.clients !== 8 && comparison.clients !== 32) continue;
    const leasehold = comparisonOf(comparison, 'leasehold')?.summary;
    const advisory = comparisonOf(comparison, 'advisory')?.summary;
    if (!leasehold || !advisory) continue;
    const share = leasehold.decisionsPerSecond / advisory.decisionsPerSecond;
    checks.push({
      what: `contested decisions/s, leasehold vs advisory lock, ${comparison.clients} clients`,
      target: '>= 50 %',
      measured: `${Math.round(share * 100)} % (${integer(leasehold.decisionsPerSecond)} vs ${integer(advisory.decisionsPerSecond)}/s)`,
      met: share >= 0.5,
    });
    const cpu = leasehold.serverCpuUsPerDecision;
    const cpuAdvisory = advisory.serverCpuUsPerDecision;
    if (cpu !== null && cpuAdvisory) {
      checks.push({
        what: `server CPU per contested decision, leasehold vs advisory lock, ${comparison.clients} clients`,
        target: '<= 2x',
        measured: `${times(cpu / cpuAdvisory)} (${fixed(cpu, 0)} vs ${fixed(cpuAdvisory, 0)} µs)`,
        met: cpu / cpuAdvisory <= 2,
      });
    }
    if (leasehold.walBytesPerDecision !== null) {
      checks.push({
        what: `WAL bytes per contested decision (winners' grants and releases included), ${comparison.clients} clients`,
        target: '<= 5',
        measured: fixed(leasehold.walBytesPerDecision, 1),
        met: leasehold.walBytesPerDecision <= 5,
      });
    }
  }
  const rtPerAcquire = results.contested.comparisons.flatMap((c) => comparisonOf(c, 'leasehold')?.summary.roundTripsPerAcquireDecision ?? []);
  checks.push({
    what: 'leasehold round trips per acquire decision',
    target: '1',
    measured: [...new Set(rtPerAcquire)].join(', '),
    met: rtPerAcquire.length > 0 && rtPerAcquire.every((value) => value === 1),
  });
  const mismatches = results.contested.comparisons.flatMap((c) => c.patterns.map((p) => p.summary.releaseMismatches));
  const mismatchesBy = results.contested.comparisons
    .flatMap((c) => c.patterns.filter((p) => p.summary.releaseMismatches > 0).map((p) => `${p.summary.pattern}×${c.clients}: ${p.summary.releaseMismatches}`))
    .join(', ');
  const totalMismatches = mismatches.reduce((n, m) => n + m, 0);
  checks.push({
    what: 'releases that found their lock taken (overlapping winners), all patterns',
    target: '0',
    measured: totalMismatches === 0 ? '0' : `${totalMismatches} (${mismatchesBy})`,
    met: totalMismatches === 0,
  });
  const walLeasehold = walOf(results, 'leasehold');
  const walClassic = walOf(results, 'classic');
  if (walLeasehold) {
    checks.push({
      what: 'WAL bytes per declined leasehold acquire',
      target: '0',
      measured: `${fixed(walLeasehold.bytesPerDecision, 2)} (classic: ${fixed(walClassic?.bytesPerDecision ?? Number.NaN, 1)})`,
      met: walLeasehold.bytesPerDecision === 0,
    });
  }
  const live = takeoverOf(results, 'leasehold-liveness');
  if (live) {
    checks.push({
      what: `takeover after SIGKILL, leasehold liveness on, TTL ${live.ttl ?? '-'}`,
      target: '< 50 ms (every run)',
      measured: `median ${fixed(live.medianMs, 1)} ms, max ${fixed(live.maxMs, 1)} ms (kill -> child exit seen: median ${fixed(live.medianProcessExitMs, 1)} ms; exit -> acquired: median ${fixed(live.medianAfterExitMs, 1)} ms)`,
      met: live.maxMs < 50,
    });
  }
  const ttlOnly = takeoverOf(results, 'leasehold-ttl');
  if (ttlOnly) {
    const lateness = ttlOnly.runs.flatMap((run) => (run.afterExpiryMs === null ? [] : [run.afterExpiryMs]));
    checks.push({
      what: `takeover after SIGKILL, leasehold liveness off, TTL ${ttlOnly.ttl ?? '-'}: taken when the TTL runs out`,
      target: '0-50 ms after expires_at (DB clock)',
      measured: `${Math.min(...lateness)}..${Math.max(...lateness)} ms after expiry; kill -> acquire median ${fixed(ttlOnly.medianMs, 0)} ms`,
      met: lateness.length === ttlOnly.runs.length && lateness.every((ms) => ms >= 0 && ms <= 50),
    });
  }
  return checks;
}

const PATTERN_LABELS: Record<PatternId, string> = {
  classic: 'classic (baseline)',
  leasehold: 'leasehold',
  advisory: 'advisory lock',
  redis: 'Redis SET NX PX',
};

/** decisions/s and the ratio to classic, e.g. "3,924/s (10.15x)". */
function throughputCell(comparison: PatternComparison | undefined): string {
  if (!comparison) return 'n/a';
  const base = `${integer(comparison.summary.decisionsPerSecond)}/s`;
  return comparison.summary.pattern === 'classic' ? base : `${base} (${times(comparison.ratio)})`;
}

/** The takeover after SIGKILL of a pattern, in one cell. */
function takeoverCell(acquire: AcquireResults, pattern: PatternId): string {
  const ms = (result: TakeoverResult | undefined) => (result ? `${integer(result.medianMs)} ms` : 'n/a');
  switch (pattern) {
    case 'leasehold': {
      const live = takeoverOf(acquire, 'leasehold-liveness');
      const ttl = takeoverOf(acquire, 'leasehold-ttl');
      return `${ms(live)} (liveness); ${ms(ttl)} without it (TTL ${ttl?.ttl ?? '-'})`;
    }
    case 'advisory':
      return `${ms(takeoverOf(acquire, 'advisory'))} (session ends)`;
    case 'redis': {
      const redis = takeoverOf(acquire, 'redis-ttl');
      return `${ms(redis)} (TTL ${redis?.ttl ?? '-'})`;
    }
    case 'classic':
      return 'the TTL left (not measured)';
  }
}

/** The top table: every pattern's throughput at each client count, WAL and xids per declined claim, takeover. */
export function summaryTable(acquire: AcquireResults): Table {
  const counts = acquire.contested.comparisons.map((c) => c.clients);
  const rows = acquire.patterns.map((info) => {
    const wal = walOf(acquire, info.id);
    return [
      PATTERN_LABELS[info.id],
      ...acquire.contested.comparisons.map((c) => throughputCell(comparisonOf(c, info.id))),
      wal ? fixed(wal.bytesPerDecision, 1) : 'n/a',
      wal ? fixed(wal.xidsPerDecision, 2) : 'n/a',
      takeoverCell(acquire, info.id),
    ];
  });
  return {
    headers: ['pattern', ...counts.map((n) => `${n} clients`), 'WAL B/declined', 'xids/declined', 'takeover after SIGKILL (median)'],
    align: ['l', ...counts.map((): 'r' => 'r'), 'r', 'r', 'l'],
    rows,
  };
}

export function guaranteesTable(acquire: AcquireResults): Table {
  return {
    headers: ['pattern', 'one decision', 'guarantees'],
    align: ['l', 'l', 'l'],
    rows: acquire.patterns.map((info) => [PATTERN_LABELS[info.id], info.description, info.guarantees]),
  };
}

function contestedTable(comparisons: readonly ContestedComparison[]): Table {
  const row = (comparison: PatternComparison, clients: number, all: readonly PatternComparison[]): string[] => {
    const { summary } = comparison;
    const classic = summary.pattern === 'classic';
    const advisory = all.find((p) => p.summary.pattern === 'advisory')?.summary;
    const cpu = summary.serverCpuUsPerDecision;
    return [
      String(clients),
      summary.pattern,
      integer(summary.decisionsPerSecond),
      classic ? '1.00x' : times(comparison.ratio),
      classic ? summary.perRound.map(integer).join(' ') : comparison.perRoundRatios.map(times).join(' '),
      fixed(summary.latencyMs.p50, 2),
      fixed(summary.latencyMs.p99, 2),
      integer(summary.decisions),
      integer(summary.wins),
      fixed(summary.roundTripsPerAcquireDecision, 2),
      fixed(summary.roundTripsPerDecision, 2),
      advisory ? `${Math.round((summary.decisionsPerSecond / advisory.decisionsPerSecond) * 100)} %` : '-',
      cpu === null ? '-' : fixed(cpu, 0),
      cpu === null || !advisory?.serverCpuUsPerDecision ? '-' : times(round2(cpu / advisory.serverCpuUsPerDecision)),
      summary.walBytesPerDecision === null ? '-' : fixed(summary.walBytesPerDecision, 1),
    ];
  };
  return {
    headers: [
      'clients', 'pattern', 'decisions/s', 'vs classic', 'per round', 'p50 ms', 'p99 ms', 'decisions', 'wins', 'rt/acquire', 'rt/decision',
      'rate vs advisory', 'server CPU µs/decision', 'CPU vs advisory', 'WAL B/decision',
    ],
    align: ['r', 'l', 'r', 'r', 'l', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r', 'r'],
    rows: comparisons.flatMap((c) => c.patterns.map((p) => row(p, c.clients, c.patterns))),
  };
}

function walTable(wal: readonly WalResult[]): Table {
  const row = (result: WalResult): string[] => [
    result.pattern,
    fixed(result.bytesPerDecision, 2),
    fixed(result.xidsPerDecision, 3),
    fixed(result.msPerDecision, 3),
    result.trials.map((t) => fixed(t.bytesPerDecision, 1)).join(' '),
  ];
  return {
    headers: ['pattern', 'WAL bytes/declined', 'xids/declined', 'ms/declined', 'trials (bytes/declined)'],
    align: ['l', 'r', 'r', 'r', 'l'],
    rows: wal.map(row),
  };
}

function takeoverTable(takeover: readonly TakeoverResult[]): Table {
  const row = (result: TakeoverResult): string[] => [
    result.label,
    result.freedBy,
    result.ttl ?? 'none',
    fixed(result.medianMs, 1),
    fixed(result.maxMs, 1),
    result.runs.map((run) => fixed(run.takeoverMs, 1)).join(' '),
    fixed(result.medianProcessExitMs, 1),
    fixed(result.medianAfterExitMs, 1),
    result.runs.every((run) => run.afterExpiryMs === null) ? '-' : result.runs.map((run) => String(run.afterExpiryMs ?? '-')).join(' '),
  ];
  return {
    headers: ['holder', 'freed by', 'ttl', 'median ms', 'max ms', 'runs (kill -> acquired, ms)', 'kill -> exit seen (median ms)', 'exit -> acquired (median ms)', 'vs expiry (ms)'],
    align: ['l', 'l', 'r', 'r', 'r', 'l', 'r', 'r', 'l'],
    rows: takeover.map(row),
  };
}

function settingsLine(settings: BenchSettings): string {
  return (
    `${settings.cellSeconds} s per cell × ${settings.rounds} round(s), cells interleaved pattern by pattern, ` +
    `order reversed every other round; TTL ${settings.contestedTtl}; winners release at once`
  );
}

export function redisLine(redis: RedisStatus): string {
  return redis.status === 'measured'
    ? `Redis ${redis.version}: a private redis-server started by the benchmark on 127.0.0.1:${redis.port} (persistence off), stopped at the end.`
    : `redis: skipped (${redis.reason}); the Redis rows are left out.`;
}

export function acquireText(acquire: AcquireResults): string[] {
  return [
    `Contested acquire + release on ONE name, independent connections (${settingsLine(acquire.settings)})`,
    'rt = round trips (SQL statements or Redis commands); rt/acquire counts the claim only, rt/decision adds the winners\' releases',
    renderText(contestedTable(acquire.contested.comparisons)),
    '',
    `WAL per DECLINED acquisition: ${acquire.settings.walAttempts} losing claims against a held lock on a quiet server, median of ${acquire.settings.walTrials} trials`,
    renderText(walTable(acquire.wal)),
    '',
    `Takeover after SIGKILL of the holder process: a challenger tries every ~${acquire.settings.pollIntervalMs} ms`,
    renderText(takeoverTable(acquire.takeover)),
    '"kill -> exit seen": the kernel closes a killed process\'s sockets only after tearing down its memory, so no server can see the death earlier',
    '',
  ];
}

export function acquireMarkdown(acquire: AcquireResults): string[] {
  const { settings } = acquire;
  return [
    '## Contested acquire + release on one name',
    '',
    `Independent connections (one \`pg.Client\` or ioredis connection each) loop on one claim decision and, when it wins, an immediate release. ` +
      `${settingsLine(settings)}. "per round" shows classic's decisions/s, and for the others their ratio to classic, of each round. ` +
      'p50/p99 are acquire-call latencies over all rounds; rt = round trips (SQL statements or Redis commands).',
    '',
    renderMarkdown(contestedTable(acquire.contested.comparisons)),
    '',
    '## WAL per declined acquisition',
    '',
    `One connection holds the lease or lock (TTL 1 hour); another makes ${settings.walAttempts} losing claims between two reads of ` +
      `\`pg_current_wal_lsn()\`; median of ${settings.walTrials} trials. xids = transaction ids consumed.`,
    '',
    renderMarkdown(walTable(acquire.wal)),
    '',
    '## Takeover after a SIGKILLed holder',
    '',
    `A holder process takes the lock (leasehold: test/fixtures/holder.ts; advisory lock and Redis: bench/fixtures/lock-holder.ts); ` +
      `a challenger tries every ~${settings.pollIntervalMs} ms; the time runs from SIGKILL to its successful claim. ` +
      '"vs expiry": that claim minus the holder\'s expiry (leasehold: database time vs `expires_at`; Redis: local time vs the `PTTL` read after the holder took it). ' +
      '"kill -> exit seen": the kernel closes a killed process\'s sockets only after tearing down its memory, so no server can notice the death before about then; ' +
      '"exit -> acquired" is the rest, the lock\'s share.',
    '',
    renderMarkdown(takeoverTable(acquire.takeover)),
    '',
  ];
}

const round2 = (value: number): number => Math.round(value * 100) / 100;
