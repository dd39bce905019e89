// Connect-and-check, for every entry point that opens the database (createLeasehold, the CLI):
// a first connection (an unreachable server is a DatabaseUnavailableError naming it), the schema
// migrated or checked, the connecting role, and the replication report. Through the handle, so
// every statement has its timeout.
import { checkReplication, type ReplicationReport } from '../lease/replication.js';
import type { DbHandle } from './handle.js';
import { checkSchema, migrate } from './migrations.js';

/** What to do about the schema: apply pending migrations, require the current version, or leave it (`leasehold migrate`). */
export type SchemaPolicy = 'migrate' | 'check' | 'none';

export interface ConnectionCheck {
  /** The role the connection logged in as (for messages that name a grant). */
  role: string;
  /** What the server said about replication; null when it could not be read. */
  replication: ReplicationReport | null;
}

export async function connectAndCheck(db: DbHandle, schema: SchemaPolicy): Promise<ConnectionCheck> {
  // the first statement: an unreachable server fails here, with a message naming it
  const { rows } = await db.query<{ role: string }>('select current_user::text as role');
  // migrate() takes a connection (and a lock) of its own while nothing of ours is held: through a
  // transaction pooler with one server connection, an open transaction here would wait on itself
  if (schema === 'migrate') await migrate(db.pool);
  const replication = await db.transaction(async (client) => {
    if (schema === 'check') await checkSchema(client);
    // last: a failing read aborts the transaction, and nothing comes after it
    return checkReplication(client).catch(() => null);
  });
  return { role: rows[0]?.role ?? 'ROLE', replication };
}
