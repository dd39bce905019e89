// What a claim pattern looks like to the benchmark: take a named lease (win or lose) and give
// it back. Both leasehold and the classic transaction implement it, so every measurement
// drives them the same way.
import type { Session } from './session.js';

export type PatternId = 'classic' | 'leasehold';

export interface ClaimOutcome {
  won: boolean;
  /** The winner's token, needed to release. */
  token: string | null;
  /** Why: 'acquired', or the reason the claim was declined. */
  reason: string;
}

export interface ClaimPattern {
  readonly id: PatternId;
  /** One line for the report: which statements one decision sends. */
  readonly description: string;
  /** The table the pattern writes (for VACUUM between measurements). */
  readonly table: string;
  /** Makes sure the lease row for `name` exists and is free. */
  prepare(session: Session, name: string): Promise<void>;
  /** One claim decision. */
  acquire(session: Session, name: string, holder: string, ttl: string): Promise<ClaimOutcome>;
  /** Frees the lease if `token` still holds it; false when it no longer did. */
  release(session: Session, name: string, token: string): Promise<boolean>;
}
