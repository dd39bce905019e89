// leasehold exec: guard any command with a lease. Acquire; run the command with inherited
// stdio while a heartbeat renews the lease; forward SIGINT/SIGTERM; stop the command (SIGTERM,
// then SIGKILL after a grace period) if the lease is lost; record the run; release; exit with
// the command's exit code. When the lease is held elsewhere, say who holds it and exit 75.
import { spawn, type ChildProcess } from 'node:child_process';
import { constants } from 'node:os';
import type { Command } from 'commander';
import { dbHandle } from '../../db/handle.js';
import { createLeasehold, describeSkip, type Leasehold } from '../../client/leasehold.js';
import type { Lease } from '../../lease/lease.js';
import { releasedRemotely } from '../../lease/tracker.js';
import type { NotAcquired } from '../../lease/types.js';
import { stderrLogger } from '../../observe/logger.js';
import { finishHeldRun, startHeldRun, type HeldRunOutcome } from '../../lease/run-history.js';
import { formatDuration, parseBoundedDuration, parseDuration } from '../../validate/duration.js';
import { durationSetting } from '../../validate/settings.js';
import { CliError, databaseUrl, integerFlag, report, type Io } from '../context.js';
import { CLI_CONNECTION, EXEC_DEFAULTS, range, shown } from '../defaults.js';
import { EXIT } from '../exit-codes.js';
import { inert } from '../format.js';

interface ExecOptions {
  name: string;
  ttl: string;
  wait?: string;
  interval?: string;
  grace: string;
  skippedExitCode: string;
  holder?: string;
  history: boolean;
  tokenEnv: boolean;
  json?: boolean;
  verbose?: boolean;
  databaseUrl?: string;
}

export function registerExec(program: Command, io: Io): void {
  program
    .command('exec')
    .description('run a command only if the lease NAME is free, holding it (with heartbeats) while the command runs')
    .requiredOption('-n, --name <name>', 'lease (job) name')
    .option('--ttl <duration>', `lease TTL, renewed every ttl/3 ${range(EXEC_DEFAULTS.ttl)}`, shown(EXEC_DEFAULTS.ttl))
    .option('--wait <duration>', 'if held, keep trying this long before skipping (default: skip at once)')
    .option('--interval <duration>', `the job's schedule interval, for duration-vs-interval warnings in \`status\` ${range(EXEC_DEFAULTS.interval)}`)
    .option('--grace <duration>', `after SIGTERM, how long the command may take before SIGKILL (at most ${formatDuration(EXEC_DEFAULTS.grace.maxMs)})`, shown(EXEC_DEFAULTS.grace))
    .option('--skipped-exit-code <code>', 'exit code when the lease is held elsewhere', shown(EXEC_DEFAULTS.skippedExitCode))
    .option('--holder <name>', 'how this process names itself in the lease (default host:pid:random)')
    .option('--no-history', 'do not record the run or the skip in the history tables')
    .option('--no-token-env', 'do not give the command LEASEHOLD_TOKEN (it then cannot fence its writes, nor release or renew the lease)')
    .option('--json', 'print every event as a JSON line on stderr')
    .option('-v, --verbose', 'also report start and finish on stderr (by default only skips, losses and errors, so cron mails stay quiet)')
    .option('--database-url <url>', 'PostgreSQL URL (default: DATABASE_URL)')
    .argument('<command...>', 'the command and its arguments (put them after --)')
    .addHelpText(
      'after',
      `
Examples:
  leasehold exec --name nightly-report --ttl 2m -- ./report.sh --full
  */5 * * * *  leasehold exec -n sync --interval 5m -- node sync.js     (crontab on several hosts)

The command gets LEASEHOLD_NAME, LEASEHOLD_FENCE, LEASEHOLD_TOKEN and LEASEHOLD_IDEMPOTENCY_KEY in its
environment, so it can fence its own writes: select leasehold.assert_lease($LEASEHOLD_NAME, $LEASEHOLD_TOKEN, $LEASEHOLD_FENCE).
The token is the lease's secret, and every process the command starts inherits it: pass
--no-token-env when the command does not fence its writes (docs/security.md).

Exit codes: the command's own; ${EXIT.skipped} held elsewhere (--skipped-exit-code); ${EXIT.lost} lease lost and the
command stopped; 128+N the command died of signal N; ${EXIT.unavailable} database unreachable; ${EXIT.usage} bad usage.`,
    )
    .action(async (command: string[], options: ExecOptions) => {
      try {
        await exec(command, options, io);
      } catch (error) {
        report(io, error, options.json === true);
      }
    });
}

