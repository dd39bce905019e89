// A pg_auto_failover formation built from Debian's package (postgresql-15-auto-failover,
// `pg_autoctl`) on loopback: a monitor and two PostgreSQL nodes, each under its pg_autoctl
// keeper. pg_auto_failover has no router of its own (clients use libpq multi-host strings with
// target_session_attrs=read-write, which node-postgres lacks), so the clients' address is a proxy
// moved to the node the monitor names primary, as a tool would move a virtual IP.
//
// - switchover: `pg_autoctl perform switchover` (planned);
// - kill: SIGKILL to the primary's keeper and every PostgreSQL process (the host dies);
// - freeze: SIGSTOP to the same (a hung host), thawed once the other node is primary.
//
// Synchronous: the standby in the replication quorum (pg_auto_failover's default; the primary
// stops waiting for it when the monitor sees it gone: wait_primary). Asynchronous: the standby
// created with --replication-quorum false. The monitor's health checks run every second.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { freePort } from '../../src/db/embedded.js';
import { mono } from '../common.js';
import type { RunAs } from '../pg-server.js';
import { FaultProxy } from '../proxy.js';
import type { FailoverHow, FailoverStep, FailoverTopology } from '../topology.js';
import { alive, Daemon, findProgram, postmasterPid, run, runAsync, serverUser, signal, sleep, trackDataDir, tree, waitFor, workFolder } from './host.js';
import { PG_BINDIR } from './patroni.js';

const WRITABLE = ['single', 'primary', 'wait_primary'];
// the monitor's failure detection, shortened from its defaults (5 s checks, 20 s unhealthy)
const MONITOR_SETTINGS: Record<string, string> = {
  'pgautofailover.health_check_period': '1000',
  'pgautofailover.health_check_timeout': '1000',
  'pgautofailover.health_check_max_retries': '1',
  'pgautofailover.health_check_retry_delay': '500',
  'pgautofailover.node_considered_unhealthy_timeout': '3000',
  'pgautofailover.primary_demote_timeout': '10000',
};

export function autoFailoverMissing(): string | undefined {
  const missing: string[] = [];
  if (!findProgram('pg_autoctl')) missing.push('pg_autoctl');
  for (const program of ['postgres', 'pg_ctl', 'pg_basebackup']) if (!existsSync(join(PG_BINDIR, program))) missing.push(join(PG_BINDIR, program));
  if (missing.length) return `${missing.join(', ')} not installed (Debian package postgresql-15-auto-failover)`;
  const user = serverUser();
  return typeof user === 'string' ? user : undefined;
}

interface Keeper {
  name: string;
  dataDir: string;
  port: number;
  daemon: Daemon | undefined;
  frozen: boolean;
  args: string[];
}

export class AutoFailoverCluster implements FailoverTopology {
  readonly supports: readonly FailoverHow[] = ['switchover', 'kill', 'freeze'];
  readonly clockSteps = false;
  private readonly proxies: FaultProxy[] = [];
  private primary: Keeper | undefined;
  private repair: { how: FailoverHow; node: Keeper } | undefined;

  private constructor(
    private readonly folder: { path: string; remove: () => void },
    private readonly user: RunAs | undefined,
    private readonly monitor: Keeper,
    private readonly nodes: Keeper[],
    private readonly adminProxy: FaultProxy,
  ) {
    this.proxies.push(adminProxy);
  }

