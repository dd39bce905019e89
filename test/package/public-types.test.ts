// What the published declarations show a user: the .d.ts files the build emits for the
// package's entry points, read with the TypeScript compiler. They must export exactly the
// documented API (the allow-lists below), and nothing reachable from it may be marked
// @internal, be typed `any`, or be a library type the entry points do not export (a public
// signature that mentions an internal type publishes that type).
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

const ROOT = fileURLToPath(new URL('../../', import.meta.url));
const TSC = join(ROOT, 'node_modules/typescript/bin/tsc');

/** The API each entry point of package.json's "exports" offers (README, docs/ and the JSDoc of these exports describe it). */
const ALLOWED: Record<string, string[]> = {
  // what a user of the client, the scheduler or leased() needs, and the errors a caller catches
  '.': [
    'createLeasehold', 'Leasehold', 'LeaseholdOptions', 'ConnectionOptions', 'ReplicationReport',
    'AcquireOptions', 'AcquireResult', 'NotAcquired', 'SkipReason', 'LeaseStatus', 'RunOptions', 'RunContext', 'RunResult', 'ForceReleaseOptions',
    'Lease', 'TransactionOptions',
    'startWorker', 'Worker', 'WorkerOptions', 'defineJob', 'JobOptions', 'JobDefinition', 'JobContext', 'CatchUpPolicy', 'OverlapPolicy',
    'RunTrigger', 'RunOutcome', 'RunState', 'DataJobContext', 'DataJobHandler', 'HandlerWrapper', 'RunReport',
    'leased', 'LeasedFunction', 'LeasedOptions', 'LeasedResult', 'LeasedSkipReason',
    'parseSchedule', 'slotsBetween', 'Schedule', 'ScheduleSpec',
    'LeaseholdEvents', 'LeaseInfo', 'SkipInfo', 'silentLogger', 'stderrLogger', 'Logger', 'LogLevel', 'JobLogger', 'JobLogFn', 'Duration',
    'LeaseholdError', 'InvalidArgumentError', 'LeaseLostError', 'DatabaseUnavailableError', 'OutcomeUnknownError', 'TransactionFailedError',
    'RunTimeoutError', 'ShutdownError', 'PermissionDeniedError', 'SchemaVersionError',
  ],
  './errors': [
    'LeaseholdError', 'LeaseholdErrorCode', 'InvalidArgumentError', 'LeaseLostError', 'LeaseLostReason', 'SchemaVersionError', 'PermissionDeniedError',
    'DatabaseUnavailableError', 'DatabaseUnavailableReason', 'DatabaseReadOnlyError', 'OutcomeUnknownError', 'TransactionFailedError', 'TransactionFailure',
    'TransactionControlError', 'ClosedError', 'ShutdownError', 'RunTimeoutError', 'FenceRangeError', 'ScheduleDefinitionError',
  ],
  './control': [
    'JobControl', 'BackfillOptions', 'BackfillResult', 'RunNowOptions', 'RunRequest', 'WaitForRequestOptions', 'DefineResult', 'ScheduleInfo',
    'ScheduleOptions', 'PauseOptions', 'PauseResult', 'ResumeOptions', 'ResumeResult',
  ],
  './monitor': [
    'jobStatus', 'jobHistory', 'jobTimeline', 'unscheduledLeases', 'CREEP_WARNING_RATIO', 'JobStatus', 'HistoryEntry', 'JobTimeline', 'TimelineRun',
    'TimelineSkip', 'TimelineMissed', 'UnscheduledLease', 'ReadOptions', 'createMetrics', 'EventSource', 'LeaseholdMetrics', 'MetricsOptions',
    'workerHealth', 'HealthCheck', 'HealthReport', 'WorkerHealth', 'EndpointReply',
  ],
  './dashboard': ['startDashboard', 'Dashboard', 'DashboardOptions', 'MetricsSource', 'DashboardActionsOptions', 'DashboardProxyOptions', 'DashboardUser', 'hashPassword'],
  './schema': ['migrate', 'migrations', 'latestVersion', 'schemaVersion', 'checkSchema', 'installScript', 'Migration', 'MigrationResult'],
  './opentelemetry': ['InstrumentOptions', 'Instrumentable', 'instrument'],
  './nestjs': [
    'LEASEHOLD_CLIENT', 'LeaseContext', 'Leased', 'LeasedContext', 'LeasedMethodOptions', 'LeaseholdJob', 'LeaseholdJobOptions', 'LeaseholdModule',
    'LeaseholdModuleAsyncOptions', 'LeaseholdModuleOptions', 'nestLogger',
  ],
  './testing': ['EmbeddedPostgres', 'EmbeddedPostgresOptions', 'createTestDatabase', 'freePort', 'startEmbeddedPostgres'],
};

