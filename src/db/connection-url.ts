// What a connection string names, for messages and checks, never with its credentials.
// node-postgres (pg-connection-string) takes one host per URL: a libpq multi-host URL
// (postgres://h1:5432,h2:5432/db?target_session_attrs=read-write) is refused here, with what is
// supported, instead of failing later as "TypeError: Invalid URL" (with ports) or as an unknown
// host "h1,h2" (without).
import pg from 'pg';
import { InvalidArgumentError } from '../errors.js';

/** One host of a URL's authority as written: a name, an address, [IPv6] or a socket directory, and its port. */
export interface UrlHost {
  host: string;
  port: string;
}

/** The hosts of a postgres:// URL (several in a libpq multi-host URL); undefined for anything else. */
export function urlHosts(url: string): UrlHost[] | undefined {
  const authority = /^postgres(?:ql)?:\/\/([^/?#]*)/i.exec(url)?.[1];
  if (authority === undefined) return undefined;
  const hostPart = authority.slice(authority.lastIndexOf('@') + 1);
  // ?host= overrides the authority in node-postgres (a socket directory, usually)
  const hostParam = /[?&]host=([^&#]*)/.exec(url)?.[1];
  const list = hostParam !== undefined ? safeDecode(hostParam) : hostPart;
  return list.split(',').map((item) => {
    const bracketed = /^(\[[^\]]*\])(?::(.*))?$/.exec(item);
    if (bracketed) return { host: bracketed[1] ?? '', port: bracketed[2] ?? '' };
    const colon = item.lastIndexOf(':');
    return colon < 0 ? { host: safeDecode(item), port: '' } : { host: safeDecode(item.slice(0, colon)), port: item.slice(colon + 1) };
  });
}

/** host:port/database of a URL (each host of a multi-host one), for messages and logs. */
export function describeConnection(connectionString: string | undefined): string {
  if (!connectionString) return 'the PostgreSQL server from PG* environment variables';
  const hosts = urlHosts(connectionString);
  if (!hosts) return 'the configured PostgreSQL server';
  const path = /^[a-z]+:\/\/[^/?#]*(\/[^?#]*)?/i.exec(connectionString)?.[1] ?? '';
  return `${hosts.map(({ host, port }) => `${host || 'localhost'}:${port || '5432'}`).join(',')}${safeDecode(path)}`;
}

/**
 * Refuses what node-postgres cannot connect to as written: a URL with several hosts. `setting`
 * names where the URL came from ('DATABASE_URL', '--database-url', 'connectionString').
 */
export function checkConnectionString(url: string, setting: string): void {
  const hosts = urlHosts(url);
  if (!hosts || hosts.length < 2) return;
  const list = hosts.map(({ host, port }) => `${host}:${port || '5432'}`).join(', ');
  throw new InvalidArgumentError(
    setting,
    `${setting} names ${hosts.length} hosts (${list}): leasehold connects through node-postgres, which takes one host per URL ` +
      '(no libpq host list, target_session_attrs or failover between hosts). Give the one address that leads to the primary: ' +
      'a virtual IP, a DNS name or a proxy that follows failover (docs/high-availability.md).',
  );
}

/** Where and as whom node-postgres will log in, with its defaults (PG* variables, the OS user). */
export interface Login {
  /** host:port; the socket directory and port for a Unix socket. */
  server: string;
  host: string;
  port: number;
  user: string;
  database: string;
}

/** The login a pool or client with this configuration makes; undefined when node-postgres cannot read it. */
export function loginOf(config: pg.ClientConfig | undefined): Login | undefined {
  try {
    // a Client reads the configuration exactly as it will connect (it opens nothing until connect())
    const client = new pg.Client(config);
    const host = client.host || 'localhost';
    const user = client.user ?? '';
    return { server: `${host}:${client.port}`, host, port: client.port, user, database: client.database ?? user };
  } catch {
    return undefined;
  }
}

function safeDecode(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return text;
  }
}
