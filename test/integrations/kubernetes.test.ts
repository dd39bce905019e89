// Containers and Kubernetes: the worker's health endpoints, its shutdown on SIGTERM inside the
// pod's termination grace period (real worker processes on the real database), and the example
// manifests checked against the CLI's real flags.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Command, Option } from 'commander';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parse } from 'yaml';
import { buildProgram } from '../../src/cli/program.js';
import { EXIT } from '../../src/cli/exit-codes.js';
import { startWorker } from '../../src/index.js';
import { workerHealth } from '../../src/monitor/index.js';
import { silentLogger } from '../../src/observe/logger.js';
import { parseDuration } from '../../src/validate/duration.js';
import { startCli, type CliProcess } from '../support/cli.js';
import { client, freshDatabase, rawPool, waitFor } from '../support/db.js';
import { trackerOf } from '../../src/lease/tracker.js';
import { HEALTH_PATHS } from '../../src/monitor/health.js';

const EXAMPLES = fileURLToPath(new URL('../../examples/kubernetes/', import.meta.url));
let url: string;
let dir: string;

beforeAll(async () => {
  url = await freshDatabase();
  await (await client(url, { liveness: false })).close();
  dir = mkdtempSync(join(tmpdir(), 'leasehold-k8s-'));
  // A handler that ignores its signal for HANDLER_MS: the worst case for a shutdown.
  writeFileSync(
    join(dir, 'jobs.mjs'),
    `export const jobs = [{ name: process.env.JOB_NAME, every: '1s', ttl: '10s', handler: async (ctx) => {
      console.log('started fence ' + ctx.fence);
      await new Promise((resolve) => setTimeout(resolve, Number(process.env.HANDLER_MS)));
      console.log('finished fence ' + ctx.fence);
    } }];\n`,
  );
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

async function get(address: string): Promise<{ status: number; body: { ok: boolean; checks: Record<string, { ok: boolean; detail: string }> } }> {
  const response = await fetch(address);
  return { status: response.status, body: (await response.json()) as { ok: boolean; checks: Record<string, { ok: boolean; detail: string }> } };
}

function startWorkerProcess(job: string, handlerMs: number, args: string[]): { cli: CliProcess; health: Promise<string> } {
  const cli = startCli(['worker', join(dir, 'jobs.mjs'), ...args], { DATABASE_URL: url, JOB_NAME: job, HANDLER_MS: String(handlerMs), LEASEHOLD_LOG_LEVEL: 'warn' });
  cli.child.stdin.end();
  const health = waitFor(() => /health at (http:\/\/\S+)\/healthz/.exec(cli.output().stderr)?.[1], 60_000, 50);
  return { cli, health };
}

describe('worker health endpoints', () => {
  it('liveness and readiness answer 200 with their checks; readiness turns 503 as soon as the worker stops', async () => {
    const worker = await startWorker({ connectionString: url, jobs: [{ name: 'k8s-inproc', every: '1h', handler: async () => undefined }], logger: silentLogger(), handleSignals: false });
    const health = workerHealth(worker);
    const ready = await health.ready();
    expect(ready.ok, JSON.stringify(ready)).toBe(true);
    expect(Object.keys(ready.checks).sort()).toEqual(['claims', 'database', 'schema', 'session', 'stopping']);
    expect((await health.live()).ok).toBe(true);
    const stopping = worker.stop();
    const during = await health.ready();
    expect(during.ok).toBe(false);
    expect(during.checks.stopping?.ok).toBe(false);
    // a stopping worker stays live: a failing liveness probe would only kill it early
    expect((await health.live()).ok).toBe(true);
    await stopping;
  });

  it('readiness fails while the liveness session is down, and recovers when it is back', async () => {
    const worker = await startWorker({ connectionString: url, jobs: [{ name: 'k8s-session', every: '1h', handler: async () => undefined }], logger: silentLogger(), handleSignals: false });
    try {
      const health = workerHealth(worker);
      let down = false;
      worker.on('liveness:lost', () => (down = true));
      // end the worker's liveness session from the server side
      const key = trackerOf(worker.leasehold).livenessKey();
      expect(key).not.toBeNull();
      await rawPool(url, 1).query(
        `select pg_terminate_backend(pid) from pg_locks where locktype = 'advisory' and mode = 'ExclusiveLock' and ((classid::bigint << 32) | objid::bigint) = $1::bigint`,
        [key],
      );
      await waitFor(() => down, 20_000);
      // either the probe saw the session down, or the session was already back (then it is ready again)
      const report = await health.ready();
      if (!report.ok) expect(report.checks.session?.ok).toBe(false);
      await waitFor(async () => (await health.ready()).ok, 30_000, 100);
    } finally {
      await worker.stop();
    }
  });

  it('`leasehold worker --health-port` serves /healthz and /readyz, and --metrics-port serves them next to /metrics', { timeout: 90_000 }, async () => {
    const { cli, health } = startWorkerProcess('k8s-endpoints', 10, ['--health-port', '0', '--metrics-port', '0']);
    try {
      const origin = await health;
      expect((await get(`${origin}/healthz`)).status).toBe(200);
      const ready = await get(`${origin}/readyz`);
      expect(ready.status, JSON.stringify(ready.body)).toBe(200);
      expect(ready.body.checks.schema?.ok).toBe(true);
      const metricsUrl = /metrics at (http:\/\/\S+)\/metrics/.exec(cli.output().stderr)?.[1];
      expect(metricsUrl).toBeDefined();
      expect((await get(`${metricsUrl}/readyz`)).status).toBe(200);
      expect((await fetch(`${origin}/nothing`)).status).toBe(404);
    } finally {
      cli.child.kill('SIGTERM');
      expect((await cli.done).code).toBe(0);
    }
  });

  it('refuses a bad --health-port with a usage error before anything starts', async () => {
    const cli = startCli(['worker', join(dir, 'jobs.mjs'), '--health-port', 'http'], { DATABASE_URL: url, JOB_NAME: 'k8s-bad', HANDLER_MS: '1' });
    cli.child.stdin.end();
    const result = await cli.done;
    expect(result.code).toBe(EXIT.usage);
    expect(result.stderr).toContain('--health-port must be an integer from 0 to 65535 (got http)');
  });
});

describe('SIGTERM in a pod', () => {
  // What Kubernetes does on a rollout: SIGTERM, then SIGKILL after terminationGracePeriodSeconds.
  async function terminate(job: string, handlerMs: number, grace: string) {
    const { cli, health } = startWorkerProcess(job, handlerMs, ['--health-port', '0', '--grace', grace]);
    const origin = await health;
    await waitFor(() => /started fence \d+/.test(cli.output().stdout), 60_000, 20);
    const sentAt = Date.now();
    cli.child.kill('SIGTERM');
    // while it finishes, readiness says so (the endpoint stays up until the worker has stopped)
    let during: number | undefined;
    while (cli.child.exitCode === null && during !== 503) {
      during = await get(`${origin}/readyz`).then((r) => r.status, () => during);
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
    const result = await cli.done;
    const elapsedMs = Date.now() - sentAt;
    const pool = rawPool(url, 1);
    const runs = (await pool.query<{ outcome: string }>('select outcome from leasehold.runs where job = $1 order by id', [job])).rows.map((r) => r.outcome);
    const lease = (await pool.query<{ state: string }>('select state from leasehold.lease_status where name = $1', [job])).rows[0];
    return { result, elapsedMs, during, runs, lease };
  }

  it('lets a running handler finish within the grace period, releases the lease and exits 0', { timeout: 120_000 }, async () => {
    const { result, during, runs, lease } = await terminate('k8s-finish', 3_000, '30s');
    expect(result.code, result.stderr).toBe(0);
    expect(during, 'readiness answered 503 while the handler finished').toBe(503);
    expect(result.stdout).toMatch(/finished fence \d+/);
    expect(runs.at(-1)).toBe('succeeded');
    expect(runs).not.toContain('running');
    expect(lease?.state).toBe('free');
  });

  it('a handler that ignores its signal past the grace period is recorded aborted; the process exits 0 long before the handler would end', { timeout: 120_000 }, async () => {
    const handlerMs = 120_000;
    const { result, elapsedMs, runs, lease } = await terminate('k8s-abort', handlerMs, '2s');
    expect(result.code, result.stderr).toBe(0);
    expect(result.stdout).not.toMatch(/finished fence/);
    expect(result.stderr).toContain('still running after the grace period');
    expect(runs.at(-1)).toBe('aborted');
    expect(lease?.state).toBe('free');
    // inside the example Deployment's terminationGracePeriodSeconds (45 s) even on a loaded machine
    expect(elapsedMs).toBeLessThan(45_000);
  });
});

/** The `leasehold` invocation of a container: the subcommand and its arguments. */
function invocation(container: { command?: string[]; args?: string[] }): string[] {
  const all = [...(container.command ?? []), ...(container.args ?? [])];
  const at = all.findIndex((part) => part === 'leasehold' || part.endsWith('/leasehold'));
  expect(at, JSON.stringify(all)).toBeGreaterThanOrEqual(0);
  return all.slice(at + 1);
}

/** Checks every --flag against the commander definition; returns flag → value. */
function checkFlags(program: Command, args: string[]): { command: Command; values: Map<string, string | true> } {
  const [name, ...rest] = args;
  const command = program.commands.find((c) => c.name() === name);
  expect(command, `no such subcommand: ${name}`).toBeDefined();
  const options = new Map<string, Option>(command!.options.map((o) => [o.long!, o]));
  const values = new Map<string, string | true>();
  for (let i = 0; i < rest.length; i++) {
    const part = rest[i]!;
    if (part === '--') break;
    if (!part.startsWith('-')) continue;
    const option = options.get(part);
    expect(option, `leasehold ${name} has no option ${part} (it has ${[...options.keys()].join(', ')})`).toBeDefined();
    if (option!.required || option!.optional) {
      const value = rest[++i];
      expect(value, `${part} needs a value`).toBeDefined();
      values.set(part, value!);
    } else values.set(part, true);
  }
  return { command: command!, values };
}

describe('example manifests', () => {
  const program = buildProgram({ out: () => undefined, err: () => undefined, exit: () => undefined });

  it('the Deployment runs `leasehold worker` with real flags, probes the health routes on the health port, and outlasts --grace', () => {
    const manifest = parse(readFileSync(join(EXAMPLES, 'worker-deployment.yaml'), 'utf8'));
    expect(manifest.kind).toBe('Deployment');
    const pod = manifest.spec.template.spec;
    const [container] = pod.containers;
    const args = invocation(container);
    expect(args[0]).toBe('worker');
    const { values } = checkFlags(program, args);
    const healthPort = Number(values.get('--health-port'));
    expect(values.get('--health-host')).toBe('0.0.0.0');
    const ports = new Map<string, number>(container.ports.map((p: { name: string; containerPort: number }) => [p.name, p.containerPort]));
    expect(ports.get(container.livenessProbe.httpGet.port)).toBe(healthPort);
    expect(ports.get(container.readinessProbe.httpGet.port)).toBe(healthPort);
    expect(ports.get('metrics')).toBe(Number(values.get('--metrics-port')));
    expect(container.livenessProbe.httpGet.path).toBe('/healthz');
    expect(container.readinessProbe.httpGet.path).toBe('/readyz');
    // the routes the probes name are the ones the worker serves
    expect([HEALTH_PATHS.live, HEALTH_PATHS.ready]).toEqual(['/healthz', '/readyz']);
    const graceSeconds = parseDuration(String(values.get('--grace')), '--grace') / 1000;
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(graceSeconds);
  });

  it('the Dockerfile starts the leasehold binary in exec form with real flags', () => {
    const dockerfile = readFileSync(join(EXAMPLES, 'Dockerfile'), 'utf8');
    const cmd = /^CMD (\[.*\])$/m.exec(dockerfile)?.[1];
    expect(cmd, 'CMD in exec (JSON) form, so that SIGTERM reaches the worker').toBeDefined();
    const args = invocation({ command: JSON.parse(cmd!) as string[] });
    expect(args[0]).toBe('worker');
    checkFlags(program, args);
  });

  it('the CronJob runs `leasehold exec` with real flags, and its pod failure policy ends the Job unretried on the skip exit code', () => {
    const manifest = parse(readFileSync(join(EXAMPLES, 'cronjob.yaml'), 'utf8'));
    expect(manifest.kind).toBe('CronJob');
    const job = manifest.spec.jobTemplate.spec;
    const pod = job.template.spec;
    expect(pod.restartPolicy).toBe('Never'); // podFailurePolicy requires it
    const [container] = pod.containers;
    const args = invocation(container);
    expect(args[0]).toBe('exec');
    const { values } = checkFlags(program, args);
    expect(values.get('--name')).toBeTruthy();
    const skipExit = values.has('--skipped-exit-code') ? Number(values.get('--skipped-exit-code')) : EXIT.skipped;
    const rule = job.podFailurePolicy.rules.find((r: { onExitCodes?: { values: number[] } }) => r.onExitCodes?.values.includes(skipExit));
    expect(rule?.action).toBe('FailJob');
    expect(rule.onExitCodes.containerName).toBe(container.name);
    expect(job.backoffLimit).toBeGreaterThanOrEqual(1);
    expect(pod.terminationGracePeriodSeconds).toBeGreaterThan(parseDuration(String(values.get('--grace')), '--grace') / 1000);
    expect(args).toContain('--');
  });
});
