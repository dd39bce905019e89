// A small GET-only HTTP server for a worker's operational endpoints (/metrics, /healthz,
// /readyz): no framework, no authentication, bound to one interface.
import http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface EndpointReply {
  status: number;
  type: string;
  body: string;
}

export interface EndpointServer {
  /** e.g. http://127.0.0.1:9464 (no trailing slash) */
  readonly origin: string;
  readonly port: number;
  close(): Promise<void>;
}

const TEXT = 'text/plain; charset=utf-8';

/**
 * Serves `routes` (path → handler) on `port`. Rejects when the port cannot be bound, naming
 * `flag` (the option that chose the port) when it is busy.
 */
export async function serveEndpoints(routes: Record<string, () => Promise<EndpointReply>>, options: { port: number; host?: string; flag: string }): Promise<EndpointServer> {
  const host = options.host ?? '127.0.0.1';
  const { port, flag } = options;
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new RangeError(`${flag} must be an integer 0–65535 (got ${port})`);
  const paths = Object.keys(routes);
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0] ?? '/';
    const reply = ({ status, type, body }: EndpointReply) => {
      res.writeHead(status, { 'Content-Type': type, 'Cache-Control': 'no-store', 'X-Content-Type-Options': 'nosniff' });
      res.end(req.method === 'HEAD' ? undefined : body);
    };
    if (req.method !== 'GET' && req.method !== 'HEAD') return reply({ status: 405, type: TEXT, body: `GET ${paths.join(', ')} only\n` });
    const route = Object.hasOwn(routes, path) ? routes[path] : undefined;
    if (!route) return reply({ status: 404, type: TEXT, body: `not found: this server answers ${paths.join(', ')}\n` });
    route().then(reply, () => reply({ status: 500, type: TEXT, body: `${path} failed\n` }));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (error: NodeJS.ErrnoException) =>
      reject(error.code === 'EADDRINUSE' ? new Error(`cannot serve ${paths.join(', ')}: port ${port} on ${host} is already in use (choose another ${flag})`, { cause: error }) : error),
    );
    server.listen(port, host, () => resolve());
  });
  server.on('error', () => undefined);
  const bound = (server.address() as AddressInfo).port;
  return {
    origin: `http://${host.includes(':') ? `[${host}]` : host}:${bound}`,
    port: bound,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}
