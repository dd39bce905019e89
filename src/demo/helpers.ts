// Small helpers of the demo: formatting, errors, a bounded wait.
import { describeConnection } from '../db/connection-url.js';
import { LeaseholdError } from '../errors.js';
import { StoryError } from './processes.js';
import { REPORT_JOB, SYNC_JOB } from './protocol.js';

export function jobOf(name: string): typeof REPORT_JOB | typeof SYNC_JOB | undefined {
  return name === REPORT_JOB.name ? REPORT_JOB : name === SYNC_JOB.name ? SYNC_JOB : undefined;
}

/** A story error or a database error by its message; anything else (a bug) with its stack. */
export function describeError(error: unknown): string {
  if (error instanceof StoryError) return error.message;
  if (!(error instanceof Error)) return String(error);
  if (error instanceof LeaseholdError || typeof (error as { code?: unknown }).code === 'string') return `${error.name}: ${error.message}`;
  return error.stack ?? error.message;
}

export function iso(time: number): string {
  return new Date(time).toISOString();
}

export function shorten(text: string, max: number): string {
  const oneLine = text.replace(/\s+/g, ' ');
  return oneLine.length <= max ? oneLine : `${oneLine.slice(0, max - 1)}…`;
}

/** The server of a URL with its user, without the password: postgres://user@host:5432/db. */
export function describeServer(url: string): string {
  const scheme = /^([a-z]+:)\/\//i.exec(url)?.[1] ?? 'postgres:';
  const user = /^[a-z]+:\/\/([^:@/?#]*)(?::[^@/?#]*)?@/i.exec(url)?.[1];
  return `${scheme}//${user ? `${user}@` : ''}${describeConnection(url)}`;
}

/** Resolves with the promise's value, or with `fallback` after `ms` (the timer does not linger). */
export async function within<T>(promise: Promise<T>, timeoutMs: number, fallback: T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<T>((resolve) => {
    timer = setTimeout(() => resolve(fallback), timeoutMs);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}
