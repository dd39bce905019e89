// docs/options.md, the option reference, rendered from the defaults-and-limits tables
// (src/*/defaults.ts: each default next to its bounds) and the JSDoc of the public option types
// (what each option means, and the `@default` of the options no table holds). The page is
// generated so that a default or a bound is written once: `npm run options-reference` writes it,
// test/package/options-reference.test.ts fails when the committed page differs.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import ts from 'typescript';
import { DASHBOARD_ACTION_DEFAULTS, DASHBOARD_DEFAULTS } from '../src/dashboard/defaults.js';
import { CONTROL_DEFAULTS } from '../src/control/defaults.js';
import { ACQUIRE_DEFAULTS, BACKFILL_DEFAULTS, LEASEHOLD_DEFAULTS, REQUEST_WAIT_DEFAULTS, TRANSACTION_DEFAULTS } from '../src/lease/defaults.js';
import { READ_DEFAULTS } from '../src/monitor/defaults.js';
import { formatDuration } from '../src/validate/duration.js';
import { JOB_DEFAULTS } from '../src/job/defaults.js';
import { WORKER_DEFAULTS } from '../src/worker/defaults.js';

const ROOT = fileURLToPath(new URL('../', import.meta.url));

/** One entry of a defaults table: a default and bounds, each optional. */
export interface Setting {
  readonly default?: string | number | boolean;
  readonly minMs?: number;
  readonly maxMs?: number;
  readonly min?: number;
  readonly max?: number;
}

/** One section of the page: the options type of one entry point, and the table entries of its options. */
export interface Section {
  heading: string;
  /** The exported interface whose properties are the options. */
  type: string;
  /** Option (nested ones as `outer.inner`) -> its table entry. */
  settings: Readonly<Record<string, Setting>>;
  /** Interfaces the type extends whose options this section lists (and later sections link to). */
  alsoDeclares?: readonly string[];
  intro?: string;
}

const JOB_SETTINGS: Record<string, Setting> = {
  ttl: { ...JOB_DEFAULTS.ttl, minMs: JOB_DEFAULTS.scheduledTtlMinMs },
  overlap: JOB_DEFAULTS.overlap,
  bufferLimit: JOB_DEFAULTS.bufferLimit,
  catchUp: JOB_DEFAULTS.catchUp,
  startingDeadline: { minMs: JOB_DEFAULTS.startingDeadline.minMs, maxMs: JOB_DEFAULTS.startingDeadline.maxMs },
  jitter: JOB_DEFAULTS.jitter,
  'retry.attempts': JOB_DEFAULTS.retryAttempts,
  'retry.delay': JOB_DEFAULTS.retryDelay,
  timeout: JOB_DEFAULTS.timeout,
};

