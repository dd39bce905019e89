// Connect-and-check, for every entry point that opens the database (createLeasehold, the CLI):
// a first connection (an unreachable server is a DatabaseUnavailableError naming it) that also
// reads the session's settings (session-settings.ts: a read-only server refuses a client that
// writes, settings that do not suit the protocol pin the pool), the schema migrated or checked,
// the connecting role, and the replication report. Through the handle, so every statement has
// its timeout.
import { checkReplication, type ReplicationReport } from './replication.js';
import type { DbHandle } from './handle.js';
import { checkSchema, migrate } from './migrations.js';
import { pin } from './pinned.js';
import { readOnlyAtStart } from './read-only.js';
import { parseSessionSettings, pinReason, SESSION_SETTINGS_SQL, type SessionSettings, type SessionSettingsRow } from './session-settings.js';

/** What to do about the schema: apply pending migrations, require the current version, or leave it (`leasehold migrate`). */
export type SchemaPolicy = 'migrate' | 'check' | 'none';

export interface CheckOptions {
  schema: SchemaPolicy;
  /** The caller takes leases (writes): a read-only server is refused with DatabaseReadOnlyError. */
  writes: boolean;
}

export interface ConnectionCheck {
  /** The role the connection logged in as (for messages that name a grant). */
  role: string;
  /** What the server said about replication; null when it could not be read. */
  replication: ReplicationReport | null;
  settings: SessionSettings;
  /** Why the handle's pool runs its statements pinned (pinned.ts), or null. */
  pinned: string | null;
}

export async function connectAndCheck(db: DbHandle, { schema, writes }: CheckOptions): Promise<ConnectionCheck> {
  // the first statement: an unreachable server fails here, with a message naming it
  const { rows } = await db.query<SessionSettingsRow>(SESSION_SETTINGS_SQL);
  const settings = parseSessionSettings(rows[0] as SessionSettingsRow);
  if (writes) {
    const refusal = readOnlyAtStart(settings, db.where);
    if (refusal) throw refusal;
  }
  const pinned = pinReason(settings, db.timeoutMs);
  if (pinned) pin(db.pool, pinned);
  // migrate() takes a connection (and a lock) of its own while nothing of ours is held: through a
  // transaction pooler with one server connection, an open transaction here would wait on itself
  if (schema === 'migrate') await migrate(db.pool);
  const replication = await db.transaction(async (client) => {
    if (schema === 'check') await checkSchema(client);
    // last: a failing read aborts the transaction, and nothing comes after it
    return checkReplication(client).catch(() => null);
  });
  return { role: settings.role, replication, settings, pinned };
}
