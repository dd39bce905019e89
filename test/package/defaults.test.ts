// The defaults-and-limits tables are the one source of every default: the JSDoc `@default` on
// the public option types must state the table's value, the CLI's --help must show it, and
// docs/options.md is generated from them (test/package/options-reference.test.ts).
import { readFileSync } from 'node:fs';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { buildProgram } from '../../src/cli/program.js';
import { DASHBOARD_CLI_DEFAULTS, EXEC_DEFAULTS, RUNS_DEFAULTS, SCHEDULE_DEFAULTS, WORKER_CLI_DEFAULTS } from '../../src/cli/defaults.js';
import { DASHBOARD_ACTION_DEFAULTS, DASHBOARD_DEFAULTS } from '../../src/dashboard/defaults.js';
import { ACQUIRE_DEFAULTS, BACKFILL_DEFAULTS, LEASEHOLD_DEFAULTS, REQUEST_WAIT_DEFAULTS } from '../../src/lease/defaults.js';
import { READ_DEFAULTS } from '../../src/monitor/defaults.js';
import { formatDuration } from '../../src/validate/duration.js';
import { JOB_DEFAULTS } from '../../src/job/defaults.js';
import { WORKER_DEFAULTS } from '../../src/worker/defaults.js';
import { CONTROL_DEFAULTS } from '../../src/control/defaults.js';

type Literal = string | number | boolean;

/** The `@default` text of each property of `interfaceName` (nested type literals as `outer.inner`). */
function documentedDefaults(file: string, interfaceName: string, text = readFileSync(new URL(`../../src/${file}`, import.meta.url), 'utf8')): Map<string, string> {
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found = new Map<string, string>();
  const collect = (members: ts.NodeArray<ts.TypeElement>, prefix: string) => {
    for (const member of members) {
      if (!ts.isPropertySignature(member) || !member.name) continue;
      const name = `${prefix}${member.name.getText(source)}`;
      for (const tag of ts.getJSDocTags(member)) {
        if (tag.tagName.text !== 'default') continue;
        const comment = typeof tag.comment === 'string' ? tag.comment : ts.getTextOfJSDocComment(tag.comment) ?? '';
        found.set(name, comment.trim());
      }
      if (member.type && ts.isTypeLiteralNode(member.type)) collect(member.type.members, `${name}.`);
    }
  };
  let seen = false;
  source.forEachChild((node) => {
    if (ts.isInterfaceDeclaration(node) && node.name.text === interfaceName) {
      seen = true;
      collect(node.members, '');
    }
  });
  if (!seen) throw new Error(`interface ${interfaceName} not found in src/${file}`);
  return found;
}

/** How a value is written in a `@default` tag: strings quoted, numbers and booleans bare. */
function written(value: Literal): string {
  return typeof value === 'string' ? `'${value}'` : String(value);
}

/** A `@default` that states a value (rather than describing one, like "ttl / 3"). */
const LITERAL = /^(?:'[^']*'|-?\d[\d_.]*|true|false)(?=$|[\s;(,])/;