async function exec(command: string[], options: ExecOptions, io: Io): Promise<void> {
  const skippedExitCode = integerFlag(options.skippedExitCode, EXEC_DEFAULTS.skippedExitCode, '--skipped-exit-code');
  const waitMs = options.wait === undefined ? 0 : parseDuration(options.wait, '--wait');
  const graceMs = durationSetting(options.grace, EXEC_DEFAULTS.grace, '--grace');
  const { interval } = EXEC_DEFAULTS;
  const intervalMs = options.interval === undefined ? null : parseBoundedDuration(options.interval, '--interval', interval.minMs, interval.maxMs);
  const ttlMs = durationSetting(options.ttl, EXEC_DEFAULTS.ttl, '--ttl');
  const event = (fields: Record<string, unknown>, human: string) => {
    const routine = fields.event === 'started' || (fields.event === 'finished' && fields.outcome === 'succeeded');
    if (routine && !options.json && !options.verbose) return;
    io.err(options.json ? JSON.stringify(fields) : `leasehold: ${inert(human)}`);
  };

  const leasehold = await createLeasehold({
    connectionString: databaseUrl(options.databaseUrl),
    ...(options.holder ? { holder: options.holder } : {}),
    logger: stderrLogger(process.env.LEASEHOLD_LOG_LEVEL ? undefined : 'error'),
  });
  try {
    const lease = await acquireWithin(leasehold, options.name, ttlMs, waitMs);
    if (!lease.acquired) {
      if (options.history) await history(leasehold, 'select leasehold.record_skip($1, $2)', [options.name, leasehold.holder]);
      event(
        { event: 'skipped', name: options.name, holder: lease.holder, fence: lease.fence, since: lease.since, until: lease.until, reason: lease.reason },
        `${describeSkip(lease)}; not running the command`,
      );
      io.exit(skippedExitCode);
      return;
    }
    const code = await runGuarded(leasehold, lease.lease, command, { graceMs, intervalMs, history: options.history, tokenEnv: options.tokenEnv }, event);
    io.exit(code);
  } finally {
    await leasehold.close();
  }
}

async function acquireWithin(leasehold: Leasehold, name: string, ttlMs: number, waitMs: number): Promise<{ acquired: true; lease: Lease } | NotAcquired> {
  const deadline = Date.now() + waitMs;
  for (;;) {
    const result = await leasehold.acquire(name, { ttl: ttlMs, heartbeat: true });
    if (result.acquired || Date.now() + 500 > deadline) return result;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
}

async function history(leasehold: Leasehold, text: string, values: unknown[]): Promise<void> {
  // History is informative: a failure to write it must not stop the guarded command.
  const db = dbHandle(leasehold.pool, { where: 'the database', timeoutMs: durationSetting(undefined, CLI_CONNECTION.queryTimeout, 'queryTimeout') });
  await db.query(text, values).catch(() => undefined);
}

// What the command learns about its lease. Without the token it can still tell which run it is
// (name, fence, idempotency key), but cannot fence, renew or release.
function childEnv(lease: Lease, withToken: boolean): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    LEASEHOLD_NAME: lease.name,
    LEASEHOLD_FENCE: String(lease.fence),
    LEASEHOLD_IDEMPOTENCY_KEY: lease.idempotencyKey,
  };
  // an inherited LEASEHOLD_TOKEN (exec under exec) must not pass for this lease's
  if (withToken) env.LEASEHOLD_TOKEN = lease.token;
  else delete env.LEASEHOLD_TOKEN;
  return env;
}

