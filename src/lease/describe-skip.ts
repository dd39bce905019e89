// Words for a declined acquisition, and the client-side meaning of the protocol's SQLSTATEs.
import { InvalidArgumentError } from '../errors.js';
import { permissionDenied } from '../db/permissions.js';
import type { NotAcquired } from './types.js';

/** One readable line for a skip: who holds the lease, since when, until when. */
export function describeSkip(skip: NotAcquired): string {
  const held = skip.since ? ` for ${((skip.databaseTime.getTime() - skip.since.getTime()) / 1000).toFixed(1)}s` : '';
  switch (skip.reason) {
    case 'held':
      return `skipped "${skip.name}": held by ${skip.holder ?? 'unknown'} (fence ${skip.fence})${held}, until ${skip.until?.toISOString()}`;
    case 'holder-committing':
      return `skipped "${skip.name}": ${skip.holder ?? 'the holder'} (fence ${skip.fence}) is committing a fenced transaction`;
    case 'being-acquired':
      return `skipped "${skip.name}": another acquirer is taking the lease right now`;
    case 'slot-taken':
      return `skipped "${skip.name}": slot already claimed (last slot ${skip.lastSlot?.toISOString()})`;
    case 'slot-not-due':
      return `skipped "${skip.name}": slot is not due yet by the database clock`;
    case 'paused':
      return `skipped "${skip.name}": the job is paused`;
  }
}

const SQL_ERRORS: Record<string, string> = { LH001: 'name', LH002: 'ttl', LH004: 'holder' };

/** An argument error raised by the SQL functions becomes the InvalidArgumentError it is. */
export function translateSqlError(error: unknown): unknown {
  const code = (error as { code?: string }).code;
  if (code && code in SQL_ERRORS) {
    return new InvalidArgumentError(SQL_ERRORS[code] as string, (error as Error).message);
  }
  // a missing grant, or a name outside the role's namespace: typed, naming the role
  if (code === '42501') return permissionDenied(error, /role "([^"]+)"/.exec((error as Error).message)?.[1] ?? 'this role') ?? error;
  return error;
}
