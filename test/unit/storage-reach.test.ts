/**
 * Where object-storage and registry credentials may go (src/policy/storage-reach.ts): the default list admits the
 * storage services' own hosts and nothing else of their domains, a refusal names the field, the host, the list and
 * the fix, and the ModelPreheat controller asks before it reads the Secret.
 */
import { DEFAULT_HUB_REDIRECT_HOSTS, DEFAULT_HUB_TOKEN_HOSTS } from '../../src/huggingface/endpoint.ts';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { load } from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { loadConfig, usage, type OperatorConfig } from '../../src/config.ts';
import { hostAllowed, parseHostRule, parseHostRules } from '../../src/policy/reach.ts';
import {
  DEFAULT_STORAGE_HOSTS,
  defaultStorageHosts,
  preheatCredentialReach,
  registryReach,
  storageReach,
  storageURLs,
} from '../../src/policy/storage-reach.ts';
import { ModelPreheatSpec } from '../../src/api/index.ts';

const ROOT = join(import.meta.dirname, '../..');
const defaults = { storageHosts: defaultStorageHosts() };
const allowed = (location: Record<string, unknown>, policy = defaults) =>
  storageReach(location as never, 'spec.objectStorage', policy).allowed;

describe('host rules with * inside a label', () => {
  it.each([
    ['*.s3.*.amazonaws.com', 'https://weights.s3.eu-west-1.amazonaws.com', true],
    ['*.s3.*.amazonaws.com', 'https://a.b.s3.eu-west-1.amazonaws.com', true],
    ['*.s3.*.amazonaws.com', 'https://s3.eu-west-1.amazonaws.com', false],
    ['*.s3.*.amazonaws.com', 'https://x.s3.a.b.amazonaws.com', false],
    ['s3.*.amazonaws.com', 'https://s3.eu-west-1.amazonaws.com:443', true],
    ['s3.*.amazonaws.com', 'https://s3..amazonaws.com', false],
    ['oss-*.aliyuncs.com', 'https://oss-cn-hangzhou.aliyuncs.com', true],
    ['oss-*.aliyuncs.com', 'https://fc-oss-cn.aliyuncs.com', false],
    ['oss-*.aliyuncs.com', 'https://x.oss-cn-hangzhou.aliyuncs.com', false],
    ['oss-*.aliyuncs.com:443', 'http://oss-cn-hangzhou.aliyuncs.com', false],
  ])('%s allows %s: %s', (rule, url, expected) => {
    expect(hostAllowed(url, parseHostRules(rule))).toBe(expected);
  });

  it.each(['*.*', '*', 'a.**.com', '*.*.com', 'a_*.com'])(
    '%s is one rule or refused, never a wider one',
    (e) => {
      if (e === '*') return expect(parseHostRule(e).name).toBe('*');
      if (e === '*.*.com') return expect(hostAllowed('https://a.b.com', [parseHostRule(e)])).toBe(true);
      expect(() => parseHostRule(e)).toThrow(e);
    },
  );
});