  static async create(options: { synchronous: boolean; prepare: (url: string) => Promise<void> }): Promise<AutoFailoverCluster> {
    const missing = autoFailoverMissing();
    if (missing) throw new Error(`the pg_auto_failover topology cannot be built: ${missing}`);
    const user = serverUser() as RunAs | undefined;
    const folder = workFolder('leasehold-autofailover-', user);
    const keeper = async (name: string, args: string[]): Promise<Keeper> => ({ name, dataDir: join(folder.path, name), port: await freePort(), daemon: undefined, frozen: false, args });
    const common = ['--hostname', '127.0.0.1', '--auth', 'trust', '--no-ssl', '--pgctl', join(PG_BINDIR, 'pg_ctl')];
    const monitor = await keeper('monitor', ['create', 'monitor', ...common]);
    const monitorUrl = `postgres://autoctl_node@127.0.0.1:${monitor.port}/pg_auto_failover`;
    const nodes = [
      await keeper('node1', ['create', 'postgres', ...common, '--name', 'node1', '--monitor', monitorUrl]),
      await keeper('node2', ['create', 'postgres', ...common, '--name', 'node2', '--monitor', monitorUrl, ...(options.synchronous ? [] : ['--replication-quorum', 'false'])]),
    ];
    const adminProxy = new FaultProxy(1);
    await adminProxy.listen();
    const cluster = new AutoFailoverCluster(folder, user, monitor, nodes, adminProxy);
    try {
      cluster.start(monitor, true);
      await waitFor(() => cluster.states().then(() => true), 60_000, () => `the monitor did not start\n${cluster.logs()}`, 200);
      const admin = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${monitor.port}/pg_auto_failover` });
      await admin.connect();
      for (const [name, value] of Object.entries(MONITOR_SETTINGS)) await admin.query(`alter system set ${name} = '${value}'`);
      await admin.query('select pg_reload_conf()');
      await admin.end();
      cluster.start(nodes[0] as Keeper, true);
      await cluster.writableThroughProxy(undefined, 90_000);
      await options.prepare(cluster.url);
      cluster.start(nodes[1] as Keeper, true);
      await cluster.waitForStandby(120_000);
      return cluster;
    } catch (error) {
      await cluster.close();
      throw error;
    }
  }

  private start(node: Keeper, create: boolean): void {
    const home = join(this.folder.path, `${node.name}-home`);
    mkdirSync(home, { recursive: true });
    if (this.user) run('chown', ['-R', `${this.user.uid}:${this.user.gid}`, home], undefined);
    trackDataDir(node.dataDir);
    const args = create ? [...node.args, '--pgdata', node.dataDir, '--pgport', String(node.port), '--run'] : ['run', '--pgdata', node.dataDir];
    node.daemon = new Daemon(node.name, findProgram('pg_autoctl') as string, args, { user: this.user, cwd: home, env: this.environment(node) });
  }

  /** pg_autoctl keeps its configuration and state under XDG folders: one home per node. */
  private environment(node: Keeper): Record<string, string> {
    const home = join(this.folder.path, `${node.name}-home`);
    return { HOME: home, XDG_CONFIG_HOME: join(home, 'config'), XDG_DATA_HOME: join(home, 'data'), XDG_RUNTIME_DIR: join(home, 'run'), PATH: `${PG_BINDIR}:${process.env.PATH ?? ''}`, PG_CONFIG: join(PG_BINDIR, 'pg_config') };
  }

  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.adminProxy.port}/postgres`;
  }

  get upstreamPort(): number {
    return this.primary?.port ?? 1;
  }

  follow(proxy: FaultProxy): void {
    this.proxies.push(proxy);
  }

  logs(): string {
    return [this.monitor, ...this.nodes].map((k) => k.daemon?.log().slice(-4_000) ?? '').join('\n');
  }

  /** The monitor's view: node name -> reported and goal state. */
  private async states(): Promise<Map<string, { reported: string; goal: string }>> {
    const client = new pg.Client({ connectionString: `postgres://autoctl_node@127.0.0.1:${this.monitor.port}/pg_auto_failover`, connectionTimeoutMillis: 1_000 });
    client.on('error', () => undefined);
    try {
      await client.connect();
      const { rows } = await client.query<{ nodename: string; reportedstate: string; goalstate: string }>('select nodename, reportedstate::text, goalstate::text from pgautofailover.node');
      return new Map(rows.map((r) => [r.nodename, { reported: r.reportedstate, goal: r.goalstate }]));
    } finally {
      await client.end().catch(() => undefined);
    }
  }

  /**
   * Moves the clients' address to the node the monitor has made primary (reported and goal
   * state writable) once it takes a write; resolves with it.
   */
  private async writableThroughProxy(old: Keeper | undefined, timeoutMs: number): Promise<Keeper> {
    return waitFor(async () => {
      const states = await this.states();
      const node = this.nodes.find((n) => n !== old && WRITABLE.includes(states.get(n.name)?.reported ?? '') && WRITABLE.includes(states.get(n.name)?.goal ?? ''));
      if (!node) return undefined;
      const client = new pg.Client({ connectionString: `postgres://postgres@127.0.0.1:${node.port}/postgres`, connectionTimeoutMillis: 1_000, query_timeout: 2_000 } as pg.ClientConfig);
      client.on('error', () => undefined);
      try {
        await client.connect();
        await client.query('select txid_current()');
      } finally {
        await client.end().catch(() => undefined);
      }
      if (this.primary !== node) for (const proxy of this.proxies) proxy.retarget(node.port, 'reset');
      this.primary = node;
      return node;
    }, timeoutMs, () => `no writable primary other than ${old?.name ?? 'none'}\n${this.logs()}`, 100);
  }

  private async waitForStandby(timeoutMs: number): Promise<void> {
    await waitFor(async () => {
      const states = [...(await this.states()).values()];
      return states.filter((s) => s.reported === 'primary' && s.goal === 'primary').length === 1 && states.filter((s) => s.reported === 'secondary' && s.goal === 'secondary').length === 1;
    }, timeoutMs, () => `the formation did not reach primary + secondary\n${this.logs()}`, 250);
  }

  private pids(node: Keeper): number[] {
    return [...tree(node.daemon?.pid ?? 0), ...tree(postmasterPid(node.dataDir))];
  }

  private async kill(node: Keeper): Promise<void> {
    const pids = this.pids(node);
    for (const pid of pids) signal(pid, 'SIGCONT');
    for (const pid of pids) signal(pid, 'SIGKILL');
    node.frozen = false;
    await node.daemon?.kill();
    await waitFor(() => pids.every((pid) => !alive(pid)), 10_000, () => `${node.name} did not die`).catch(() => undefined);
  }

  async failover(how: FailoverHow, _holdBackMs: number, beforeMove?: (primaryUrl: string, from: number) => Promise<void>): Promise<FailoverStep[]> {
    const old = this.primary;
    if (!old) throw new Error('no primary');
    const t0 = mono();
    if (how === 'switchover') {
      await runAsync(findProgram('pg_autoctl') as string, ['perform', 'switchover', '--pgdata', old.dataDir], this.user, this.environment(old));
    } else if (how === 'kill') await this.kill(old);
    else if (how === 'freeze') {
      old.frozen = true;
      for (const pid of this.pids(old)) signal(pid, 'SIGSTOP');
    } else throw new Error(`pg_auto_failover scenarios do not include ${how}`);
    this.repair = { how, node: old };
    const next = this.nodes.find((n) => n !== old) as Keeper;
    await waitFor(async () => WRITABLE.includes((await this.states()).get(next.name)?.goal ?? ''), 90_000, () => `the monitor did not promote ${next.name}\n${this.logs()}`, 50);
    await beforeMove?.(`postgres://postgres@127.0.0.1:${next.port}/postgres`, t0);
    const reached = await this.writableThroughProxy(old, 90_000);
    return [{ t0, t1: mono(), params: { how, leader: old.name, promoted: reached.name, promotedMs: Math.round(mono() - t0) } }];
  }

  async rebuildStandby(): Promise<number> {
    const t0 = mono();
    const repair = this.repair;
    this.repair = undefined;
    if (repair?.how === 'freeze') {
      repair.node.frozen = false;
      for (const pid of this.pids(repair.node)) signal(pid, 'SIGCONT');
    } else if (repair?.how === 'kill') this.start(repair.node, false);
    await this.waitForStandby(120_000);
    return Math.round(mono() - t0);
  }

  stepClock(): boolean {
    return false;
  }

  async close(): Promise<void> {
    for (const node of [...this.nodes, this.monitor]) await this.kill(node);
    await this.adminProxy.close().catch(() => undefined);
    await sleep(0);
    this.folder.remove();
  }
}
