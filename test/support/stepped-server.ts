// A PostgreSQL server of the test file's own under libfaketime, whose clock the test steps through
// an offset file (src/testing/faketime.ts). Call it at the top of a file: it registers the file's
// beforeAll and afterAll. libfaketime comes from Debian's faketime package, which .ci/run
// installs; without it `libfaketime` is undefined, and the tests skip with it.
import { afterAll, beforeAll } from 'vitest';
import { startEmbeddedPostgres, type EmbeddedPostgres } from '../../src/db/embedded.js';
import { findLibfaketime, SteppedClock } from '../../src/testing/faketime.js';

export interface SteppedServer {
  readonly libfaketime: string | undefined;
  /** The server's connection string (once beforeAll has started it). */
  readonly url: string;
  /** Sets the server's clock offset from real time, e.g. '+3600s' or '-30s'. */
  set(offset: string): void;
}

export function steppedServer(prefix: string): SteppedServer {
  const libfaketime = findLibfaketime();
  let server: EmbeddedPostgres | undefined;
  let clock: SteppedClock | undefined;
  beforeAll(async () => {
    if (!libfaketime) return;
    clock = SteppedClock.create(libfaketime, prefix);
    server = await startEmbeddedPostgres({ environment: clock.env });
  }, 120_000);
  afterAll(async () => {
    await server?.stop();
    clock?.close();
  });
  return {
    libfaketime,
    get url(): string {
      if (!server) throw new Error('the stepped server is not running');
      return server.connectionString;
    },
    set: (offset) => clock?.set(offset),
  };
}
