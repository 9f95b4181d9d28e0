/** discoverReplicas: the replicas of a ServedModel from its Service's EndpointSlices (or its static endpoints). */
import { describe, expect, it } from 'vitest';
import { ServedModelSpec } from '../../src/api/index.ts';
import { discoverReplicas, type EndpointSlice } from '../../src/controllers/servedmodel/replicas.ts';

const spec = (modelServer: Record<string, unknown>) =>
  ServedModelSpec.parse({ modelName: 'm', fileName: 'm.mar', modelServer });
const byService = (port?: string | number, scheme?: 'http' | 'https') =>
  spec({ service: { name: 'ts', ...(port !== undefined ? { port } : {}) }, ...(scheme ? { scheme } : {}) });

const slice = (
  addressType: string,
  addresses: string[],
  ports: EndpointSlice['ports'] = [{ name: 'management', port: 8081 }],
  name = 'ts-abc',
): EndpointSlice => ({
  metadata: { name, labels: { 'kubernetes.io/service-name': 'ts' } },
  addressType,
  ports,
  endpoints: addresses.map((a, i) => ({
    addresses: [a],
    targetRef: { kind: 'Pod', name: `ts-${i}`, uid: `uid-${i}` },
  })),
});

describe('discoverReplicas', () => {
  it('IPv6 addresses are bracketed in the endpoint URL', () => {
    const d = discoverReplicas(byService(), [slice('IPv6', ['fd00::7', '2001:db8::1'])]);
    expect(d.replicas.map((r) => r.endpoint)).toEqual(['http://[2001:db8::1]:8081', 'http://[fd00::7]:8081']);
    expect(d.problem).toBeUndefined();
  });

  it('FQDN slices are skipped (a name is no pod to converge), and their ports are not a problem', () => {
    const fqdn = slice('FQDN', ['ts.example.com'], [{ name: 'other', port: 1 }], 'ts-fqdn');
    const d = discoverReplicas(byService(), [fqdn, slice('IPv4', ['198.18.0.1'])]);
    expect(d.replicas.map((r) => r.endpoint)).toEqual(['http://198.18.0.1:8081']);
    expect(discoverReplicas(byService(), [fqdn])).toEqual({ replicas: [], startingNodes: [] });
  });

  it('port by name: the slice port of that name, whatever its number', () => {
    const ports = [
      { name: 'inference', port: 8080 },
      { name: 'mgmt', port: 9081 },
    ];
    const d = discoverReplicas(byService('mgmt'), [slice('IPv4', ['198.18.0.1'], ports)]);
    expect(d.replicas.map((r) => r.endpoint)).toEqual(['http://198.18.0.1:9081']);
  });

  it('port by number: the slice port with that number (the target port), named or not', () => {
    const ports = [{ name: 'inference', port: 8080 }, { port: 9081 }];
    const d = discoverReplicas(byService(9081, 'https'), [slice('IPv4', ['198.18.0.1'], ports)]);
    expect(d.replicas.map((r) => r.endpoint)).toEqual(['https://198.18.0.1:9081']);
  });

  it('no such port: no replica and a problem naming the port and the ports there are', () => {
    const ports = [{ name: 'inference', port: 8080 }, { port: 7070 }];
    const d = discoverReplicas(byService(), [slice('IPv4', ['198.18.0.1'], ports)]);
    expect(d.replicas).toEqual([]);
    expect(d.problem).toBe('the Service has no port "management" (its ports: inference=8080, 7070)');
    const none = discoverReplicas(byService(8081), [slice('IPv4', ['198.18.0.1'], [])]);
    expect(none.problem).toBe('the Service has no port 8081 (its ports: none)');
  });

  it('a slice without the port beside one with it: the replicas, no problem', () => {
    const d = discoverReplicas(byService(), [
      slice('IPv4', ['198.18.0.2'], [{ name: 'inference', port: 8080 }], 'ts-old'),
      slice('IPv4', ['198.18.0.1']),
    ]);
    expect(d.replicas.map((r) => r.endpoint)).toEqual(['http://198.18.0.1:8081']);
    expect(d.problem).toBeUndefined();
  });

  it('an endpoint in two slices (a slice being replaced) is one replica, with its pod and uid', () => {
    const d = discoverReplicas(byService(), [
      slice('IPv4', ['198.18.0.1'], undefined, 'a'),
      slice('IPv4', ['198.18.0.1'], undefined, 'b'),
    ]);
    expect(d.replicas).toEqual([{ endpoint: 'http://198.18.0.1:8081', pod: 'ts-0', podUID: 'uid-0' }]);
  });

  it('static endpoints: as given, and no slice is read', () => {
    const d = discoverReplicas(
      spec({ endpoints: ['http://127.0.0.1:8081', 'https://ts.example.com:8443'] }),
      [slice('IPv4', ['198.18.0.1'])],
    );
    expect(d).toEqual({
      replicas: [{ endpoint: 'http://127.0.0.1:8081' }, { endpoint: 'https://ts.example.com:8443' }],
      startingNodes: [],
    });
  });
});