/** What the root (`leasehold`) may grow to: a user reads its list in one sitting (issue 28). */
const ROOT_LIMITS = { names: 61, values: 25 };

let out: string;
let program: ts.Program;
const entries: Record<string, string> = {};

beforeAll(async () => {
  out = await mkdtemp(join(tmpdir(), 'leasehold-dts-'));
  // the declarations exactly as `npm run build` emits them (tsconfig.build.json), into a scratch directory
  await promisify(execFile)(process.execPath, [TSC, '-p', join(ROOT, 'tsconfig.build.json'), '--emitDeclarationOnly', '--outDir', out], { cwd: ROOT });
  const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { exports: Record<string, { import?: { types: string } } | string> };
  for (const [entry, target] of Object.entries(pkg.exports)) {
    if (typeof target === 'string' || !target.import) continue;
    entries[entry] = join(out, relative('dist', target.import.types));
  }
  program = ts.createProgram(Object.values(entries), { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, types: ['node'], skipLibCheck: true });
}, 120_000);

afterAll(async () => {
  if (out) await rm(out, { recursive: true, force: true });
});

const resolve = (checker: ts.TypeChecker, symbol: ts.Symbol) => (symbol.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(symbol) : symbol);

function exportsOf(program: ts.Program, file: string): ts.Symbol[] {
  const source = program.getSourceFile(file);
  const symbol = source && program.getTypeChecker().getSymbolAtLocation(source);
  if (!symbol) throw new Error(`no declarations in ${file}`);
  return program.getTypeChecker().getExportsOfModule(symbol);
}

/**
 * Walks every declaration of the library (files under `dir`) reachable from the exports of
 * `entryFiles`: what is wrong with them, and the library types reached that no entry exports.
 */
function walk(program: ts.Program, entryFiles: string[], dir: string): { problems: string[]; leaked: string[] } {
  const checker = program.getTypeChecker();
  const where = (node: ts.Node) => {
    const file = node.getSourceFile();
    return `${relative(dir, file.fileName)}:${file.getLineAndCharacterOfPosition(node.getStart()).line + 1}`;
  };
  const exported = new Set<ts.Symbol>(entryFiles.flatMap((file) => exportsOf(program, file).map((symbol) => resolve(checker, symbol))));
  const problems: string[] = [];
  const leaked: string[] = [];
  const queue: ts.Symbol[] = [...exported];
  const seen = new Set<ts.Symbol>();
  while (queue.length > 0) {
    const symbol = queue.pop()!;
    if (seen.has(symbol) || symbol.flags & ts.SymbolFlags.TypeParameter) continue;
    seen.add(symbol);
    for (const declaration of symbol.declarations ?? []) {
      if (!declaration.getSourceFile().fileName.startsWith(dir)) continue;
      if (!exported.has(symbol)) leaked.push(`${symbol.name} (${where(declaration)})`);
      const visit = (node: ts.Node): void => {
        // private members are emitted without types: nothing of them is published
        if (ts.canHaveModifiers(node) && ts.getModifiers(node)?.some((m) => m.kind === ts.SyntaxKind.PrivateKeyword)) return;
        if (ts.getJSDocTags(node).some((tag) => tag.tagName.text === 'internal')) problems.push(`@internal: ${where(node)}`);
        if (node.kind === ts.SyntaxKind.AnyKeyword) problems.push(`any: ${where(node)}`);
        const name = ts.isTypeReferenceNode(node) ? node.typeName : ts.isTypeQueryNode(node) ? node.exprName : ts.isExpressionWithTypeArguments(node) ? node.expression : undefined;
        const target = name && checker.getSymbolAtLocation(name);
        if (target) queue.push(resolve(checker, target));
        ts.forEachChild(node, visit);
      };
      visit(declaration);
    }
  }
  return { problems, leaked };
}

