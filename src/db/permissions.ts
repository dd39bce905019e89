// A refused privilege (SQLSTATE 42501) becomes a PermissionDeniedError that names the grant to
// add. Which level includes which object is decided by the schema (table leasehold.access);
// this copy only picks the words of the message, and test/sql/privileges-schema.test.ts checks that it
// matches the schema's.
import { PermissionDeniedError } from '../errors.js';

type Level = PermissionDeniedError['level'];

/** Objects outside the client level; everything else a client needs is at 'client'. */
export const LEVEL_OF: Readonly<Record<string, Level>> = {
  force_release: 'operator',
  prune_history: 'operator',
  run_now: 'operator',
  run_requests: 'reader',
  run_request_status: 'reader',
  pause_job: 'operator',
  resume_job: 'operator',
  lease_status: 'reader',
  job_status: 'reader',
  run_history: 'reader',
  runs: 'reader',
  skips: 'reader',
  missed: 'reader',
  schema_version: 'reader',
  breaking_since: 'reader',
  holder_gone: 'reader',
  check_name: 'reader',
  check_ttl: 'reader',
  check_holder: 'reader',
  migrations: 'reader',
  jobs: 'reader',
  check_characters: 'reader',
  epoch: 'reader',
  epoch_source: 'reader',
  liveness_locks: 'reader',
  unhandled_schedules: 'reader',
  fleet_summary: 'reader',
  fleet_status: 'reader',
  run_counts: 'reader',
  slow_runs: 'reader',
};

/** The PermissionDeniedError for a 42501 error, or undefined for any other error. */
export function permissionDenied(error: unknown, role: string): PermissionDeniedError | undefined {
  if (!(error instanceof Error) || (error as { code?: unknown }).code !== '42501') return undefined;
  if (error instanceof PermissionDeniedError) return error;
  // a boundary between services (a namespace, a job another role owns): the grant is not what is missing
  if (/may not (?:act on|change job) /.test(error.message)) {
    return new PermissionDeniedError(role, 'client', `${error.message} (see docs/security.md, "Services in one database").`, { cause: error });
  }
  // "permission denied for function acquire", "... for view job_status", "... for schema leasehold"
  const object = /permission denied for \w+ (?:leasehold\.)?"?([\w]+)"?/.exec(error.message)?.[1] ?? 'leasehold';
  const level = LEVEL_OF[object] ?? 'client';
  return new PermissionDeniedError(
    role,
    level,
    `The database role "${role}" may not use leasehold's ${object} (${error.message}). ` +
      `Have the schema owner run: leasehold grant ${quoteRole(role)} --as ${level}` +
      ` (or the statements of 'leasehold grant ${quoteRole(role)} --as ${level} --print'; see docs/security.md).`,
    { cause: error },
  );
}

function quoteRole(role: string): string {
  return /^[a-z_][a-z0-9_]*$/.test(role) ? role : `'${role.replace(/'/g, `'\\''`)}'`;
}
