// Health of a worker for container probes. Liveness: the process answers and its database
// session is alive and writable, and its claims are not failing for a reason no retry cures.
// Readiness: it can claim slots: that, the schema at a version this code runs on, the liveness
// session up, and not stopping.
import { checkSchema } from '../db/migrations.js';
import type { Worker } from '../worker/worker.js';
import type { EndpointReply } from './http-endpoint.js';
import { trackerOf } from '../lease/tracker.js';

export interface HealthCheck {
  ok: boolean;
  detail: string;
}

export interface HealthReport {
  ok: boolean;
  checks: Record<string, HealthCheck>;
}

export interface WorkerHealth {
  /** Liveness: the process and its database session are alive, the server writable, and claims not failing (Worker.failure). */
  live(): Promise<HealthReport>;
  /** Readiness: the worker can claim (what liveness checks, schema ok, liveness session up, not stopping). */
  ready(): Promise<HealthReport>;
  /** GET /healthz and /readyz: 200 when ok, 503 when not, with the report as JSON. */
  routes(): Record<string, () => Promise<EndpointReply>>;
}

/** Where the probes are served (next to /metrics, or on the health port). */
export const HEALTH_PATHS = { live: '/healthz', ready: '/readyz' } as const;

/** Each probe query waits at most this long (a probe's own timeout is usually 1 s or more). */
const PROBE_QUERY_TIMEOUT_MS = 800;

export function workerHealth(worker: Worker): WorkerHealth {
  const tracker = trackerOf(worker.leasehold);
  const pool = tracker.runtime.controlPool;
  // Without a liveness session (liveness: false) there is no key to require. startWorker()
  // returns once the session is up, so a key now means one is expected from here on.
  let sessionExpected = tracker.livenessKey() !== null;
  worker.on('liveness:ready', () => (sessionExpected = true));

  const withTimeout = <T>(work: Promise<T>): Promise<T> =>
    new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => reject(new ProbeTimeout()), PROBE_QUERY_TIMEOUT_MS);
      work.then(resolve, reject).finally(() => clearTimeout(timer));
    });

  const database = async (withSchema: boolean): Promise<Record<string, HealthCheck>> => {
    const checks: Record<string, HealthCheck> = {};
    try {
      const connecting = pool.connect();
      // a connection that arrives after the probe gave up goes back to the pool
      const client = await withTimeout(connecting).catch((error: unknown) => {
        connecting.then((late) => late.release(), () => undefined);
        throw error;
      });
      let broken: Error | undefined;
      try {
        // the same round trip says whether the server takes writes (a standby, or read-only by a setting)
        const { rows } = await withTimeout(
          client.query<{ read_only: boolean; standby: boolean }>(
            `select current_setting('transaction_read_only') = 'on' as read_only, pg_is_in_recovery() as standby`,
          ),
        ).catch((error: unknown) => {
          broken = error instanceof Error ? error : new Error(String(error));
          throw error;
        });
        checks.database = rows[0]?.read_only ? { ok: false, detail: readOnlyDetail(rows[0].standby) } : { ok: true, detail: 'answers' };
        if (withSchema) {
          try {
            checks.schema = { ok: true, detail: `version ${await withTimeout(checkSchema(client))}` };
          } catch (error) {
            if (error instanceof ProbeTimeout) broken = error;
            checks.schema = { ok: false, detail: message(error) };
          }
        }
      } finally {
        // a connection whose query did not answer is dropped, not reused
        client.release(broken);
      }
    } catch (error) {
      checks.database = { ok: false, detail: message(error) };
      if (withSchema) checks.schema = { ok: false, detail: 'not checked: no database' };
    }
    const key = tracker.livenessKey();
    checks.session = !sessionExpected
      ? { ok: true, detail: 'liveness is off' }
      : key === null
        ? { ok: false, detail: 'the liveness session is down (reconnecting)' }
        : { ok: true, detail: 'liveness session up' };
    const failure = worker.failure;
    checks.claims = failure ? { ok: false, detail: failure.message } : { ok: true, detail: 'not failing' };
    return checks;
  };

  const report = (checks: Record<string, HealthCheck>): HealthReport => ({ ok: Object.values(checks).every((c) => c.ok), checks });

  const live = async () => {
    if (worker.stopping) {
      // A stopping worker is alive until it exits: a failing liveness probe would only kill it early.
      return report({ stopping: { ok: true, detail: 'stopping: finishing runs and releasing leases' } });
    }
    return report(await database(false));
  };
  const ready = async () => {
    if (worker.stopping) return report({ stopping: { ok: false, detail: 'stopping: claims nothing more' } });
    return report({ ...(await database(true)), stopping: { ok: true, detail: 'claiming' } });
  };
  const asReply = (check: () => Promise<HealthReport>) => async (): Promise<EndpointReply> => {
    const result = await check();
    return { status: result.ok ? 200 : 503, type: 'application/json; charset=utf-8', body: `${JSON.stringify(result)}\n` };
  };
  return { live, ready, routes: () => ({ [HEALTH_PATHS.live]: asReply(live), [HEALTH_PATHS.ready]: asReply(ready) }) };
}

class ProbeTimeout extends Error {
  constructor() {
    super(`no answer within ${PROBE_QUERY_TIMEOUT_MS} ms`);
  }
}

function readOnlyDetail(standby: boolean): string {
  return standby
    ? 'answers, but it is a hot standby: it accepts no writes; point the worker at the primary'
    : 'answers, but the session is read-only (default_transaction_read_only = on): it accepts no writes';
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
