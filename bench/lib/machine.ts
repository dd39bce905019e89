// Where and when the numbers were measured: they mean little without it.
import os from 'node:os';
import type { ServerKind } from './database.js';
import { Session } from './session.js';

export interface MachineInfo {
  date: string;
  cpus: number;
  cpuModel: string;
  platform: string;
  totalMemoryGiB: number;
  node: string;
  postgres: string;
  postgresVersionNum: number;
  server: ServerKind;
  fsync: string;
  synchronousCommit: string;
  dataChecksums: string;
}

interface SettingsRow {
  version: string;
  version_num: string;
  fsync: string;
  synchronous_commit: string;
  data_checksums: string;
}

export async function describeMachine(connectionString: string, server: ServerKind, date: Date): Promise<MachineInfo> {
  const session = await Session.open(connectionString, 'bench-machine');
  let row: SettingsRow | undefined;
  try {
    const rows = await session.query<SettingsRow>(
      `select version() as version,
              current_setting('server_version_num') as version_num,
              current_setting('fsync') as fsync,
              current_setting('synchronous_commit') as synchronous_commit,
              current_setting('data_checksums') as data_checksums`,
    );
    row = rows[0];
  } finally {
    await session.close();
  }
  if (!row) throw new Error('could not read the server settings');
  const cpus = os.cpus();
  return {
    date: date.toISOString(),
    cpus: cpus.length,
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    platform: `${os.type()} ${os.release()} ${os.arch()}`,
    totalMemoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    node: process.version,
    postgres: row.version,
    postgresVersionNum: Number(row.version_num),
    server,
    fsync: row.fsync,
    synchronousCommit: row.synchronous_commit,
    dataChecksums: row.data_checksums,
  };
}

/** "PostgreSQL 18.1" out of version()'s long string. */
export function shortPostgresVersion(version: string): string {
  return /^PostgreSQL \S+/.exec(version)?.[0] ?? version;
}
