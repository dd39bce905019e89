// Exit codes of the `leasehold` command (sysexits.h where one fits).
export const EXIT = {
  ok: 0,
  /** Something failed; the message says what. */
  error: 1,
  /** Bad arguments or options. */
  usage: 2,
  /** `exec`: the lease is held elsewhere, the command did not run (EX_TEMPFAIL; --skipped-exit-code changes it). `run-now --wait`: the run was skipped. */
  skipped: 75,
  /** `exec`: the lease was lost while the command ran, and the command was stopped. */
  lost: 76,
  /** The database URL is not a postgres:// URL (EX_USAGE). */
  badUrl: 64,
  /** The server has no database of that name. */
  noDatabase: 68,
  /** The server refused the login: wrong password, unknown role, or no pg_hba.conf entry (EX_NOUSER). */
  auth: 67,
  /** The database could not be reached: nothing listens, the host is unknown, or it did not answer in time (EX_UNAVAILABLE). */
  unavailable: 69,
  /** The database role lacks a leasehold grant; the message names it (EX_NOPERM). */
  noperm: 77,
  /** The schema is newer than this version of leasehold, or not migrated (EX_CONFIG). */
  schema: 78,
} as const;