export const SECTIONS: readonly Section[] = [
  {
    heading: 'createLeasehold(options)',
    type: 'LeaseholdOptions',
    settings: LEASEHOLD_DEFAULTS,
    alsoDeclares: ['ConnectionOptions'],
  },
  { heading: 'leasehold.acquire(name, options)', type: 'AcquireOptions', settings: { ttl: ACQUIRE_DEFAULTS.ttl, heartbeat: ACQUIRE_DEFAULTS.heartbeat, heartbeatInterval: ACQUIRE_DEFAULTS.heartbeatInterval } },
  { heading: 'leasehold.run(name, options, handler)', type: 'RunOptions', settings: { ttl: ACQUIRE_DEFAULTS.ttl, heartbeatInterval: ACQUIRE_DEFAULTS.heartbeatInterval, history: ACQUIRE_DEFAULTS.history } },
  { heading: 'lease.transaction(fn, options)', type: 'TransactionOptions', settings: TRANSACTION_DEFAULTS },
  { heading: 'leasehold.forceRelease(name, options)', type: 'ForceReleaseOptions', settings: {} },
  {
    heading: 'startWorker(options)',
    type: 'WorkerOptions',
    settings: WORKER_DEFAULTS,
  },
  {
    heading: 'Job options',
    type: 'JobOptions',
    settings: JOB_SETTINGS,
    intro: '`defineJob(options)`, the objects of `startWorker({ jobs })` and `@LeaseholdJob()` (without `name` and `handler`).',
  },
  {
    heading: 'leased(client, options, handler)',
    type: 'LeasedOptions',
    settings: { ...JOB_SETTINGS, shutdownGrace: WORKER_DEFAULTS.shutdownGrace },
  },
  {
    heading: 'leasehold.control.define(options)',
    type: 'ScheduleOptions',
    settings: JOB_SETTINGS,
    intro: 'a job defined as data.',
  },
  { heading: 'leasehold.control.pause(job, options)', type: 'PauseOptions', settings: { stopRunning: CONTROL_DEFAULTS.stopRunning } },
  { heading: 'leasehold.control.resume(job, options)', type: 'ResumeOptions', settings: {} },
  { heading: 'leasehold.control.runNow(job, options)', type: 'RunNowOptions', settings: {} },
  { heading: 'leasehold.control.backfill(job, options)', type: 'BackfillOptions', settings: BACKFILL_DEFAULTS },
  { heading: 'leasehold.control.waitForRequest(id, options)', type: 'WaitForRequestOptions', settings: REQUEST_WAIT_DEFAULTS },
  { heading: 'startDashboard(options)', type: 'DashboardOptions', settings: DASHBOARD_DEFAULTS },
  {
    heading: 'startDashboard actions',
    type: 'DashboardActionsOptions',
    settings: { sessionTtl: DASHBOARD_ACTION_DEFAULTS.sessionTtl, secureCookie: DASHBOARD_ACTION_DEFAULTS.secureCookie },
    intro: 'the `actions` of `startDashboard()`: who may act on jobs from the page ([dashboard.md](dashboard.md#actions)).',
  },
  { heading: 'startDashboard actions.proxy', type: 'DashboardProxyOptions', settings: { userHeader: DASHBOARD_ACTION_DEFAULTS.userHeader } },
  {
    heading: 'Read models',
    type: 'ReadOptions',
    settings: { timeout: READ_DEFAULTS.timeout },
    intro: '`jobStatus(pool, job?, options)`, `jobHistory(pool, { job, ...options })`, `jobTimeline()`.',
  },
  { heading: 'createMetrics(options)', type: 'MetricsOptions', settings: {} },
  { heading: 'instrument(source, options)', type: 'InstrumentOptions', settings: {}, intro: 'From `leasehold/opentelemetry`.' },
  {
    heading: 'LeaseholdModule.forRoot(options)',
    type: 'LeaseholdModuleOptions',
    settings: {
      shutdownGrace: WORKER_DEFAULTS.shutdownGrace,
      historyRetention: WORKER_DEFAULTS.historyRetention,
      clockSyncInterval: WORKER_DEFAULTS.clockSyncInterval,
      claimAhead: WORKER_DEFAULTS.claimAhead,
      scheduleRefresh: WORKER_DEFAULTS.scheduleRefresh,
      notifications: WORKER_DEFAULTS.notifications,
    },
    intro: 'From `leasehold/nestjs`.',
  },
  { heading: 'startEmbeddedPostgres(options)', type: 'EmbeddedPostgresOptions', settings: {}, intro: 'From `leasehold/testing`.' },
];

const INTRO = `# Options

<!-- Generated by \`npm run options-reference\` (scripts/options-reference.ts) from the defaults
tables (src/*/defaults.ts) and the JSDoc of the option types. Do not edit by hand:
test/package/options-reference.test.ts fails when this page is stale. -->

Every option of the library's entry points, with its default and bounds. The \`leasehold\`
command's options are in [cli.md](cli.md).

- **Durations** are milliseconds (a number) or strings: \`'500ms'\`, \`'30s'\`, \`'5m'\`,
  \`'1h30m'\`, \`'1d'\`. A duration is a whole number of milliseconds (\`'4.1m'\` is 246,000 ms;
  \`'0.5ms'\` or \`2500.4\` is refused).
- **Names** (leases, jobs) are 1–200 characters (code points) without control, bidirectional or
  invisible characters.
- **Unknown keys** are refused, naming the closest valid one (\`queryTimout\`: did you mean
  \`queryTimeout\`?). A value out of bounds is an \`InvalidArgumentError\` before anything is sent.
`;

