// A Patroni cluster built from Debian's packages (patroni, etcd-server, haproxy) on loopback:
// one etcd member, three PostgreSQL nodes under Patroni, and HAProxy routing clients to the node
// whose Patroni REST API answers 200 on /primary. The fault suite's workers connect through
// HAProxy; the nemesis makes Patroni fail over (faults/topology.ts):
//
// - switchover: POST /switchover to the leader's REST API (planned);
// - kill: SIGKILL to the leader's Patroni and every PostgreSQL process (the host dies);
// - freeze: SIGSTOP to the same (a hung host), thawed once another node leads;
// - etcd-cut: the leader's Patroni cut off from etcd (its own proxy to etcd blackholed);
// - double: the leader killed and, once a replica was promoted and clients worked on it for 2 s,
//   that one killed too, before the last replica followed it (its replication connections go
//   through a proxy blackholed from the first kill on). Patroni promotes the last one when its
//   lag behind the leader's last reported position is under maximum_lag_on_failover (1 MB).
//   In synchronous mode the second kill waits until /sync names the last replica as the promoted
//   leader's synchronous standby (Patroni promotes no other), and the first victim is started
//   again at once, since in strict mode the last node commits nothing until a standby streams.
//
// Each node's connect_address (what replicas stream from) is such a proxy; HAProxy and the
// REST checks use the node's own port. Timings: ttl 8 s, loop_wait 1 s, retry_timeout 3 s.
import { chownSync, existsSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { freePort } from '../../src/db/embedded.js';
import { mono } from '../common.js';
import { FaultProxy } from '../proxy.js';
import type { FailoverHow, FailoverStep, FailoverTopology } from '../topology.js';
import { alive, Daemon, findProgram, httpStatus, postmasterPid, serverUser, signal, sleep, trackDataDir, tree, waitFor, workFolder } from './host.js';
import type { RunAs } from '../pg-server.js';

export const PG_BINDIR = process.env.PG_BINDIR ?? '/usr/lib/postgresql/15/bin';
const TTL_S = 8;

/** The programs this topology needs, or why it cannot be built here (the tests skip with it). */
export function patroniMissing(): string | undefined {
  const missing = ['patroni', 'etcd', 'haproxy'].filter((p) => !findProgram(p));
  for (const program of ['postgres', 'pg_basebackup', 'pg_rewind']) if (!existsSync(join(PG_BINDIR, program))) missing.push(join(PG_BINDIR, program));
  if (missing.length) return `${missing.join(', ')} not installed (Debian packages patroni, etcd-server, haproxy, postgresql-15)`;
  const user = serverUser();
  return typeof user === 'string' ? user : undefined;
}

export interface PatroniOptions {
  /** synchronous_mode and synchronous_mode_strict (Patroni manages synchronous_standby_names). */
  synchronous: boolean;
  /** Runs once against the first primary (schema, test tables), before the replicas are awaited. */
  prepare: (url: string) => Promise<void>;
}

class Node {
  daemon: Daemon | undefined;
  frozen = false;
  readonly etcdProxy: FaultProxy;
  /** connect_address: the replicas' way in (blackholed to keep one from following this node). */
  readonly replicationProxy: FaultProxy;

  constructor(
    readonly name: string,
    readonly dir: string,
    readonly pgPort: number,
    readonly restPort: number,
    etcdPort: number,
    private readonly user: RunAs | undefined,
  ) {
    this.etcdProxy = new FaultProxy(etcdPort);
    this.replicationProxy = new FaultProxy(pgPort);
  }

  get dataDir(): string {
    return join(this.dir, 'data');
  }

  url(): string {
    return `postgres://postgres@127.0.0.1:${this.pgPort}/postgres`;
  }

  async listen(): Promise<void> {
    await this.etcdProxy.listen();
    await this.replicationProxy.listen();
  }

  config(synchronous: boolean): object {
    const hba = ['local all all trust', 'host all all 127.0.0.1/32 trust', 'host replication all 127.0.0.1/32 trust'];
    return {
      scope: 'leasehold',
      name: this.name,
      log: { level: 'INFO' },
      restapi: { listen: `127.0.0.1:${this.restPort}`, connect_address: `127.0.0.1:${this.restPort}` },
      etcd3: { hosts: [`127.0.0.1:${this.etcdProxy.port}`], use_proxies: true },
      bootstrap: {
        dcs: {
          ttl: TTL_S,
          loop_wait: 1,
          retry_timeout: 3,
          maximum_lag_on_failover: 1_048_576,
          synchronous_mode: synchronous,
          synchronous_mode_strict: synchronous,
          postgresql: {
            use_pg_rewind: true,
            use_slots: true,
            parameters: { max_connections: 100, shared_buffers: '16MB', fsync: 'off', wal_level: 'replica', hot_standby: 'on', max_wal_senders: 10, max_replication_slots: 10, wal_keep_size: '256MB', wal_receiver_status_interval: '1s', wal_retrieve_retry_interval: '100ms' },
          },
        },
        initdb: [{ encoding: 'UTF8' }, { locale: 'C' }, 'no-sync'],
      },
      postgresql: {
        listen: `127.0.0.1:${this.pgPort}`,
        connect_address: `127.0.0.1:${this.replicationProxy.port}`,
        data_dir: this.dataDir,
        bin_dir: PG_BINDIR,
        pgpass: join(this.dir, 'pgpass'),
        authentication: { superuser: { username: 'postgres' }, replication: { username: 'postgres' }, rewind: { username: 'postgres' } },
        parameters: { unix_socket_directories: this.dir },
        pg_hba: hba,
        remove_data_directory_on_rewind_failure: true,
        remove_data_directory_on_diverged_timelines: true,
        basebackup: [{ checkpoint: 'fast' }],
      },
    };
  }

  start(synchronous: boolean): void {
    const file = join(this.dir, 'patroni.yml');
    writeFileSync(file, JSON.stringify(this.config(synchronous), null, 1)); // JSON is YAML
    trackDataDir(this.dataDir);
    this.daemon = new Daemon(this.name, findProgram('patroni') ?? 'patroni', [file], { user: this.user, cwd: this.dir, env: { HOME: this.dir } });
  }

  /** Patroni and every PostgreSQL process of this node. */
  pids(): number[] {
    return [...tree(this.daemon?.pid ?? 0), ...tree(postmasterPid(this.dataDir))];
  }

  async kill(): Promise<void> {
    const pids = this.pids();
    for (const pid of pids) signal(pid, 'SIGKILL');
    this.frozen = false;
    await this.daemon?.kill();
    await waitFor(() => pids.every((pid) => !alive(pid)), 10_000, () => `${this.name} did not die`).catch(() => undefined);
  }

  freeze(): void {
    this.frozen = true;
    for (const pid of this.pids()) signal(pid, 'SIGSTOP');
  }

  thaw(): void {
    this.frozen = false;
    for (const pid of this.pids()) signal(pid, 'SIGCONT');
  }

  get up(): boolean {
    return !!this.daemon?.running && !this.frozen;
  }

  async isPrimary(): Promise<boolean> {
    return this.up && (await httpStatus(`http://127.0.0.1:${this.restPort}/primary`, 800)) === 200;
  }
}

export class PatroniCluster implements FailoverTopology {
  readonly supports: readonly FailoverHow[] = ['switchover', 'kill', 'freeze', 'etcd-cut', 'double'];
  readonly clockSteps = false;
  /** What the last failover left to repair before the next one. */
  private repair: { how: FailoverHow; nodes: Node[] } | undefined;

  private constructor(
    private readonly options: PatroniOptions,
    private readonly folder: { path: string; remove: () => void },
    private readonly etcd: Daemon,
    private readonly etcdPort: number,
    private readonly haproxy: Daemon,
    private readonly haproxyPort: number,
    readonly nodes: Node[],
  ) {}

  static async create(options: PatroniOptions): Promise<PatroniCluster> {
    const missing = patroniMissing();
    if (missing) throw new Error(`the Patroni topology cannot be built: ${missing}`);
    const user = serverUser() as RunAs | undefined;
    const folder = workFolder('leasehold-patroni-', user);
    const daemons: Daemon[] = [];
    const nodes: Node[] = [];
    try {
      const [client, peer] = [await freePort(), await freePort()];
      const etcd = new Daemon('etcd', findProgram('etcd') as string, [
        '--name=e1', `--data-dir=${join(folder.path, 'etcd')}`, `--listen-client-urls=http://127.0.0.1:${client}`, `--advertise-client-urls=http://127.0.0.1:${client}`,
        `--listen-peer-urls=http://127.0.0.1:${peer}`, `--initial-advertise-peer-urls=http://127.0.0.1:${peer}`, `--initial-cluster=e1=http://127.0.0.1:${peer}`,
      ], { user, cwd: folder.path });
      daemons.push(etcd);
      await waitFor(async () => (await httpStatus(`http://127.0.0.1:${client}/health`)) === 200, 30_000, () => `etcd did not start\n${etcd.log()}`);
      for (let i = 1; i <= 3; i++) {
        const dir = join(folder.path, `n${i}`);
        mkdirSync(dir, { mode: 0o700 });
        if (user) chownSync(dir, user.uid, user.gid);
        const node = new Node(`n${i}`, dir, await freePort(), await freePort(), client, user);
        await node.listen();
        nodes.push(node);
      }
      const haproxyPort = await freePort();
      const cfg = join(folder.path, 'haproxy.cfg');
      writeFileSync(cfg, [
        'global', '  maxconn 400', 'defaults', '  mode tcp', '  timeout connect 1s', '  timeout client 1h', '  timeout server 1h', '  timeout check 1s',
        'listen primary', `  bind 127.0.0.1:${haproxyPort}`, '  option httpchk GET /primary', '  http-check expect status 200',
        '  default-server inter 300ms fall 2 rise 1 on-marked-down shutdown-sessions',
        ...nodes.map((n) => `  server ${n.name} 127.0.0.1:${n.pgPort} maxconn 100 check port ${n.restPort}`), '',
      ].join('\n'));
      // in the work folder: HAProxy, run as the server's user, goes back to its start directory after
      // reading its config and stops when it cannot (a checkout in a folder only its owner may enter)
      const haproxy = new Daemon('haproxy', findProgram('haproxy') as string, ['-f', cfg, '-db'], { user, cwd: folder.path });
      daemons.push(haproxy);
      const cluster = new PatroniCluster(options, folder, etcd, client, haproxy, haproxyPort, nodes);
      // the first node bootstraps alone, so that it is the one leader the others clone; in
      // (strict) synchronous mode nothing commits before a replica streams
      nodes[0]?.start(options.synchronous);
      await waitFor(() => nodes[0]?.isPrimary(), 60_000, () => `the first node did not bootstrap\n${cluster.logs()}`, 200);
      for (const node of nodes.slice(1)) node.start(options.synchronous);
      await cluster.waitForReplicas(120_000);
      await cluster.primaryThroughRouter(undefined, 30_000);
      await options.prepare(cluster.url);
      return cluster;
    } catch (error) {
      for (const node of nodes) await node.kill();
      for (const daemon of daemons) await daemon.kill();
      for (const node of nodes) await Promise.allSettled([node.etcdProxy.close(), node.replicationProxy.close()]);
      folder.remove();
      throw error;
    }
  }

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.haproxyPort}/postgres`;
  }

  get upstreamPort(): number {
    return this.haproxyPort;
  }

  follow(): void {
    // HAProxy follows the leader by itself
  }

  /** Every daemon's output, for a failure message. */
  logs(): string {
    return [this.etcd, this.haproxy, ...this.nodes.map((n) => n.daemon)].map((d) => d?.log().slice(-4_000) ?? '').join('\n');
  }

  private async leader(): Promise<Node | undefined> {
    for (const node of this.nodes) if (await node.isPrimary()) return node;
    return undefined;
  }

  /**
   * Waits until a connection through HAProxy reaches a primary other than `old` and a
   * transaction with an xid commits there (in synchronous mode: a synchronous standby confirmed it).
   */
  private async primaryThroughRouter(old: Node | undefined, timeoutMs: number): Promise<Node> {
    return waitFor(async () => {
      const client = new pg.Client({ connectionString: this.url, connectionTimeoutMillis: 1_000, query_timeout: 2_000 } as pg.ClientConfig);
      client.on('error', () => undefined);
      try {
        await client.connect();
        const { rows } = await client.query<{ port: number; standby: boolean }>('select inet_server_port() as port, pg_is_in_recovery() as standby, txid_current()');
        const node = this.nodes.find((n) => n.pgPort === rows[0]?.port);
        return node && node !== old && !rows[0]?.standby ? node : undefined;
      } finally {
        await client.end().catch(() => undefined);
      }
    }, timeoutMs, () => `no primary other than ${old?.name ?? 'none'} behind HAProxy\n${this.logs()}`, 50);
  }

  /**
   * Until the leader streams to every other running node and, in synchronous mode, Patroni's
   * /sync key names this leader and a standby that streams synchronously from it. Only then may
   * Patroni fail over: it promotes no node that key does not name, so a leader lost before
   * Patroni recorded its new synchronous standby (a second after a switchover) stays lost.
   */
  private async waitForReplicas(timeoutMs: number): Promise<void> {
    const expected = this.nodes.filter((n) => n.up).length - 1;
    await waitFor(async () => {
      const leader = await this.leader();
      if (!leader) return undefined;
      const sync = this.options.synchronous ? await this.syncKey() : undefined;
      if (this.options.synchronous && (sync?.leader !== leader.name || !sync.standby)) return undefined;
      const client = new pg.Client({ connectionString: leader.url(), connectionTimeoutMillis: 1_000 });
      client.on('error', () => undefined);
      try {
        await client.connect();
        const { rows } = await client.query<{ streaming: number; sync: boolean }>(
          `select count(*) filter (where state = 'streaming')::int as streaming,
                  coalesce(bool_or(application_name = any($1::text[]) and state = 'streaming' and sync_state = 'sync'), false) as sync
             from pg_stat_replication`,
          [sync?.standby?.split(',').map((n) => n.trim()) ?? []],
        );
        const r = rows[0];
        return !!r && r.streaming >= expected && (!this.options.synchronous || r.sync);
      } finally {
        await client.end().catch(() => undefined);
      }
    }, timeoutMs, () => `the replicas did not stream from the leader${this.options.synchronous ? ' (or /sync named no synchronous standby of it)' : ''}\n${this.logs()}`, 250);
  }

  /** Patroni's /sync key in etcd (v3 JSON gateway): the leader it was written for and its synchronous standby. */
  private async syncKey(): Promise<{ leader: string | undefined; standby: string | undefined } | undefined> {
    try {
      const response = await fetch(`http://127.0.0.1:${this.etcdPort}/v3/kv/range`, {
        method: 'POST',
        body: JSON.stringify({ key: Buffer.from('/service/leasehold/sync').toString('base64') }),
        signal: AbortSignal.timeout(1_000),
      });
      const body = (await response.json()) as { kvs?: Array<{ value?: string }> };
      const value = body.kvs?.[0]?.value;
      if (!value) return undefined;
      const sync = JSON.parse(Buffer.from(value, 'base64').toString('utf8')) as { leader?: string; sync_standby?: string | null };
      return { leader: sync.leader, standby: sync.sync_standby ?? undefined };
    } catch {
      return undefined;
    }
  }

  async failover(how: FailoverHow, _holdBackMs: number, beforeMove?: (primaryUrl: string, from: number) => Promise<void>): Promise<FailoverStep[]> {
    const old = await waitFor(() => this.leader(), 10_000, () => 'no leader before the failover');
    const t0 = mono();
    const promoted = async (from: Node, start: number, label: string): Promise<FailoverStep> => {
      // the nemesis's stale-token probes, on the new leader as soon as its REST API says so (HAProxy may be there first)
      const next = await waitFor(async () => {
        const leader = await this.leader();
        return leader !== from ? leader : undefined;
      }, 60_000, () => `no new leader after ${label}`, 50).catch(() => undefined);
      if (next) await beforeMove?.(next.url(), start);
      const reached = await this.primaryThroughRouter(from, 60_000);
      return { t0: start, t1: mono(), params: { how: label, leader: from.name, promoted: reached.name, promotedMs: Math.round(mono() - start) } };
    };
    if (how === 'switchover') {
      const response = await fetch(`http://127.0.0.1:${old.restPort}/switchover`, { method: 'POST', body: JSON.stringify({ leader: old.name }), signal: AbortSignal.timeout(60_000) });
      const text = await response.text();
      if (response.status !== 200) throw new Error(`switchover refused (${response.status}): ${text}`);
      this.repair = { how, nodes: [] };
      return [await promoted(old, t0, how)];
    }
    if (how === 'kill' || how === 'double') {
      const synchronous = this.options.synchronous;
      // double, asynchronous: from now on no replica can stream from another one
      if (how === 'double' && !synchronous) for (const n of this.nodes) if (n !== old) n.replicationProxy.setMode('blackhole');
      await old.kill();
      const first = await promoted(old, t0, how === 'kill' ? how : 'double-first');
      this.repair = { how, nodes: [old] };
      if (how === 'kill') return [first];
      const middle = this.nodes.find((n) => n.name === first.params.promoted) as Node;
      await sleep(2_000);
      if (synchronous) await this.waitForReplicas(60_000);
      const t2 = mono();
      await middle.kill();
      if (synchronous) {
        // the first victim comes back (pg_rewind onto the new timeline) as the last node's standby
        old.start(true);
        this.repair = { how: 'kill', nodes: [middle] };
      } else this.repair.nodes.push(middle);
      const second = await promoted(middle, t2, 'double-second');
      for (const n of this.nodes) n.replicationProxy.setMode('pass');
      return [first, second];
    }
    if (how === 'freeze') old.freeze();
    else old.etcdProxy.setMode('blackhole');
    this.repair = { how, nodes: [old] };
    return [await promoted(old, t0, how)];
  }

  async rebuildStandby(): Promise<number> {
    const t0 = mono();
    const repair = this.repair;
    this.repair = undefined;
    for (const node of repair?.nodes ?? []) {
      if (repair?.how === 'freeze') node.thaw();
      else if (repair?.how === 'etcd-cut') node.etcdProxy.setMode('pass');
      else {
        // a host that comes back; after two forks of one timeline number pg_rewind cannot tell
        // them apart, so those nodes are cloned afresh
        if (repair?.how === 'double') rmSync(node.dataDir, { recursive: true, force: true });
        node.start(this.options.synchronous);
      }
    }
    await this.waitForReplicas(120_000);
    return Math.round(mono() - t0);
  }

  stepClock(): boolean {
    return false;
  }

  async close(): Promise<void> {
    for (const node of this.nodes) await node.kill();
    await this.haproxy.kill();
    await this.etcd.kill();
    for (const node of this.nodes) await Promise.allSettled([node.etcdProxy.close(), node.replicationProxy.close()]);
    this.folder.remove();
  }
}
