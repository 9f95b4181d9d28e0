/**
 * Where the operator may connect for a tenant's source that carries no credentials. A namespaced spec may name any
 * registry or Hub without credentials (a public one), and the operator then reads it from inside the cluster: left
 * unchecked, that is a request of the tenant's choice toward the cloud's metadata service (169.254.169.254), the
 * apiserver, another tenant's in-cluster services or the node's own loopback. So an anonymous source reaches only
 * public addresses unless the admin lists its host; the address is checked twice, before the resolution starts (a
 * clear condition) and on every connection the agent makes (a name that resolves elsewhere the second time, DNS
 * rebinding, still meets the rule).
 *
 * The ranges are the ones no public service answers on: loopback, link-local, private (RFC 1918, the usual pod,
 * service and node ranges), carrier-grade NAT, unique-local, unspecified and IPv4-mapped forms of them. Written with
 * node's BlockList: no library to add.
 */
import { BlockList, isIP } from 'node:net';
import { lookup as dnsLookup } from 'node:dns';
import type { LookupAddress, LookupOptions } from 'node:dns';
import { Agent, buildConnector } from 'undici';

const RANGES: readonly { name: string; family: 'ipv4' | 'ipv6'; net: string; prefix: number }[] = [
  { name: 'unspecified', family: 'ipv4', net: '0.0.0.0', prefix: 8 },
  { name: 'private', family: 'ipv4', net: '10.0.0.0', prefix: 8 },
  { name: 'carrier-grade NAT', family: 'ipv4', net: '100.64.0.0', prefix: 10 },
  { name: 'loopback', family: 'ipv4', net: '127.0.0.0', prefix: 8 },
  { name: 'link-local', family: 'ipv4', net: '169.254.0.0', prefix: 16 },
  { name: 'private', family: 'ipv4', net: '172.16.0.0', prefix: 12 },
  { name: 'private', family: 'ipv4', net: '192.168.0.0', prefix: 16 },
  { name: 'unspecified', family: 'ipv6', net: '::', prefix: 128 },
  { name: 'loopback', family: 'ipv6', net: '::1', prefix: 128 },
  { name: 'unique-local', family: 'ipv6', net: 'fc00::', prefix: 7 },
  { name: 'link-local', family: 'ipv6', net: 'fe80::', prefix: 10 },
];

const LISTS = RANGES.map((r) => {
  const list = new BlockList();
  list.addSubnet(r.net, r.prefix, r.family);
  return { name: r.name, list };
});

/** The kind of internal address `address` is (`loopback`, `link-local`, `private`...), or undefined: public. */
export function internalRange(address: string): string | undefined {
  const family = isIP(address);
  if (family === 0) return undefined;
  // An IPv4-mapped IPv6 address (::ffff:127.0.0.1) is the IPv4 address it maps.
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address)?.[1];
  if (mapped) return internalRange(mapped);
  const type = family === 4 ? 'ipv4' : 'ipv6';
  return LISTS.find((l) => l.list.check(address, type))?.name;
}

/** A connection an anonymous source may not make: the host resolved to an internal address. */
export class EgressRefusedError extends Error {
  readonly code = 'EGRESS_NOT_ALLOWED';
  readonly host: string;
  readonly address: string;
  readonly range: string;
  constructor(host: string, address: string, range: string) {
    const at = host === address ? '' : ` at ${address}`;
    super(`${host}${at} is a ${range} address: a source without credentials reaches public addresses only`);
    this.name = 'EgressRefusedError';
    this.host = host;
    this.address = address;
    this.range = range;
  }
}

/** A name resolver as node's dns.lookup takes `all: true` (tests give their own). */
export type EgressLookup = (
  hostname: string,
  options: LookupOptions & { all: true },
  callback: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
) => void;

const systemLookup: EgressLookup = (hostname, options, callback) => dnsLookup(hostname, options, callback);

/** The first internal address `host` is or resolves to, or undefined (public, or not resolvable: the request
 *  then fails on its own). */
export async function internalAddressOf(
  host: string,
  lookup: EgressLookup = systemLookup,
): Promise<{ address: string; range: string } | undefined> {
  const bare = host.replace(/^\[|\]$/g, '');
  const addresses = isIP(bare)
    ? [bare]
    : await new Promise<string[]>((resolve) =>
        lookup(bare, { all: true }, (err, found) => resolve(err ? [] : found.map((a) => a.address))),
      );
  for (const address of addresses) {
    const range = internalRange(address);
    if (range) return { address, range };
  }
  return undefined;
}

/**
 * Why an anonymous source at `url` may not be read, or undefined: its host is listed by the admin (`allowed`), or
 * every address it resolves to is public.
 */
export async function egressRefusal(
  url: string,
  allowed: (url: string) => boolean,
  lookup?: EgressLookup,
): Promise<EgressRefusedError | undefined> {
  if (allowed(url)) return undefined;
  const host = new URL(url).hostname;
  const found = await internalAddressOf(host, lookup);
  return found && new EgressRefusedError(host.replace(/^\[|\]$/g, ''), found.address, found.range);
}

/**
 * An undici Agent whose every connection meets the rule: toward an origin `allowed` does not list, a host that is
 * or resolves to an internal address is refused before a byte is sent ({@link EgressRefusedError}).
 */
export function egressGuardedAgent(
  allowed: (url: string) => boolean,
  lookup: EgressLookup = systemLookup,
): Agent {
  const guardedLookup = (
    hostname: string,
    options: LookupOptions,
    callback: (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void,
  ) =>
    lookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, []);
      const bad = addresses.find((a) => internalRange(a.address));
      if (bad)
        return callback(new EgressRefusedError(hostname, bad.address, internalRange(bad.address)!), []);
      if (options.all) return callback(null, addresses);
      callback(null, addresses[0]!.address, addresses[0]!.family);
    });
  const guarded = buildConnector({ lookup: guardedLookup } as buildConnector.BuildOptions);
  const listed = buildConnector({});
  return new Agent({
    connect: (options, callback) => {
      const url = `${options.protocol}//${options.hostname}${options.port ? `:${options.port}` : ''}`;
      if (allowed(url)) return listed(options, callback);
      const bare = options.hostname.replace(/^\[|\]$/g, '');
      const range = isIP(bare) ? internalRange(bare) : undefined;
      if (range) return callback(new EgressRefusedError(bare, bare, range), null);
      // A name: the guarded lookup checks what it resolves to on this connection.
      return guarded(options, callback);
    },
  });
}