/** Options met without a description while rendering. */
const undescribed: string[] = [];

/** The page. */
export function renderOptionsReference(): string {
  const program = createProgram();
  const checker = program.getTypeChecker();
  const parts = [INTRO];
  undescribed.length = 0;
  for (const section of SECTIONS) parts.push(renderSection(section, program, checker));
  if (undescribed.length > 0) throw new Error(`options without a JSDoc description (the reference needs one): ${undescribed.join(', ')}`);
  return parts.join('\n');
}

function createProgram(): ts.Program {
  const configFile = ts.readConfigFile(`${ROOT}tsconfig.json`, ts.sys.readFile);
  const { options } = ts.parseJsonConfigFileContent(configFile.config, ts.sys, ROOT);
  const roots = ['src/index.ts', 'src/testing.ts', 'src/opentelemetry.ts', 'src/nestjs/index.ts', 'src/dashboard/index.ts', 'src/monitor/index.ts', 'src/control/index.ts', 'src/schema.ts', 'src/errors.ts'].map((file) => `${ROOT}${file}`);
  return ts.createProgram(roots, { ...options, noEmit: true });
}

/** The one interface of that name declared in src/ (found by name, wherever it lives). */
function findInterface(program: ts.Program, name: string): ts.InterfaceDeclaration {
  const found: ts.InterfaceDeclaration[] = [];
  for (const file of program.getSourceFiles()) {
    if (!file.fileName.startsWith(`${ROOT}src/`)) continue;
    file.forEachChild((node) => {
      if (ts.isInterfaceDeclaration(node) && node.name.text === name) found.push(node);
    });
  }
  if (found.length !== 1) throw new Error(`expected one interface ${name} in src/, found ${found.length}`);
  return found[0]!;
}

interface Row {
  option: string;
  type: string;
  default: string;
  bounds: string;
  meaning: string;
}

function renderSection(section: Section, program: ts.Program, checker: ts.TypeChecker): string {
  const declaration = findInterface(program, section.type);
  const symbols = checker.getPropertiesOfType(checker.getTypeAtLocation(declaration));
  const parentOf = (symbol: ts.Symbol) => symbol.declarations?.[0]?.parent;
  // Options declared by the type of an earlier section are named with a link, not repeated.
  const position = (symbol: ts.Symbol) => symbol.declarations?.[0]?.pos ?? 0;
  const shared = new Map<string, string[]>();
  const listed: ts.Symbol[] = [];
  const group = (symbol: ts.Symbol) => {
    const parent = parentOf(symbol);
    return parent === declaration ? '~' : parent && ts.isInterfaceDeclaration(parent) ? parent.name.text : '';
  };
  // each declaring interface's options in declaration order, the type's own last
  const ordered = [...symbols].sort((a, b) => group(a).localeCompare(group(b)) || position(a) - position(b));
  for (const symbol of ordered) {
    const parent = parentOf(symbol);
    const name = parent && parent !== declaration && ts.isInterfaceDeclaration(parent) ? parent.name.text : undefined;
    const other = name ? SECTIONS.find((s) => s !== section && (s.type === name || s.alsoDeclares?.includes(name))) : undefined;
    if (other && SECTIONS.indexOf(other) < SECTIONS.indexOf(section)) shared.set(other.heading, [...(shared.get(other.heading) ?? []), symbol.name]);
    else listed.push(symbol);
  }
  // inherited options first (the connection before the rest), each group in declaration order
  const inherited = listed.filter((s) => parentOf(s) !== declaration);
  const rows: Row[] = [];
  for (const symbol of [...inherited, ...listed.filter((s) => parentOf(s) === declaration)]) rows.push(...rowsOf(symbol, symbol.name, section, checker));
  const lines = [`## ${section.heading}`, ''];
  lines.push(`\`${section.type}\`${section.intro ? `: ${section.intro}` : '.'}`);
  for (const [heading, names] of shared) lines.push(`As in [${heading}](#${slug(heading)}): ${names.map((n) => `\`${n}\``).join(', ')}.`);
  lines.push('', '| option | type | default | bounds | meaning |', '| --- | --- | --- | --- | --- |');
  for (const row of rows) lines.push(`| \`${row.option}\` | ${row.type} | ${row.default} | ${row.bounds} | ${row.meaning} |`);
  lines.push('');
  return lines.join('\n');
}

