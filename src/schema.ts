// `leasehold/schema`: the schema's migrations, for running or checking them yourself (a client
// applies them on connect unless `migrate: false`) and for the SQL that does it without Node.
export { checkSchema, installScript, latestVersion, migrate, migrations, schemaVersion, type Migration, type MigrationResult } from './db/migrations.js';