describe('the published declarations', () => {
  it('export exactly the documented API from each entry point', () => {
    expect(Object.keys(entries).sort()).toEqual(Object.keys(ALLOWED).sort());
    for (const [entry, allowed] of Object.entries(ALLOWED)) {
      const names = exportsOf(program, entries[entry]!).map((symbol) => symbol.name).sort();
      expect(names, `exports of "${entry}"`).toEqual([...allowed].sort());
    }
  });

  it(`keep the root small: at most ${ROOT_LIMITS.names} names, ${ROOT_LIMITS.values} of them runtime values`, async () => {
    const names = exportsOf(program, entries['.']!).map((symbol) => symbol.name);
    // the values are what `import * as leasehold from 'leasehold'` holds at run time
    const values = Object.keys(await import('../../src/index.js'));
    expect(names.length, names.join(', ')).toBeLessThanOrEqual(ROOT_LIMITS.names);
    expect(values.length, values.join(', ')).toBeLessThanOrEqual(ROOT_LIMITS.values);
    expect(values.every((value) => names.includes(value))).toBe(true);
  });

  it('show nothing @internal, no `any`, and no library type the entry points do not export', () => {
    expect(walk(program, Object.values(entries), out)).toEqual({ problems: [], leaked: [] });
  });

  it('take an option set to undefined under exactOptionalPropertyTypes (an environment variable that may be unset)', async () => {
    const consumer = join(out, 'exact-consumer.ts');
    const from = (entry: string) => `./${relative(out, entries[entry]!).replace(/\.d\.ts$/, '.js')}`;
    await writeFile(
      consumer,
      [
        `import type { AcquireOptions, JobOptions, LeasedOptions, LeaseholdOptions, RunOptions, TransactionOptions, WorkerOptions } from '${from('.')}';`,
        `import type { ScheduleOptions } from '${from('./control')}';`,
        `import type { MetricsOptions } from '${from('./monitor')}';`,
        `import type { DashboardOptions } from '${from('./dashboard')}';`,
        `import type { EmbeddedPostgresOptions } from '${from('./testing')}';`,
        'declare const env: Record<string, string | undefined>;',
        'export const client: LeaseholdOptions = { connectionString: env.DATABASE_URL, holder: env.HOLDER, queryTimeout: env.TIMEOUT };',
        "export const worker: WorkerOptions = { connectionString: env.DATABASE_URL, holder: env.HOLDER, jobs: [], claimAhead: env.AHEAD, shutdownGrace: undefined };",
        "export const job: JobOptions = { name: 'j', every: env.EVERY, cron: undefined, timezone: env.TZ, ttl: undefined, handler: async () => undefined };",
        "export const acquire: AcquireOptions = { ttl: '30s', heartbeat: undefined, heartbeatInterval: env.BEAT, slot: undefined };",
        "export const run: RunOptions = { ttl: '30s', history: undefined, heartbeatInterval: env.BEAT };",
        'export const transaction: TransactionOptions = { idleTimeout: env.IDLE, statementTimeout: undefined };',
        "export const guard: LeasedOptions = { name: 'g', cron: env.CRON, every: undefined, timezone: env.TZ };",
        "export const schedule: ScheduleOptions = { name: 's', handler: 'h', by: 'me', every: env.EVERY, timezone: env.TZ };",
        'export const metrics: MetricsOptions = { prefix: env.PREFIX };',
        'declare const pool: DashboardOptions[\'pool\'];',
        'export const dashboard: DashboardOptions = { pool, port: undefined, host: env.HOST };',
        'export const embedded: EmbeddedPostgresOptions = { port: undefined };',
        // the flag is on: a type of this file without `| undefined` refuses it
        'declare const strictOnly: { x?: string };',
        '// @ts-expect-error exactOptionalPropertyTypes',
        'export const refused: typeof strictOnly = { x: env.X };',
        '',
      ].join('\n'),
    );
    const program = ts.createProgram([consumer], {
      strict: true,
      exactOptionalPropertyTypes: true,
      noEmit: true,
      module: ts.ModuleKind.NodeNext,
      moduleResolution: ts.ModuleResolutionKind.NodeNext,
      skipLibCheck: true,
      types: [],
    });
    const errors = ts.getPreEmitDiagnostics(program).map((d) => `${d.file ? d.file.getLineAndCharacterOfPosition(d.start ?? 0).line + 1 : '?'}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`);
    expect(errors).toEqual([]);
  });

  it('can fail: an @internal member, an `any` and an internal type in a public signature are all found', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'leasehold-dts-probe-'));
    try {
      await writeFile(join(dir, 'inner.d.ts'), 'export interface Inner {\n  secret: string;\n}\n');
      await writeFile(
        join(dir, 'index.d.ts'),
        "import type { Inner } from './inner.js';\nexport declare class Probe {\n  /** @internal */\n  hidden(): void;\n  loose: any;\n  inner(): Inner;\n  private ok;\n}\n",
      );
      const probe = ts.createProgram([join(dir, 'index.d.ts')], { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext, types: [] });
      expect(walk(probe, [join(dir, 'index.d.ts')], dir)).toEqual({ problems: ['@internal: index.d.ts:4', 'any: index.d.ts:5'], leaked: ['Inner (inner.d.ts:1)'] });
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
