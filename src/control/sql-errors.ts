// The protocol's refusals of control calls (sql/baseline/4_control.sql) as typed errors: a bad
// field (LH005), a name that is not a data job or not a job at all (LH006), a bad name or
// ttl or by (LH001, LH002, LH004). Permission errors are typed by the database handle.
import { InvalidArgumentError } from '../errors.js';

const ARGUMENT: Record<string, string> = { LH001: 'name', LH002: 'ttl', LH004: 'by', LH006: 'name' };

export function sqlError(error: unknown): InvalidArgumentError | undefined {
  const code = (error as { code?: unknown }).code;
  if (typeof code !== 'string' || !(error instanceof Error)) return undefined;
  if (code === 'LH005') {
    // "cron: must be ..." names the field first
    const field = /^(\w+):/.exec(error.message)?.[1] ?? 'schedule';
    return new InvalidArgumentError(field, `leasehold: ${error.message}`);
  }
  const argument = ARGUMENT[code];
  return argument ? new InvalidArgumentError(argument, `leasehold: ${error.message}`) : undefined;
}
