// Connect-and-check, for every entry point that opens the database (createLeasehold, the CLI):
// a first connection (an unreachable server is a DatabaseUnavailableError naming it), the schema
// migrated or checked, the connecting role, and the replication report. One transaction on the
// handle, so every statement has its timeout.
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
  return db.transaction(async (client) => {
    // migrate() takes connections of its own (and a lock); this one proves the server answers first
    if (schema === 'migrate') await migrate(db.pool);
    else if (schema === 'check') await checkSchema(client);
    const { rows } = await client.query<{ role: string }>('select current_user::text as role');
    // last: a failing read aborts the transaction, and nothing comes after it
    const replication = await checkReplication(client).catch(() => null);
    return { role: rows[0]?.role ?? 'ROLE', replication };
  });
}