describe('the default --allowed-storage-hosts', () => {
  it.each([
    ['s3 without endpoint', { type: 's3', bucket: 'weights', region: 'eu-west-1' }],
    [
      's3 regional, virtual-hosted',
      { type: 's3', bucket: 'w', endpoint: 'https://s3.eu-west-1.amazonaws.com' },
    ],
    [
      's3 regional, path style',
      { type: 's3', bucket: 'w', endpoint: 'https://s3.eu-west-1.amazonaws.com', pathStyle: true },
    ],
    ['s3 global', { type: 's3', bucket: 'w', endpoint: 'https://s3.amazonaws.com' }],
    ['s3 dual-stack', { type: 's3', bucket: 'w', endpoint: 'https://s3.dualstack.us-east-2.amazonaws.com' }],
    ['s3 legacy dash form', { type: 's3', bucket: 'w', endpoint: 'https://s3-eu-west-1.amazonaws.com' }],
    ['gcs without endpoint', { type: 'gcs', bucket: 'w' }],
    ['gcs XML API', { type: 'gcs', bucket: 'w', endpoint: 'https://storage.googleapis.com' }],
    ['abs without endpoint', { type: 'abs', accountName: 'acct', container: 'c' }],
    [
      'abs, its own account endpoint',
      { type: 'abs', accountName: 'acct', container: 'c', endpoint: 'https://acct.blob.core.windows.net' },
    ],
    ['oss region', { type: 'oss', bucket: 'w', endpoint: 'https://oss-cn-hangzhou.aliyuncs.com' }],
    ['oss internal', { type: 'oss', bucket: 'w', endpoint: 'https://oss-cn-hangzhou-internal.aliyuncs.com' }],
  ])('admits %s', (_what, location) => expect(allowed(location)).toBe(true));

  it.each([
    [
      'a tenant listener (s3)',
      { type: 's3', bucket: 'w', endpoint: 'http://127.0.0.1:9000', pathStyle: true },
    ],
    ['a tenant listener (gcs)', { type: 'gcs', bucket: 'w', endpoint: 'http://127.0.0.1:9000' }],
    [
      'a tenant listener (abs)',
      { type: 'abs', accountName: 'a1b', container: 'c', endpoint: 'http://10.0.0.1' },
    ],
    ['a tenant listener (oss)', { type: 'oss', bucket: 'w', endpoint: 'https://evil.example.com' }],
    // Hosts of the providers' domains that anyone can rent.
    [
      'an EC2 public name',
      { type: 's3', bucket: 'w', endpoint: 'https://ec2-54-1-2-3.compute-1.amazonaws.com' },
    ],
    [
      'an API Gateway',
      { type: 's3', bucket: 'w', endpoint: 'https://abc.execute-api.us-east-1.amazonaws.com' },
    ],
    ['a load balancer', { type: 's3', bucket: 'w', endpoint: 'https://lb-1.us-east-1.elb.amazonaws.com' }],
    ['Function Compute', { type: 'oss', bucket: 'w', endpoint: 'https://123.cn-hangzhou.fc.aliyuncs.com' }],
    // SAS signs the account in the path, not the host: another account's host would receive a usable SAS.
    [
      "another account's host",
      {
        type: 'abs',
        accountName: 'victim',
        container: 'c',
        endpoint: 'https://attacker.blob.core.windows.net',
      },
    ],
  ])('refuses %s', (_what, location) => expect(allowed(location)).toBe(false));

  it("a virtual-hosted endpoint needs the bucket's host too: a list naming the endpoint alone refuses it", () => {
    const location = { type: 's3', bucket: 'w', endpoint: 'http://minio.store.svc:9000' };
    expect(storageURLs(location as never)).toEqual([
      'http://w.minio.store.svc:9000/k',
      'http://minio.store.svc:9000/',
    ]);
    expect(allowed(location, { storageHosts: parseHostRules('http://minio.store.svc') })).toBe(false);
    expect(
      allowed(location, { storageHosts: parseHostRules('http://minio.store.svc,http://*.minio.store.svc') }),
    ).toBe(true);
    expect(
      allowed(
        { ...location, pathStyle: true },
        { storageHosts: parseHostRules('http://minio.store.svc:9000') },
      ),
    ).toBe(true);
  });

  it('plain HTTP: an entry without a scheme allows the host over https only; http://host allows it in clear', () => {
    const location = { type: 's3', bucket: 'w', endpoint: 'http://minio.store.svc:9000', pathStyle: true };
    const r = storageReach(location as never, 'spec.objectStorage', {
      storageHosts: parseHostRules('minio.store.svc:9000'),
    });
    expect(r).toMatchObject({ allowed: false, reason: 'StorageEndpointNotAllowed' });
    expect(r.allowed ? '' : r.message).toBe(
      "spec.objectStorage.endpoint: http://minio.store.svc:9000 is plain HTTP: the operator's --allowed-storage-hosts " +
        'allows minio.store.svc:9000 over https only, so the credentials would cross the network in clear (use ' +
        'https://minio.store.svc:9000, or an admin adds http://minio.store.svc:9000 to the list), so no key, ' +
        "signature or signed URL is sent there (the credentials are not read); remove the endpoint to use the provider's " +
        'own host, or ask an admin to allow the host',
    );
    const https = { ...location, endpoint: 'https://minio.store.svc:9000' };
    expect(allowed(https, { storageHosts: parseHostRules('minio.store.svc:9000') })).toBe(true);
    expect(allowed(location, { storageHosts: parseHostRules('http://minio.store.svc:9000') })).toBe(true);
    // The defaults name the providers over https: an http:// endpoint of theirs is refused.
    expect(allowed({ type: 's3', bucket: 'w', endpoint: 'http://s3.eu-west-1.amazonaws.com' })).toBe(false);
  });

  it('a host that does not parse (a bucket before an IP address) is refused, never let through', () => {
    const location = { type: 's3', bucket: 'w', endpoint: 'http://127.0.0.1:9000' };
    const r = storageReach(location as never, 'spec.objectStorage', { storageHosts: parseHostRules('*') });
    expect(r).toMatchObject({ allowed: false, reason: 'StorageEndpointNotAllowed' });
    expect(r.allowed ? '' : r.message).toContain('host w.127.0.0.1:9000 is not in');
  });

  it('a refusal names the field, the host, the list and the fix, and says nothing is read', () => {
    const r = storageReach(
      { type: 's3', bucket: 'w', endpoint: 'http://127.0.0.1:9000', pathStyle: true },
      'spec.objectStorage',
      { storageHosts: parseHostRules('*.s3.*.amazonaws.com') },
    );
    expect(r).toEqual({
      allowed: false,
      reason: 'StorageEndpointNotAllowed',
      message:
        "spec.objectStorage.endpoint: host 127.0.0.1:9000 is not in the operator's --allowed-storage-hosts (*.s3.*.amazonaws.com), " +
        'so no key, signature or signed URL is sent there (the credentials are not read); ' +
        "remove the endpoint to use the provider's own host, or ask an admin to allow the host",
    });
    const azure = storageReach(
      {
        type: 'abs',
        accountName: 'victim',
        container: 'c',
        endpoint: 'https://attacker.blob.core.windows.net',
      },
      'spec.preheat.objectStorage',
      defaults,
    );
    expect(azure.allowed ? '' : azure.message).toContain(
      "host attacker.blob.core.windows.net is another storage account's than accountName victim",
    );
  });
});

