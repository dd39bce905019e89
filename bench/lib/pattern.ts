// What a claim pattern looks like to the benchmark: take a named lock or lease (win or lose)
// and give it back. leasehold, the classic transaction, a PostgreSQL advisory lock and a Redis
// lock all implement it, so every measurement drives them the same way.
import type { Session } from './session.js';

export type PatternId = 'classic' | 'leasehold' | 'advisory' | 'redis';

/** Report order; classic first: every ratio is "vs classic", measured in the same run. */
export const PATTERN_IDS: readonly PatternId[] = ['classic', 'leasehold', 'advisory', 'redis'];

export interface ClaimOutcome {
  won: boolean;
  /** The winner's token, needed to release. */
  token: string | null;
  /** Why: 'acquired', or the reason the claim was declined. */
  reason: string;
}

/** One connection a pattern claims on: counts the commands it sends (one round trip each). */
export interface ClaimConnection {
  /** Commands (SQL statements, Redis commands) sent on this connection so far. */
  roundTrips: number;
  /** Set when the connection reported an asynchronous error (it is then unusable). */
  failure: Error | undefined;
  /** The server process of a PostgreSQL connection (its CPU time is read from /proc), if any. */
  readonly serverPid?: number | undefined;
  close(): Promise<void>;
}

/** What a pattern guarantees, for the notes under the tables (and the JSON). */
export interface PatternInfo {
  id: PatternId;
  /** One line for the report: which statements one decision sends. */
  description: string;
  /** TTL, fencing, whose clock, what a loser learns, what it needs. */
  guarantees: string;
}

export interface ClaimPattern<C extends ClaimConnection = Session> extends PatternInfo {
  /** The PostgreSQL table the pattern writes (VACUUMed between measurements), or null. */
  readonly table: string | null;
  /** Makes sure the lock or lease for `name` exists (where it is a row) and is free. */
  prepare(connection: C, name: string): Promise<void>;
  /** One claim decision. */
  acquire(connection: C, name: string, holder: string, ttlSeconds: number): Promise<ClaimOutcome>;
  /** Frees the lock if `token` still holds it; false when it no longer did. */
  release(connection: C, name: string, token: string): Promise<boolean>;
}

/** A TTL in seconds as a PostgreSQL interval literal. */
export const interval = (ttlSeconds: number): string => `${ttlSeconds} seconds`;

export function patternInfo(pattern: PatternInfo): PatternInfo {
  return { id: pattern.id, description: pattern.description, guarantees: pattern.guarantees };
}