// Each public options type, the file it is declared in, and its table (option -> default).
const TABLES: Array<{ file: string; type: string; defaults: Record<string, Literal> }> = [
  {
    file: 'lease/types.ts',
    type: 'LeaseholdOptions',
    defaults: {
      queryTimeout: LEASEHOLD_DEFAULTS.queryTimeout.default,
      connectTimeout: LEASEHOLD_DEFAULTS.connectTimeout.default,
      poolSize: LEASEHOLD_DEFAULTS.poolSize.default,
      migrate: LEASEHOLD_DEFAULTS.migrate.default,
      liveness: LEASEHOLD_DEFAULTS.liveness.default,
    },
  },
  { file: 'lease/types.ts', type: 'AcquireOptions', defaults: { heartbeat: ACQUIRE_DEFAULTS.heartbeat.default } },
  { file: 'lease/types.ts', type: 'RunOptions', defaults: { history: ACQUIRE_DEFAULTS.history.default } },
  { file: 'control/manual-runs.ts', type: 'BackfillOptions', defaults: { max: BACKFILL_DEFAULTS.max.default, dryRun: false } },
  { file: 'control/manual-runs.ts', type: 'WaitForRequestOptions', defaults: { timeout: REQUEST_WAIT_DEFAULTS.timeout.default } },
  {
    file: 'worker/worker.ts',
    type: 'WorkerOptions',
    defaults: {
      shutdownGrace: WORKER_DEFAULTS.shutdownGrace.default,
      handleSignals: WORKER_DEFAULTS.handleSignals.default,
      notifications: WORKER_DEFAULTS.notifications.default,
      historyRetention: WORKER_DEFAULTS.historyRetention.default,
      clockSyncInterval: WORKER_DEFAULTS.clockSyncInterval.default,
      scheduleRefresh: WORKER_DEFAULTS.scheduleRefresh.default,
      claimAhead: WORKER_DEFAULTS.claimAhead.default,
    },
  },
  {
    file: 'control/schedules.ts',
    type: 'ScheduleOptions',
    defaults: {
      ttl: JOB_DEFAULTS.ttl.default,
      overlap: JOB_DEFAULTS.overlap.default,
      bufferLimit: JOB_DEFAULTS.bufferLimit.default,
      catchUp: JOB_DEFAULTS.catchUp.default,
    },
  },
  { file: 'control/pause.ts', type: 'PauseOptions', defaults: { stopRunning: CONTROL_DEFAULTS.stopRunning.default } },
  {
    file: 'job/job.ts',
    type: 'JobOptions',
    defaults: {
      ttl: JOB_DEFAULTS.ttl.default,
      overlap: JOB_DEFAULTS.overlap.default,
      bufferLimit: JOB_DEFAULTS.bufferLimit.default,
      catchUp: JOB_DEFAULTS.catchUp.default,
      jitter: JOB_DEFAULTS.jitter.default,
      'retry.attempts': JOB_DEFAULTS.retryAttempts.default,
      'retry.delay': JOB_DEFAULTS.retryDelay.default,
    },
  },
  {
    file: 'dashboard/server.ts',
    type: 'DashboardOptions',
    defaults: {
      port: DASHBOARD_DEFAULTS.port.default,
      host: DASHBOARD_DEFAULTS.host.default,
      refresh: DASHBOARD_DEFAULTS.refresh.default,
      queryTimeout: DASHBOARD_DEFAULTS.queryTimeout.default,
      maxConcurrentQueries: DASHBOARD_DEFAULTS.maxConcurrentQueries.default,
    },
  },
  {
    file: 'dashboard/action-options.ts',
    type: 'DashboardActionsOptions',
    defaults: { sessionTtl: DASHBOARD_ACTION_DEFAULTS.sessionTtl.default, secureCookie: DASHBOARD_ACTION_DEFAULTS.secureCookie.default },
  },
  { file: 'dashboard/action-options.ts', type: 'DashboardProxyOptions', defaults: { userHeader: DASHBOARD_ACTION_DEFAULTS.userHeader.default } },
  { file: 'monitor/status.ts', type: 'ReadOptions', defaults: { timeout: READ_DEFAULTS.timeout.default } },
];

/** Where the documented defaults and the table disagree, one line each. */
function mismatches(type: string, documented: Map<string, string>, defaults: Record<string, Literal>): string[] {
  const found: string[] = [];
  for (const [option, value] of Object.entries(defaults)) {
    const text = documented.get(option);
    if (text === undefined) found.push(`${type}.${option} has no @default (the table says ${written(value)})`);
    else if (text.match(LITERAL)?.[0] !== written(value)) found.push(`${type}.${option}: @default ${text}, the table says ${written(value)}`);
  }
  // and no value is stated in a @default that the table does not hold
  for (const [option, text] of documented) {
    if (LITERAL.test(text) && !(option in defaults)) found.push(`${type}.${option}: @default ${text} is not in the table`);
  }
  return found;
}

describe('the JSDoc @default of every public option states its table value', () => {
  for (const { file, type, defaults } of TABLES) {
    it(`${type} (src/${file})`, () => {
      expect(mismatches(type, documentedDefaults(file, type), defaults)).toEqual([]);
    });
  }

  it('notices a @default that disagrees with its table, is missing, or has no table entry', () => {
    const source = `export interface Options {
      /** A timeout. @default '6s' */
      timeout?: string;
      /** A size. */
      size?: number;
      /** A nested one. */
      retry?: {
        /** @default 3 (three attempts) */
        attempts: number;
      };
    }`;
    const documented = documentedDefaults('synthetic.ts', 'Options', source);
    expect(documented.get('retry.attempts')).toBe('3 (three attempts)');
    expect(mismatches('Options', documented, { timeout: '5s', size: 10 })).toEqual([
      "Options.timeout: @default '6s', the table says '5s'",
      'Options.size has no @default (the table says 10)',
      'Options.retry.attempts: @default 3 (three attempts) is not in the table',
    ]);
  });
});

