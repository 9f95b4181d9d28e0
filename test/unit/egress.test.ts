/**
 * Where an anonymous source may make the operator connect (src/http/egress.ts): internal addresses (loopback,
 * link-local, private, unique-local, their IPv4-mapped forms) only for hosts the admin lists; the check on names
 * is on what they resolve to, before the resolution and again on every connection.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  EgressRefusedError,
  egressGuardedAgent,
  egressRefusal,
  internalRange,
} from '../../src/http/egress.ts';

describe('internalRange', () => {
  it.each([
    ['127.0.0.1', 'loopback'],
    ['127.255.0.9', 'loopback'],
    ['169.254.169.254', 'link-local'],
    ['10.96.0.1', 'private'],
    ['172.20.3.4', 'private'],
    ['192.168.1.1', 'private'],
    ['100.64.0.10', 'carrier-grade NAT'],
    ['0.0.0.0', 'unspecified'],
    ['::1', 'loopback'],
    ['fe80::1', 'link-local'],
    ['fd00:ec2::254', 'unique-local'],
    ['::ffff:169.254.169.254', 'link-local'],
    ['::ffff:127.0.0.1', 'loopback'],
  ])('%s is %s', (address, range) => {
    expect(internalRange(address)).toBe(range);
  });

  it.each(['8.8.8.8', '172.32.0.1', '192.169.0.1', '2001:4860:4860::8888', 'huggingface.co'])(
    '%s is public (or not an address)',
    (address) => {
      expect(internalRange(address)).toBeUndefined();
    },
  );
});

/** A resolver that answers `addresses` for every name. */
const resolvesTo =
  (...addresses: string[]) =>
  (
    _host: string,
    _o: unknown,
    cb: (e: NodeJS.ErrnoException | null, a: { address: string; family: number }[]) => void,
  ) =>
    cb(
      null,
      addresses.map((address) => ({ address, family: address.includes(':') ? 6 : 4 })),
    );
const none = () => false;

describe('egressRefusal: before a resolution', () => {
  it('a name resolving to the metadata service is refused, naming the host, the address and the range', async () => {
    const refused = await egressRefusal(
      'http://hub.attacker.example/api',
      none,
      resolvesTo('93.184.216.34', '169.254.169.254'),
    );
    expect(refused).toBeInstanceOf(EgressRefusedError);
    expect(refused?.message).toBe(
      'hub.attacker.example at 169.254.169.254 is a link-local address: a source without credentials reaches public addresses only',
    );
  });

  it('an address literal is refused without a lookup; a listed host or a public one passes', async () => {
    expect((await egressRefusal('http://[::1]:5000/', none))?.range).toBe('loopback');
    expect(
      await egressRefusal('http://10.0.0.5:5000/', (u) => u.startsWith('http://10.0.0.5')),
    ).toBeUndefined();
    expect(
      await egressRefusal('https://registry.example/', none, resolvesTo('93.184.216.34')),
    ).toBeUndefined();
  });
});

describe('egressGuardedAgent: on every connection', () => {
  let server: Server;
  let port: number;
  beforeAll(async () => {
    server = createServer((_q, res) => res.end('internal secret'));
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
  });
  afterAll(() => new Promise<void>((r) => server.close(() => r())));

  it('refuses a loopback literal and a name that resolves to loopback, before a byte is sent', async () => {
    const agent = egressGuardedAgent(none, resolvesTo('127.0.0.1'));
    try {
      const literal = await agent
        .request({ origin: `http://127.0.0.1:${port}`, path: '/', method: 'GET' })
        .catch((e: unknown) => e);
      expect((literal as Error).message).toMatch(/127\.0\.0\.1 is a loopback address/);
      // A name that resolved to a public address before the resolution and to loopback now (rebinding).
      const named = await agent
        .request({ origin: `http://rebind.example:${port}`, path: '/', method: 'GET' })
        .catch((e: unknown) => e);
      expect((named as Error).message).toMatch(/rebind\.example at 127\.0\.0\.1 is a loopback address/);
    } finally {
      await agent.close();
    }
  });

  it('connects to a host the admin lists', async () => {
    const agent = egressGuardedAgent((u) => u === `http://127.0.0.1:${port}`);
    try {
      const res = await agent.request({ origin: `http://127.0.0.1:${port}`, path: '/', method: 'GET' });
      expect(await res.body.text()).toBe('internal secret');
    } finally {
      await agent.close();
    }
  });
});
