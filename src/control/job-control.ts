// Acting on jobs as data, from any process with a client (an application, an admin script, the
// CLI): schedules defined at run time, pause and resume, run now, backfill. Each act is one call
// of a SQL function: the rules, and the record of who did it (leasehold.actions), live in SQL,
// so psql and other languages act on jobs exactly as this class does.
import type { LeaseRuntime } from '../lease/runtime.js';

// Set by JobControl's static block: the client makes one per Leasehold (Leasehold.control).
let construct: (runtime: LeaseRuntime) => JobControl;

export class JobControl {
  readonly #runtime: LeaseRuntime;

  private constructor(runtime: LeaseRuntime) {
    this.#runtime = runtime;
  }

  static {
    construct = (runtime) => new JobControl(runtime);
  }
}

/** The JobControl of a client (not exported from the package). */
export function jobControl(runtime: LeaseRuntime): JobControl {
  return construct(runtime);
}