describe('registries', () => {
  const url = 'https://registry.example.com/v2/library/m/manifests/1';
  it('credentials go only to a registry in --allowed-registry-hosts (default none); a public image anywhere', () => {
    expect(registryReach(url, true, 'spec.url', { registryHosts: [] })).toMatchObject({
      allowed: false,
      reason: 'RegistryNotAllowed',
    });
    const r = registryReach(url, true, 'spec.url', { registryHosts: [] });
    expect(r.allowed ? '' : r.message).toBe(
      "spec.url: registry registry.example.com is not in the operator's --allowed-registry-hosts (empty), so the credentials " +
        'of spec.imageCredentialsSecretRef are not read nor sent; ask an admin to allow the registry, or remove ' +
        'imageCredentialsSecretRef for a public image',
    );
    expect(
      registryReach(url, true, 'spec.url', { registryHosts: parseHostRules('registry.example.com') }),
    ).toEqual({
      allowed: true,
    });
    expect(registryReach(url, false, 'spec.url', { registryHosts: [] })).toEqual({ allowed: true });
  });

  it('plainHTTP: credentials go in clear only to a registry listed as http://host', () => {
    const plain = 'http://registry.example.com:5000/';
    const r = registryReach(plain, true, 'spec.source.oci.reference', {
      registryHosts: parseHostRules('registry.example.com:5000'),
    });
    expect(r).toMatchObject({ allowed: false, reason: 'RegistryNotAllowed' });
    expect(r.allowed ? '' : r.message).toContain(
      "spec.source.oci.reference: http://registry.example.com:5000 is plain HTTP: the operator's --allowed-registry-hosts allows registry.example.com:5000 over https only",
    );
    expect(r.allowed ? '' : r.message).toContain(
      'an admin adds http://registry.example.com:5000 to the list',
    );
    expect(
      registryReach(plain, true, 'spec.url', {
        registryHosts: parseHostRules('http://registry.example.com'),
      }),
    ).toEqual({ allowed: true });
  });
});

describe('a ModelPreheat spec', () => {
  const config = {
    allowedStorageHosts: defaultStorageHosts(),
    allowedRegistryHosts: parseHostRules('ghcr.io'),
  };
  const spec = (s: Record<string, unknown>) => ModelPreheatSpec.parse(s);

  it('its objectStorage, and an image with credentials; a plain URL (no Secret) goes anywhere', () => {
    const store = { type: 's3', bucket: 'w', credentialsSecretRef: { name: 's' }, keys: ['m.mar'] };
    expect(preheatCredentialReach(spec({ objectStorage: store }), config)).toEqual({ allowed: true });
    expect(
      preheatCredentialReach(
        spec({ objectStorage: { ...store, endpoint: 'http://127.0.0.1:1', prefix: 'm/', keys: undefined } }),
        config,
      ),
    ).toMatchObject({ allowed: false, reason: 'StorageEndpointNotAllowed' });
    const image = { type: 'image', imageCredentialsSecretRef: { name: 'r' } };
    expect(
      preheatCredentialReach(spec({ ...image, url: 'https://ghcr.io/v2/o/m/manifests/1' }), config),
    ).toEqual({ allowed: true });
    expect(
      preheatCredentialReach(spec({ ...image, url: 'http://127.0.0.1:1/v2/o/m/manifests/1' }), config),
    ).toMatchObject({ allowed: false, reason: 'RegistryNotAllowed' });
    expect(preheatCredentialReach(spec({ url: 'http://127.0.0.1:1/m.mar' }), config)).toEqual({
      allowed: true,
    });
  });
});