function rowsOf(symbol: ts.Symbol, option: string, section: Section, checker: ts.TypeChecker): Row[] {
  const declaration = symbol.declarations?.[0];
  if (!declaration || !ts.isPropertySignature(declaration)) throw new Error(`${section.type}.${option} is not a property signature`);
  const meaning = oneLine(ts.displayPartsToString(symbol.getDocumentationComment(checker)));
  const jsdocDefault = symbol.getJsDocTags(checker).find((tag) => tag.name === 'default');
  const setting = section.settings[option];
  const optional = !!declaration.questionToken;
  const row: Row = {
    option,
    type: cell(typeText(declaration)),
    default: defaultCell(setting, jsdocDefault ? oneLine(ts.displayPartsToString(jsdocDefault.text)) : undefined, optional),
    bounds: boundsCell(setting),
    meaning: cell(meaning),
  };
  if (meaning === '') undescribed.push(`${section.type}.${option}`);
  const rows = [row];
  if (declaration.type && ts.isTypeLiteralNode(declaration.type)) {
    const nested = checker.getTypeAtLocation(declaration.type);
    for (const inner of checker.getPropertiesOfType(nested)) rows.push(...rowsOf(inner, `${option}.${inner.name}`, section, checker));
  }
  return rows;
}

/** The declared type, without `| undefined` (every optional option takes it). */
function typeText(declaration: ts.PropertySignature): string {
  if (!declaration.type) return '';
  if (ts.isTypeLiteralNode(declaration.type)) return 'object';
  const text = declaration.type.getText().replace(/\s+/g, ' ');
  return `\`${text.replace(/ \| undefined$/, '')}\``;
}

function written(value: string | number | boolean): string {
  return typeof value === 'string' ? `\`'${value}'\`` : `\`${String(value)}\``;
}

function defaultCell(setting: Setting | undefined, jsdoc: string | undefined, optional: boolean): string {
  if (setting?.default !== undefined) return written(setting.default);
  if (jsdoc !== undefined && /^(?:'[^']*'|-?\d[\d_.]*|true|false)$/.test(jsdoc)) return `\`${jsdoc}\``;
  if (jsdoc !== undefined && jsdoc !== '') return cell(jsdoc);
  return optional ? '—' : 'required';
}

function boundsCell(setting: Setting | undefined): string {
  if (!setting) return '';
  if (setting.minMs !== undefined && setting.maxMs !== undefined) return `${formatDuration(setting.minMs)} to ${formatDuration(setting.maxMs)}`;
  if (setting.maxMs !== undefined) return `at most ${formatDuration(setting.maxMs)}`;
  if (setting.min !== undefined && setting.max !== undefined) return `${setting.min} to ${setting.max}`;
  return '';
}

function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim();
}

/** Text safe inside a markdown table cell. */
function cell(text: string): string {
  return text.replace(/\|/g, '\\|');
}

/** GitHub's heading anchor (test/package/docs-links.test.ts has the same rule). */
function slug(heading: string): string {
  return heading
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** The committed page, for the staleness test. */
export function committedOptionsReference(): string {
  return readFileSync(`${ROOT}docs/options.md`, 'utf8');
}
