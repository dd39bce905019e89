// The fault suite's replicated database: a primary with a streaming standby (faults/replication.ts),
// every client behind a proxy that follows the primary, optionally both servers under libfaketime
// with one shared offset file (database clock steps).
//
// A failover freezes or kills the primary (after holding replication back, in asynchronous mode,
// so that acknowledged commits are lost as they would be), promotes the standby, moves every proxy
// to it, and then builds a fresh standby of the new primary with the backup API for the next
// failover. In synchronous mode the new primary waits for that standby only once it has caught up.
import pg from 'pg';
import { SteppedClock } from '../src/testing/faketime.js';
import { mono, sleep } from './common.js';
import { FaultProxy } from './proxy.js';
import { findBinaries, type PgServer } from './pg-server.js';
import { ClusterTemplate, type ReplicationMode } from './replication.js';
import type { FailoverHow, FailoverStep, FailoverTopology } from './topology.js';

export interface HaClusterOptions {
  replication: ReplicationMode;
  /** libfaketime to run the servers under (clock steps), or undefined for the real clock. */
  libfaketime: string | undefined;
  /** Runs once against the template (schema, test tables), before any copy is made. */
  prepare: (url: string) => Promise<void>;
}

export class HaCluster implements FailoverTopology {
  readonly supports: readonly FailoverHow[] = ['kill', 'freeze', 'double'];
  /** Every client's address: the admin connection's proxy, and the workers' (see follow()). */
  private readonly proxies: FaultProxy[] = [];
  private replicationProxy: FaultProxy | undefined;
  private generation = 1;
  private offsetSeconds = 0;
  private fenced: PgServer | undefined;

  private constructor(
    private readonly template: ClusterTemplate,
    private readonly options: HaClusterOptions,
    readonly adminProxy: FaultProxy,
    private primary: PgServer,
    private standby: PgServer | undefined,
    private readonly clock: SteppedClock | undefined,
  ) {}

  static async create(options: HaClusterOptions): Promise<HaCluster> {
    const binaries = await findBinaries('embedded');
    if (typeof binaries === 'string') throw new Error(binaries);
    let clock: SteppedClock | undefined;
    const template = await ClusterTemplate.create(binaries, options.prepare);
    try {
      if (options.libfaketime) {
        clock = SteppedClock.create(options.libfaketime, 'leasehold-faults-clock-');
        template.environment = clock.env;
      }
      const adminProxy = new FaultProxy(1);
      await adminProxy.listen();
      const pair = await template.pair(options.replication, adminProxy);
      const cluster = new HaCluster(template, options, adminProxy, pair.primary, pair.standby, clock);
      cluster.replicationProxy = pair.replicationProxy;
      cluster.proxies.push(adminProxy);
      return cluster;
    } catch (error) {
      template.close();
      clock?.close();
      throw error;
    }
  }

  /** The admin URL (superuser, database postgres), through the admin proxy. */
  get url(): string {
    return `postgres://postgres@127.0.0.1:${this.adminProxy.port}/postgres`;
  }

  get primaryPort(): number {
    return this.primary.port;
  }

  /** The workers' proxies connect to the primary itself, and are moved at each failover. */
  get upstreamPort(): number {
    return this.primary.port;
  }

  get clockSteps(): boolean {
    return this.clock !== undefined;
  }

  /** A proxy that must follow the primary across failovers. */
  follow(proxy: FaultProxy): void {
    this.proxies.push(proxy);
  }