describe('operator flags', () => {
  const config = (argv: string[]) => (loadConfig(argv, {}) as { config: OperatorConfig }).config;

  it('default: the storage services, no registry; the help shows the storage default', () => {
    const c = config([]);
    expect(c.allowedStorageHosts.map((r) => r.text).join(',')).toBe(DEFAULT_STORAGE_HOSTS);
    expect(c.allowedRegistryHosts).toEqual([]);
    // No registry's Basic credentials go to the agents unless the admin lists it.
    expect(c.allowedBasicAuthRegistryHosts).toEqual([]);
    expect(usage()).toContain('--allowed-basic-auth-registry-hosts');
    expect(usage()).toContain(`(default ${DEFAULT_STORAGE_HOSTS}) [PEERLOAD_ALLOWED_STORAGE_HOSTS]`);
  });

  it('an empty value is none, not the default', () => {
    expect(config(['--allowed-storage-hosts=']).allowedStorageHosts).toEqual([]);
    expect(config(['--allowed-manager-hosts=']).allowedManagerHosts).toEqual([]);
  });

  it('deploy/base and the chart write the default out, as the operator has it', () => {
    const deployment = readFileSync(join(ROOT, 'deploy/base/deployment.yaml'), 'utf8');
    expect(deployment).toContain(`- --allowed-storage-hosts=${DEFAULT_STORAGE_HOSTS}\n`);
    expect(deployment).toContain('- --allowed-registry-hosts=\n');
    expect(deployment).toContain('- --allowed-basic-auth-registry-hosts=\n');
    expect(deployment).toContain(`- --allowed-hub-hosts=${DEFAULT_HUB_TOKEN_HOSTS}\n`);
    expect(deployment).toContain(`- --allowed-hub-redirect-hosts=${DEFAULT_HUB_REDIRECT_HOSTS}\n`);
    const values = load(readFileSync(join(ROOT, 'charts/peerload/values.yaml'), 'utf8')) as Record<
      string,
      string[]
    >;
    expect(values.allowedStorageHosts!.join(',')).toBe(DEFAULT_STORAGE_HOSTS);
    expect(values.allowedRegistryHosts).toEqual([]);
    expect(values.allowedHubRedirectHosts!.join(',')).toBe(DEFAULT_HUB_REDIRECT_HOSTS);
    expect(
      config([])
        .allowedHubRedirectHosts.map((r) => r.text)
        .join(','),
    ).toBe(DEFAULT_HUB_REDIRECT_HOSTS);
    expect(values.allowedBasicAuthRegistryHosts).toEqual([]);
    const template = readFileSync(join(ROOT, 'charts/peerload/templates/deployment.yaml'), 'utf8');
    expect(template).toContain(
      '- --allowed-basic-auth-registry-hosts={{ join "," .Values.allowedBasicAuthRegistryHosts }}',
    );
  });

  it('flag and environment replace the default; a bad entry names the flag', () => {
    expect(
      config(['--allowed-storage-hosts', 'minio.store.svc:9000']).allowedStorageHosts.map((r) => r.text),
    ).toEqual(['minio.store.svc:9000']);
    const e = (loadConfig([], { PEERLOAD_ALLOWED_REGISTRY_HOSTS: 'ghcr.io' }) as { config: OperatorConfig })
      .config;
    expect(hostAllowed('https://ghcr.io/v2/x/manifests/1', e.allowedRegistryHosts)).toBe(true);
    const basic = config(['--allowed-basic-auth-registry-hosts', 'registry.corp.example.com:5000']);
    expect(hostAllowed('https://registry.corp.example.com:5000', basic.allowedBasicAuthRegistryHosts)).toBe(
      true,
    );
    expect(hostAllowed('https://registry.corp.example.com', basic.allowedBasicAuthRegistryHosts)).toBe(false);
    expect(() => loadConfig(['--allowed-storage-hosts', 'a**b'], {})).toThrow(
      /--allowed-storage-hosts \(PEERLOAD_ALLOWED_STORAGE_HOSTS\): "a\*\*b"/,
    );
  });
});