async function runGuarded(
  leasehold: Leasehold,
  lease: Lease,
  command: string[],
  settings: { graceMs: number; intervalMs: number | null; history: boolean; tokenEnv: boolean },
  event: (fields: Record<string, unknown>, human: string) => void,
): Promise<number> {
  if (settings.history) {
    await startHeldRun(leasehold.pool, lease, settings.intervalMs);
  }
  const [file, ...args] = command as [string, ...string[]];
  // Without a terminal (cron, Kubernetes, CI) the command gets its own process group, so that
  // stopping it also stops what it started (a shell's children would otherwise keep running).
  // On a terminal it stays in the foreground group, where it may read the keyboard.
  const ownGroup = !process.stdin.isTTY;
  const child = spawn(file, args, {
    detached: ownGroup,
    stdio: 'inherit',
    env: childEnv(lease, settings.tokenEnv),
  });
  event({ event: 'started', name: lease.name, fence: lease.fence, pid: child.pid }, `holding "${lease.name}" (fence ${lease.fence}); running ${file}`);

  let lost = false;
  // who force-released the lease (leasehold release --force), looked up once it is lost
  let releasedBy: Promise<string | null> | undefined;
  const signal = (sig: NodeJS.Signals) => {
    try {
      if (ownGroup && child.pid) process.kill(-child.pid, sig);
      else child.kill(sig);
    } catch {
      // already gone
    }
  };
  const stop = (reason: string) => terminate(child, signal, settings.graceMs, reason, event);
  const onLost = () => {
    lost = true;
    stop('lease lost');
    releasedBy = forceReleasedBy(leasehold, lease);
    void releasedBy.then((by) =>
      event(
        { event: 'lost', name: lease.name, fence: lease.fence, reason: lease.lostReason?.reason, ...(by ? { releasedBy: by } : {}) },
        by ? `lease "${lease.name}" was force-released by ${by}; stopping the command` : `lease "${lease.name}" lost (${lease.lostReason?.reason}); stopping the command`,
      ),
    );
  };
  lease.signal.addEventListener('abort', onLost, { once: true });
  const forward = (sig: NodeJS.Signals) => signal(sig);
  process.on('SIGINT', forward);
  process.on('SIGTERM', forward);
  process.on('SIGHUP', forward);

  const exit = await new Promise<{ code: number | null; signal: NodeJS.Signals | null; error?: Error }>((resolve) => {
    child.once('error', (error) => resolve({ code: 127, signal: null, error }));
    child.once('exit', (code, signal) => resolve({ code, signal }));
  });
  process.off('SIGINT', forward);
  process.off('SIGTERM', forward);
  process.off('SIGHUP', forward);
  lease.signal.removeEventListener('abort', onLost);

  const code = exit.error ? 127 : exit.code ?? 128 + (constants.signals[exit.signal as NodeJS.Signals] ?? 0);
  let outcome: HeldRunOutcome = lost ? 'lost' : code === 0 ? 'succeeded' : 'failed';
  // a command stopped because its lease was force-released: say by whom, not how it exited
  const by = releasedBy ? await releasedBy : null;
  let detail = by
    ? `the lease was force-released by ${by}`
    : exit.error
      ? `could not start ${file}: ${exit.error.message}`
      : exit.signal
        ? `killed by ${exit.signal}`
        : `exit code ${code}`;
  if (exit.error) event({ event: 'error', message: exit.error.message }, `could not start ${file}: ${exit.error.message}`);
  // finish_held_run checks the lease, records the outcome and releases the lease in one
  // statement: a lease force-released between two heartbeats is recorded (and reported) lost
  const finished = settings.history ? await finishHeldRun(leasehold.pool, lease, outcome, outcome === 'succeeded' ? null : detail) : null;
  // without history, a release that finds another token tells the same (an error tells nothing)
  const released = finished ? (releasedRemotely(lease), true) : await lease.release().catch(() => null);
  if ((finished?.outcome === 'lost' || released === false) && !lost) {
    lost = true;
    outcome = 'lost';
    const lateBy = await forceReleasedBy(leasehold, lease);
    if (lateBy) detail = `the lease was force-released by ${lateBy}`;
    event(
      { event: 'lost', name: lease.name, fence: lease.fence, reason: 'released', ...(lateBy ? { releasedBy: lateBy } : {}) },
      lateBy ? `lease "${lease.name}" was force-released by ${lateBy} before the command finished` : `lease "${lease.name}" was no longer held when the command finished`,
    );
  }
  event({ event: 'finished', name: lease.name, fence: lease.fence, outcome, exitCode: code }, `"${lease.name}" ${outcome} (${detail})`);
  return lost ? EXIT.lost : code;
}

/**
 * Who force-released `lease` (`leasehold release --force --by NAME`, recorded in
 * leasehold.actions with the lease's fence), as "NAME (database role ROLE)"; null when it was
 * not force-released that way (or the lookup failed: it only names the cause).
 */
async function forceReleasedBy(leasehold: Leasehold, lease: Lease): Promise<string | null> {
  const db = dbHandle(leasehold.pool, { where: 'the database', timeoutMs: durationSetting(undefined, CLI_CONNECTION.queryTimeout, 'queryTimeout') });
  const found = await db
    .query<{ actor: string; db_role: string }>(
      `select actor, db_role from leasehold.actions
        where job = $1 and action = 'force-released' and detail->>'previous_fence' = $2 order by id desc limit 1`,
      [lease.name, String(lease.fence)],
    )
    .catch(() => null);
  const row = found?.rows[0];
  return row ? `${row.actor} (database role ${row.db_role})` : null;
}

/** SIGTERM now, SIGKILL after the grace period if it is still running. */
function terminate(
  child: ChildProcess,
  signal: (sig: NodeJS.Signals) => void,
  graceMs: number,
  reason: string,
  event: (fields: Record<string, unknown>, human: string) => void,
): void {
  if (child.exitCode !== null || child.signalCode !== null) return;
  signal('SIGTERM');
  const timer = setTimeout(() => {
    if (child.exitCode === null && child.signalCode === null) {
      event({ event: 'killed', pid: child.pid, reason }, `command did not stop within ${graceMs} ms of SIGTERM; sending SIGKILL`);
      signal('SIGKILL');
    }
  }, graceMs);
  timer.unref();
  child.once('exit', () => clearTimeout(timer));
}