/** `'30s'`, `true`, 10 or `127.0.0.1` as the bare value. */
const bare = (cell: string) => cell.replace(/`/g, '').replace(/^'(.*)'$/, '$1');

// The docs' option reference (docs/options.md) is generated from these tables:
// test/package/options-reference.test.ts checks it.

/** A subcommand's --help, as `leasehold ... --help` prints it. */
function help(...path: string[]): string {
  let command = buildProgram({ out: () => undefined, err: () => undefined, exit: () => undefined });
  for (const name of path) command = command.commands.find((c) => c.name() === name)!;
  // commander wraps long lines; join them so that an option's text reads as one line
  return command.helpInformation().replace(/\n\s{20,}/g, ' ');
}

/** The help line of `flag`, checked to show `value` as its default. */
function expectDefault(text: string, flag: string, value: Literal): string {
  const line = text.split('\n').find((l) => l.trimStart().startsWith(flag));
  expect(line, `${flag} in help`).toBeDefined();
  expect(line).toContain(`(default: ${JSON.stringify(String(value))})`);
  return line!;
}

describe('the CLI help shows the tables’ defaults and bounds', () => {
  it('exec', () => {
    const text = help('exec');
    expect(expectDefault(text, '--ttl', EXEC_DEFAULTS.ttl.default)).toContain(`(${formatDuration(EXEC_DEFAULTS.ttl.minMs)} to ${formatDuration(EXEC_DEFAULTS.ttl.maxMs)})`);
    // the TTL bounds are the lease's own, not a copy
    expect(EXEC_DEFAULTS.ttl.minMs).toBe(ACQUIRE_DEFAULTS.ttl.minMs);
    expect(EXEC_DEFAULTS.ttl.maxMs).toBe(ACQUIRE_DEFAULTS.ttl.maxMs);
    expectDefault(text, '--grace', EXEC_DEFAULTS.grace.default);
    expectDefault(text, '--skipped-exit-code', EXEC_DEFAULTS.skippedExitCode.default);
    // and docs/cli.md's table of exec's options says the same
    const page = readFileSync(new URL('../../docs/cli.md', import.meta.url), 'utf8');
    const cell = (flag: string) => bare(page.match(new RegExp(`^\\| \`${flag} [^|]*\\| ([^|]+) \\|`, 'm'))?.[1]?.trim() ?? 'missing');
    expect(cell('--ttl')).toBe(EXEC_DEFAULTS.ttl.default);
    expect(cell('--grace')).toBe(EXEC_DEFAULTS.grace.default);
    expect(cell('--skipped-exit-code')).toBe(String(EXEC_DEFAULTS.skippedExitCode.default));
  });

  it('worker: the grace is startWorker’s shutdownGrace', () => {
    const text = help('worker');
    expect(WORKER_CLI_DEFAULTS.grace).toBe(WORKER_DEFAULTS.shutdownGrace);
    expectDefault(text, '--grace', WORKER_DEFAULTS.shutdownGrace.default);
    expectDefault(text, '--metrics-host', WORKER_CLI_DEFAULTS.metricsHost.default);
  });

  it('dashboard: the values are startDashboard’s', () => {
    const text = help('dashboard');
    expectDefault(text, '--port', DASHBOARD_DEFAULTS.port.default);
    expectDefault(text, '--host', DASHBOARD_DEFAULTS.host.default);
    expectDefault(text, '--refresh', DASHBOARD_DEFAULTS.refresh.default);
    expectDefault(text, '--query-timeout', DASHBOARD_DEFAULTS.queryTimeout.default);
    expect(DASHBOARD_CLI_DEFAULTS.refresh).toBe(DASHBOARD_DEFAULTS.refresh);
    expectDefault(text, '--session-ttl', DASHBOARD_ACTION_DEFAULTS.sessionTtl.default);
    expectDefault(text, '--user-header', DASHBOARD_ACTION_DEFAULTS.userHeader.default);
  });

  it('runs and schedule preview', () => {
    expectDefault(help('runs'), '--limit', RUNS_DEFAULTS.limit.default);
    const preview = help('schedule', 'preview');
    expectDefault(preview, '--count', SCHEDULE_DEFAULTS.count.default);
    expectDefault(preview, '--tz', SCHEDULE_DEFAULTS.tz.default);
  });

  it('run-now and backfill', () => {
    expectDefault(help('run-now'), '--timeout', REQUEST_WAIT_DEFAULTS.timeout.default);
    expectDefault(help('backfill'), '--max', BACKFILL_DEFAULTS.max.default);
  });
});
