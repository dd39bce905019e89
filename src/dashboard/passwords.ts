// Dashboard-issued credentials: scrypt password hashes (node:crypto, no extra dependency) in the
// PHC string format, `$scrypt$ln=15,r=8,p=1$<salt>$<hash>` (base64 without padding), and the
// users file of `leasehold dashboard --users-file`: one `name:hash` a line, `#` comments.
import { randomBytes, scrypt, timingSafeEqual, type ScryptOptions } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { InvalidArgumentError } from '../errors.js';
import { checkHolder } from '../validate/names.js';
import { DASHBOARD_ACTION_LIMITS } from './defaults.js';

/** A person who may sign in to the dashboard: a name and a hash from hashPassword() or `leasehold dashboard-user`. */
export interface DashboardUser {
  /** Recorded as the actor of each act (leasehold.actions); 1–200 characters, no ':' or control characters. */
  name: string;
  /** `$scrypt$ln=…,r=…,p=…$salt$hash`, as hashPassword() returns it. */
  passwordHash: string;
}

// N = 2^15, r = 8: 32 MiB and some tens of ms per check (OWASP's scrypt minimum is 2^17 with
// r = 8 at 128 MiB; 2^15 keeps a check within a small container's memory, and sign-ins are
// throttled per name and per address).
const COST = { ln: 15, r: 8, p: 1 };
const BOUNDS = { ln: [14, 20], r: [1, 16], p: [1, 4] } as const;
const KEY_BYTES = 32;
const SALT_BYTES = 16;
const FORMAT = /^\$scrypt\$ln=(\d{1,2}),r=(\d{1,2}),p=(\d)\$([A-Za-z0-9+/]{16,88})\$([A-Za-z0-9+/]{43})$/;

export const MIN_PASSWORD_LENGTH = 8;
const MAX_PASSWORD_BYTES = 1024;

interface ParsedHash {
  ln: number;
  r: number;
  p: number;
  salt: Buffer;
  key: Buffer;
}

function derive(password: string, salt: Buffer, cost: { ln: number; r: number; p: number }): Promise<Buffer> {
  const N = 2 ** cost.ln;
  const options: ScryptOptions = { N, r: cost.r, p: cost.p, maxmem: 256 * N * cost.r * cost.p };
  return new Promise((resolve, reject) => scrypt(password.normalize('NFC'), salt, KEY_BYTES, options, (error, key) => (error ? reject(error) : resolve(key))));
}

const b64 = (buffer: Buffer): string => buffer.toString('base64').replace(/=+$/, '');

/** A password's hash for a users file or the `users` option (at least 8 characters). */
export async function hashPassword(password: string): Promise<string> {
  checkPassword(password);
  const salt = randomBytes(SALT_BYTES);
  const key = await derive(password, salt, COST);
  return `$scrypt$ln=${COST.ln},r=${COST.r},p=${COST.p}$${b64(salt)}$${b64(key)}`;
}

export function checkPassword(password: unknown): string {
  if (typeof password !== 'string') throw new InvalidArgumentError('password', `a password must be a string (got ${typeof password}).`);
  if ([...password].length < MIN_PASSWORD_LENGTH) throw new InvalidArgumentError('password', `a password must be at least ${MIN_PASSWORD_LENGTH} characters.`);
  if (Buffer.byteLength(password) > MAX_PASSWORD_BYTES) throw new InvalidArgumentError('password', `a password must be at most ${MAX_PASSWORD_BYTES} bytes.`);
  return password;
}

/** The parts of a stored hash, or an InvalidArgumentError that says what is wrong (never quoting the hash). */
export function parsePasswordHash(hash: unknown, where: string): ParsedHash {
  const match = typeof hash === 'string' ? FORMAT.exec(hash) : null;
  if (!match) {
    throw new InvalidArgumentError('passwordHash', `${where}: the password hash is not one hashPassword() or \`leasehold dashboard-user\` made ('$scrypt$ln=15,r=8,p=1$…$…').`);
  }
  const [ln, r, p] = [Number(match[1]), Number(match[2]), Number(match[3])];
  for (const [name, value] of [['ln', ln], ['r', r], ['p', p]] as const) {
    const [min, max] = BOUNDS[name];
    if (value < min || value > max) throw new InvalidArgumentError('passwordHash', `${where}: the password hash's ${name}=${value} is outside ${min}–${max}.`);
  }
  return { ln, r, p, salt: Buffer.from(match[4]!, 'base64'), key: Buffer.from(match[5]!, 'base64') };
}

/** Whether `password` matches the parsed hash (constant time in the comparison). */
export async function verifyPassword(password: string, hash: ParsedHash): Promise<boolean> {
  if (Buffer.byteLength(password) > MAX_PASSWORD_BYTES) return false;
  const key = await derive(password, hash.salt, hash);
  return key.length === hash.key.length && timingSafeEqual(key, hash.key);
}

/** A user's name: a holder name (it is the actor of the record) without ':' (the users file's separator). */
export function checkUserName(name: unknown, where: string): string {
  let checked: string;
  try {
    checked = checkHolder(name);
  } catch (error) {
    throw new InvalidArgumentError('name', `${where}: a user name ${(error as Error).message.replace(/^holder /, '')}`);
  }
  if (checked.includes(':')) throw new InvalidArgumentError('name', `${where}: a user name must not contain ':' (got ${JSON.stringify(checked)}).`);
  if (checked.trim() !== checked) throw new InvalidArgumentError('name', `${where}: a user name must not start or end with whitespace (got ${JSON.stringify(checked)}).`);
  return checked;
}

/** The users of a users file: `name:$scrypt$…` a line; blank lines and lines starting with # are skipped. */
export function parseUsersFile(text: string, file: string): DashboardUser[] {
  const users: DashboardUser[] = [];
  const seen = new Set<string>();
  text.split(/\r?\n/).forEach((raw, index) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const where = `${file}, line ${index + 1}`;
    const colon = line.lastIndexOf(':');
    if (colon <= 0) throw new InvalidArgumentError('usersFile', `${where}: expected name:$scrypt$… (made by \`leasehold dashboard-user NAME\`).`);
    const name = checkUserName(line.slice(0, colon), where);
    const passwordHash = line.slice(colon + 1);
    parsePasswordHash(passwordHash, where);
    if (seen.has(name)) throw new InvalidArgumentError('usersFile', `${where}: the user ${JSON.stringify(name)} is listed twice.`);
    seen.add(name);
    users.push({ name, passwordHash });
  });
  if (users.length === 0) throw new InvalidArgumentError('usersFile', `${file} lists no users: add lines made by \`leasehold dashboard-user NAME\`.`);
  if (users.length > DASHBOARD_ACTION_LIMITS.users) throw new InvalidArgumentError('usersFile', `${file} lists more than ${DASHBOARD_ACTION_LIMITS.users} users.`);
  return users;
}

/** Reads and parses a users file. */
export async function readUsersFile(file: string): Promise<DashboardUser[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new InvalidArgumentError('usersFile', `cannot read the users file ${file}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}.`);
  }
  return parseUsersFile(text, file);
}
