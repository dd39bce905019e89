// A loopback TCP fault proxy: each worker connects to PostgreSQL through its own listener,
// so the nemesis can cut one worker off while the others carry on.
//
// Modes (measured on these machines; see faults/README.md):
// - pass: bytes flow both ways.
// - blackhole: stop reading both sockets of every connection (new ones too). Bytes wait in
//   kernel buffers, as in a partition that later heals; nothing is lost or reordered, so the
//   PostgreSQL protocol stays in sync after the heal. The server sees an idle, healthy
//   socket (the proxy's), so only TTLs and the server's idle-in-transaction timeout help.
// - drop: reset both sides of every connection (RST) and reset new connections at once,
//   until the mode changes: the worker is cut off and knows it; the server ends the
//   sessions at once (their advisory locks go with them).
import { createServer, connect, type Server, type Socket } from 'node:net';

export type ProxyMode = 'pass' | 'blackhole' | 'drop';

interface Pair {
  client: Socket;
  upstream: Socket;
  paused: boolean;
  /** Its server is no longer behind this address (see retarget). */
  orphaned: boolean;
}

/**
 * What a retarget does to open connections:
 * - keep: they stay with the old server, as after a DNS change (a hung server keeps them silent);
 * - reset-on-send: as after a moved virtual IP, the old server's answers no longer arrive, and
 *   the client's next packet is answered with a reset; an idle connection notices nothing;
 * - reset: reset at once.
 */
export type RetargetExisting = 'keep' | 'reset-on-send' | 'reset';

export class FaultProxy {
  private server: Server | undefined;
  private readonly pairs = new Set<Pair>();
  private current: ProxyMode = 'pass';
  port = 0;
  /** Connections accepted (for the report). */
  accepted = 0;

  constructor(
    private upstreamPort: number,
    private upstreamHost = '127.0.0.1',
  ) {}

  /** Sends new connections to another server (failover tests); see RetargetExisting for the open ones. */
  retarget(port: number, existing: RetargetExisting, host = this.upstreamHost): void {
    this.upstreamPort = port;
    this.upstreamHost = host;
    for (const pair of [...this.pairs]) {
      if (existing === 'reset') this.reset(pair);
      else if (existing === 'reset-on-send') {
        pair.orphaned = true;
        pair.upstream.destroy();
      }
    }
  }

  get mode(): ProxyMode {
    return this.current;
  }

  async listen(): Promise<number> {
    const server = createServer((client) => this.accept(client));
    server.on('error', () => undefined);
    this.server = server;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, '127.0.0.1', () => resolve());
    });
    const address = server.address();
    this.port = typeof address === 'object' && address ? address.port : 0;
    return this.port;
  }

  /** The local ports of the proxy's connections to the server (pg_stat_activity.client_port). */
  upstreamPorts(): number[] {
    const ports: number[] = [];
    for (const pair of this.pairs) if (pair.upstream.localPort) ports.push(pair.upstream.localPort);
    return ports;
  }

  setMode(mode: ProxyMode): void {
    this.current = mode;
    for (const pair of [...this.pairs]) {
      if (mode === 'blackhole') this.pause(pair);
      else if (mode === 'drop') this.reset(pair);
      else this.resume(pair);
    }
  }

  async close(): Promise<void> {
    for (const pair of [...this.pairs]) this.reset(pair);
    await new Promise<void>((resolve) => (this.server ? this.server.close(() => resolve()) : resolve()));
  }

  private accept(client: Socket): void {
    this.accepted++;
    client.on('error', () => undefined);
    if (this.current === 'drop') {
      client.resetAndDestroy();
      return;
    }
    const upstream = connect(this.upstreamPort, this.upstreamHost);
    upstream.setNoDelay(true);
    client.setNoDelay(true);
    const pair: Pair = { client, upstream, paused: false, orphaned: false };
    this.pairs.add(pair);
    upstream.on('error', () => {
      // the server went away (restart) or refused: let the client see a reset
      if (!pair.orphaned && !client.destroyed) client.resetAndDestroy();
    });
    // Manual forwarding rather than pipe(): pipe() resumes a paused source when the
    // destination drains, which would quietly heal a blackhole.
    client.on('data', (chunk) => {
      if (pair.orphaned) this.reset(pair);
      else if (!upstream.destroyed) upstream.write(chunk);
    });
    upstream.on('data', (chunk) => {
      if (!pair.orphaned && !client.destroyed) client.write(chunk);
    });
    client.on('end', () => upstream.end());
    upstream.on('end', () => {
      if (!pair.orphaned) client.end();
    });
    const done = () => {
      this.pairs.delete(pair);
      if (!client.destroyed) client.destroy();
      if (!upstream.destroyed) upstream.destroy();
    };
    client.on('close', done);
    upstream.on('close', () => {
      if (!pair.orphaned) done();
    });
    if (this.current === 'blackhole') this.pause(pair);
  }

  private pause(pair: Pair): void {
    pair.paused = true;
    pair.client.pause();
    pair.upstream.pause();
  }

  private resume(pair: Pair): void {
    if (!pair.paused) return;
    pair.paused = false;
    pair.client.resume();
    pair.upstream.resume();
  }

  private reset(pair: Pair): void {
    this.pairs.delete(pair);
    if (!pair.client.destroyed) pair.client.resetAndDestroy();
    if (!pair.upstream.destroyed) pair.upstream.resetAndDestroy();
  }
}
