// libfaketime, for processes whose wall clock (or a database server's) must be off or step.
// Debian's faketime package installs it; tests that need it skip without it.
import { chmodSync, existsSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** Where Debian's faketime package puts the library, by architecture. */
export const LIBFAKETIME_PATHS: readonly string[] = [
  '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/faketime/libfaketime.so.1',
];

/** The installed libfaketime, or undefined. */
export function findLibfaketime(): string | undefined {
  return LIBFAKETIME_PATHS.find((path) => existsSync(path));
}

/**
 * Environment that runs a process with its wall clock shifted by `offset` (libfaketime syntax,
 * e.g. '+5m', '-30s'). The monotonic clock is left alone, so timers and durations stay true.
 */
export function fakeClockEnv(libfaketime: string, offset: string): Record<string, string> {
  return { LD_PRELOAD: libfaketime, FAKETIME: offset, DONT_FAKE_MONOTONIC: '1' };
}

/**
 * A clock offset shared by the processes started with `env` (database servers, typically):
 * libfaketime reads the offset file on every clock call, so set() steps their clocks at once.
 * CLOCK_MONOTONIC is left alone.
 */
export class SteppedClock {
  readonly file: string;
  readonly env: Record<string, string>;

  private constructor(
    libfaketime: string,
    private readonly dir: string,
  ) {
    this.file = join(dir, 'offset');
    this.env = { LD_PRELOAD: libfaketime, FAKETIME_TIMESTAMP_FILE: this.file, FAKETIME_NO_CACHE: '1', DONT_FAKE_MONOTONIC: '1' };
    this.set('+0s');
  }

  /** A new offset file (in a temporary folder named after `prefix`), at +0 s. */
  static create(libfaketime: string, prefix = 'leasehold-clock-'): SteppedClock {
    const dir = mkdtempSync(join(tmpdir(), prefix));
    chmodSync(dir, 0o755); // a server may run as another OS user
    return new SteppedClock(libfaketime, dir);
  }

  /** Sets the offset from real time, e.g. '+3600s' or '-30s'. */
  set(offset: string): void {
    // written aside and renamed: the processes must never read it half-written
    writeFileSync(`${this.file}.next`, `${offset}\n`, { mode: 0o644 });
    renameSync(`${this.file}.next`, this.file);
  }

  close(): void {
    rmSync(this.dir, { recursive: true, force: true });
  }
}