  /**
   * Fails over to the standby (`double`: twice in a row, see failoverTwice). Returns when the
   * clients can reach the new primary; rebuildStandby() then builds the next standby.
   * params of each step: how, holdBackMs (replication held back before the primary went away,
   * asynchronous mode), promotedMs (from the primary going away to the proxies moved, probes included).
   */
  async failover(how: FailoverHow, holdBackMs: number, beforeMove?: (primaryUrl: string, from: number) => Promise<void>): Promise<FailoverStep[]> {
    if (how === 'double') return this.failoverTwice(beforeMove);
    if (how !== 'kill' && how !== 'freeze') throw new Error(`the suite's own cluster cannot fail over by ${how}`);
    const standby = this.standby;
    if (!standby) throw new Error('no standby to fail over to');
    const old = this.primary;
    const held = this.options.replication === 'async' ? holdBackMs : 0;
    const from = mono();
    if (held > 0) {
      // acknowledged commits pile up on the primary only, then the primary goes away
      this.replicationProxy?.setMode('blackhole');
      await sleep(held);
    }
    const t0 = mono();
    if (how === 'kill') await old.kill();
    else old.freeze();
    await standby.promote();
    // e.g. a client with a dead token that reaches the new primary first
    await beforeMove?.(standby.url(), from);
    for (const proxy of this.proxies) proxy.retarget(standby.port, 'reset-on-send');
    const promotedMs = Math.round(mono() - t0);
    this.primary = standby;
    this.standby = undefined;
    // a frozen old primary stays frozen (its clients' connections silent) until the next
    // standby is built; then it is killed while still stopped, never thawed
    if (this.fenced && this.fenced !== old) await this.fenced.kill();
    this.fenced = old;
    await this.replicationProxy?.close();
    return [{ t0: from, t1: mono(), params: { how, holdBackMs: held, promotedMs } }];
  }

  /**
   * Two promotions in a row (issue: two failovers hand out one fence twice): a second standby of
   * the primary, then the primary killed and the first standby promoted; the clients work on it
   * for `dwellMs`; it is killed before the second standby followed it (that one still streams
   * from the dead primary), and the second is promoted. Both promoted servers are on the same
   * timeline number, each on its own fork of history; what the first acknowledged is lost.
   */
  private async failoverTwice(beforeMove: ((primaryUrl: string, from: number) => Promise<void>) | undefined, dwellMs = 2_000): Promise<FailoverStep[]> {
    const spareProxy = new FaultProxy(this.primary.port);
    await spareProxy.listen();
    const spare = await this.template.standbyOf(this.primary, spareProxy, `spare${++this.generation}`, 'spare');
    const [first] = await this.failover('kill', 0, beforeMove);
    await sleep(dwellMs);
    this.standby = spare;
    this.replicationProxy = spareProxy;
    const [second] = await this.failover('kill', 0, beforeMove);
    if (!first || !second) throw new Error('a promotion of the two did not happen');
    return [
      { ...first, params: { ...first.params, how: 'double-first' } },
      { ...second, params: { ...second.params, how: 'double-second' } },
    ];
  }

  /** A fresh standby of the current primary; in synchronous mode, commits wait for it again. */
  async rebuildStandby(): Promise<number> {
    const t0 = mono();
    const replicationProxy = new FaultProxy(this.primary.port);
    await replicationProxy.listen();
    this.replicationProxy = replicationProxy;
    this.generation++;
    this.standby = await this.template.standbyOf(this.primary, replicationProxy, `standby${this.generation}`);
    if (this.options.replication === 'sync') {
      const client = new pg.Client({ connectionString: this.primary.url(), connectionTimeoutMillis: 10_000 });
      client.on('error', () => undefined);
      await client.connect();
      try {
        await client.query(`alter system set synchronous_standby_names = 'standby'`);
        await client.query('select pg_reload_conf()');
      } finally {
        await client.end().catch(() => undefined);
      }
    }
    await this.fenced?.kill();
    this.fenced = undefined;
    return Math.round(mono() - t0);
  }

  /** Steps both servers' clocks by `seconds` (cumulative); false when there is no libfaketime. */
  stepClock(seconds: number): boolean {
    if (!this.clock) return false;
    this.offsetSeconds += seconds;
    this.clock.set(`${this.offsetSeconds >= 0 ? '+' : ''}${this.offsetSeconds}s`);
    return true;
  }

  async close(): Promise<void> {
    await this.replicationProxy?.close().catch(() => undefined);
    await this.adminProxy.close().catch(() => undefined);
    for (const server of [this.primary, this.standby, this.fenced]) {
      if (!server) continue;
      if (server.frozen) server.thaw();
      await server.kill().catch(() => undefined);
    }
    this.template.close();
    this.clock?.close();
  }
}
