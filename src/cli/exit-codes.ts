// Exit codes of the `leasehold` command (sysexits.h where one fits).
export const EXIT = {
  ok: 0,
  /** Something failed; the message says what. */
  error: 1,
  /** Bad arguments or options. */
  usage: 2,
  /** `exec`: the lease is held elsewhere, the command did not run (EX_TEMPFAIL; --skipped-exit-code changes it). */
  skipped: 75,
  /** `exec`: the lease was lost while the command ran, and the command was stopped. */
  lost: 76,
  /** The database could not be reached (EX_UNAVAILABLE). */
  unavailable: 69,
  /** The database role lacks a leasehold grant; the message names it (EX_NOPERM). */
  noperm: 77,
  /** The schema is newer than this version of leasehold, or not migrated (EX_CONFIG). */
  schema: 78,
} as const;
