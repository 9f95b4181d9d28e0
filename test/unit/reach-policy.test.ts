/**
 * The reach policy (src/policy/reach.ts): where a namespaced spec may send the operator, and the manager resolution
 * that applies it before any Secret is read (src/controllers/managers.ts).
 */
import { describe, expect, it } from 'vitest';
import { loadConfig, ConfigError, type OperatorConfig } from '../../src/config.ts';
import {
  clusterManagerReach,
  endpointsReach,
  hostAllowed,
  labelsMatch,
  managerURLReach,
  parseHostRule,
  parseHostRules,
  urlReach,
  type ReachPolicy,
} from '../../src/policy/reach.ts';
import { ManagerRef, ServedModelSpec, staticAddresses, type ClusterManager } from '../../src/api/index.ts';
import { ReachDeniedError, resolveManager, useClusterManagers } from '../../src/controllers/managers.ts';
import type { SecretReader } from '../../src/controllers/secrets.ts';
import { describeFailure } from '../../src/controllers/modelpreheat/failures.ts';
import { preheatConditions, preheatPhase } from '../../src/controllers/modelpreheat/conditions.ts';
import { endpointNotAllowedConditions } from '../../src/controllers/servedmodel/conditions.ts';
import type { ControllerContext } from '../../src/runtime/index.ts';

/** The manager and model-server lists: an entry without a scheme allows http and https (the operator's flags). */
const rules = (list: string) => parseHostRules(list, 'any');

describe('host rules', () => {
  it.each([
    ['manager.dragonfly-system.svc', 'http://manager.dragonfly-system.svc:8080', true],
    ['manager.dragonfly-system.svc', 'http://MANAGER.dragonfly-system.svc./api', true],
    ['manager.dragonfly-system.svc', 'http://manager.dragonfly-system.svc.evil.com', false],
    ['manager.dragonfly-system.svc', 'http://evilmanager.dragonfly-system.svc', false],
    ['*.dragonfly-system.svc', 'http://manager.dragonfly-system.svc', true],
    ['*.dragonfly-system.svc', 'http://a.b.dragonfly-system.svc', true],
    ['*.dragonfly-system.svc', 'http://dragonfly-system.svc', false],
    ['*.dragonfly-system.svc', 'http://xdragonfly-system.svc', false],
    ['manager:8080', 'http://manager:8080', true],
    ['manager:8080', 'http://manager:8081', false],
    ['manager:80', 'http://manager', true],
    ['manager:443', 'https://manager', true],
    ['127.0.0.1', 'http://127.0.0.1:9', true],
    ['127.0.0.1', 'http://127.0.0.2:9', false],
    ['127.0.0.0/8', 'http://127.9.9.9:9', true],
    ['127.0.0.0/8', 'http://128.0.0.1', false],
    // An IP range matches IP literals only: names are not resolved.
    ['127.0.0.0/8', 'http://localhost', false],
    ['fd00::/8', 'http://[fd00::7]:8081', true],
    ['[fd00::7]:8081', 'http://[fd00::7]:8081', true],
    ['[fd00::7]:8081', 'http://[fd00::7]:8082', false],
    ['::1', 'http://[::1]:80', true],
    ['*', 'https://anything.example.com:1234', true],
    // Credentials in the URL never pass (the schemas refuse them too).
    ['*', 'http://user:pass@manager', false],
    ['manager', 'not a url', false],
  ])('%s allows %s: %s', (rule, url, allowed) => {
    expect(hostAllowed(url, rules(rule))).toBe(allowed);
  });

  it('an empty list allows nothing', () => {
    expect(parseHostRules('')).toEqual([]);
    expect(hostAllowed('http://manager:8080', [])).toBe(false);
  });

  it('several entries, spaces around commas', () => {
    const r = rules(' a.example.com , 10.0.0.0/8:8080,*.svc ');
    expect(r.map((x) => x.text)).toEqual(['a.example.com', '10.0.0.0/8:8080', '*.svc']);
    expect(hostAllowed('http://10.1.2.3:8080', r)).toBe(true);
    expect(hostAllowed('http://10.1.2.3:8081', r)).toBe(false);
  });

  it.each([
    'ftp://manager',
    'http://manager/api',
    'https://user@manager',
    'http://',
    'manager:0',
    'manager:99999',
    'manager:x',
    '10.0.0.0/33',
    'bad_name',
    '*.',
    'a..b',
  ])('refuses %s naming it', (entry) => expect(() => parseHostRule(entry)).toThrow(entry));
});

describe('host rules: the scheme', () => {
  // The credential lists (storage, registry, Hub): an entry without a scheme is https only.
  it.each([
    ['huggingface.co', 'https://huggingface.co', true],
    ['huggingface.co', 'http://huggingface.co', false],
    ['https://huggingface.co', 'http://huggingface.co', false],
    ['http://mirror.internal:8080', 'http://mirror.internal:8080', true],
    ['http://mirror.internal:8080', 'https://mirror.internal:8080', true],
    ['http://mirror.internal:8080', 'http://mirror.internal:8081', false],
    ['http://127.0.0.1', 'http://127.0.0.1:9000', true],
    ['http://127.0.0.0/8:9000', 'http://127.0.0.7:9000', true],
    ['http://[::1]:9000', 'http://[::1]:9000', true],
    ['http://*.minio.svc', 'http://b.minio.svc', true],
    ['*', 'http://anything.example.com', false],
    ['http://*', 'http://anything.example.com', true],
    ['huggingface.co', 'ftp://huggingface.co', false],
  ])('credential list %s allows %s: %s', (rule, url, allowed) => {
    expect(hostAllowed(url, parseHostRules(rule))).toBe(allowed);
  });

  it('the manager and model-server lists: bare entries allow http too, https:// keeps a host to TLS', () => {
    expect(hostAllowed('http://manager:8080', parseHostRules('manager', 'any'))).toBe(true);
    expect(hostAllowed('http://manager:8080', parseHostRules('https://manager', 'any'))).toBe(false);
    expect(hostAllowed('https://manager:8080', parseHostRules('https://manager', 'any'))).toBe(true);
  });

  it('urlReach tells a plain-HTTP refusal from an unlisted host', () => {
    const list = parseHostRules('huggingface.co,http://mirror.internal');
    expect(urlReach('http://huggingface.co', list)).toBe('plain');
    expect(urlReach('http://elsewhere.example', list)).toBe('refused');
    expect(urlReach('http://mirror.internal:8080', list)).toBe('allowed');
    expect(list.map((r) => r.text)).toEqual(['huggingface.co', 'http://mirror.internal']);
  });

  it('the operator: plain HTTP to a manager is allowed by a bare entry, to a Hub only by an http:// one', () => {
    const { config } = loadConfig(
      ['--allowed-manager-hosts', 'manager', '--allowed-hub-hosts', 'hub.example,http://mirror.internal'],
      {},
    ) as { config: OperatorConfig };
    expect(hostAllowed('http://manager:8080', config.allowedManagerHosts)).toBe(true);
    expect(hostAllowed('http://hub.example', config.allowedHubHosts)).toBe(false);
    expect(hostAllowed('https://hub.example', config.allowedHubHosts)).toBe(true);
    expect(hostAllowed('http://mirror.internal', config.allowedHubHosts)).toBe(true);
    // The defaults hold the public services over https only.
    const defaults = (loadConfig([], {}) as { config: OperatorConfig }).config;
    expect(hostAllowed('http://huggingface.co', defaults.allowedHubHosts)).toBe(false);
    expect(hostAllowed('http://s3.amazonaws.com', defaults.allowedStorageHosts)).toBe(false);
    expect(hostAllowed('https://s3.amazonaws.com', defaults.allowedStorageHosts)).toBe(true);
  });
});

describe('decisions', () => {
  const policy: ReachPolicy = {
    managerHosts: rules('*.dragonfly-system.svc'),
    endpointHosts: rules('10.0.0.0/8'),
  };

  it('a manager url outside the list is refused, the message naming the field, the list and the fix', () => {
    const r = managerURLReach('http://attacker.example.com:9000', 'spec.manager.url', policy);
    expect(r).toMatchObject({ allowed: false, reason: 'ManagerNotAllowed' });
    const m = (r as { message: string }).message;
    expect(m).toContain('spec.manager.url');
    expect(m).toContain('attacker.example.com:9000');
    expect(m).toContain('--allowed-manager-hosts (*.dragonfly-system.svc)');
    expect(m).toContain('spec.manager.clusterManagerRef');
    expect(managerURLReach('http://manager.dragonfly-system.svc:8080', 'spec.manager.url', policy)).toEqual({
      allowed: true,
    });
  });

  it('the default (empty) list refuses every manager url', () => {
    const r = managerURLReach('http://manager:8080', 'spec.manager.url', {
      managerHosts: [],
      endpointHosts: [],
    });
    expect(r).toMatchObject({ allowed: false, reason: 'ManagerNotAllowed' });
    expect((r as { message: string }).message).toContain('(empty)');
  });

  it("static endpoints with an agent: the agents' addresses (same host, the agent's port) must be allowed too", () => {
    const spec = ServedModelSpec.parse({
      modelName: 'echo',
      files: { prefix: 'echo/1/' },
      preheat: {
        create: true,
        objectStorage: { type: 's3', bucket: 'm', credentialsSecretRef: { name: 's' } },
      },
      modelServer: {
        endpoints: ['http://10.0.0.7:8000'],
        driver: 'triton',
        agent: { port: 8095, tokenSecretRef: { name: 'agent', key: 'token' } },
      },
    });
    expect(staticAddresses(spec)).toEqual(['http://10.0.0.7:8000', 'http://10.0.0.7:8095']);
    const onlyServer = { managerHosts: [], endpointHosts: parseHostRules('10.0.0.7:8000', 'any') };
    expect(endpointsReach(staticAddresses(spec), 'spec.modelServer.endpoints', onlyServer)).toMatchObject({
      allowed: false,
      reason: 'EndpointNotAllowed',
    });
    const both = { managerHosts: [], endpointHosts: parseHostRules('10.0.0.7:8000,10.0.0.7:8095', 'any') };
    expect(endpointsReach(staticAddresses(spec), 'spec.modelServer.endpoints', both)).toEqual({
      allowed: true,
    });
  });

  it('static endpoints: every one must be allowed; Service discovery (no endpoints) needs nothing', () => {
    expect(endpointsReach(undefined, 'spec.modelServer.endpoints', policy)).toEqual({ allowed: true });
    expect(endpointsReach(['http://10.0.0.7:8081'], 'spec.modelServer.endpoints', policy)).toEqual({
      allowed: true,
    });
    const r = endpointsReach(
      ['http://10.0.0.7:8081', 'http://torchserve.other-team.svc:8081'],
      'spec.modelServer.endpoints',
      policy,
    );
    expect(r).toMatchObject({ allowed: false, reason: 'EndpointNotAllowed' });
    expect((r as { message: string }).message).toMatch(
      /spec\.modelServer\.endpoints: 1 endpoint\(s\) \(torchserve\.other-team\.svc:8081\).*--allowed-endpoint-hosts \(10\.0\.0\.0\/8\).*spec\.modelServer\.service/,
    );
  });

  it('label selectors: matchLabels and the four operators', () => {
    const labels = { team: 'ml', env: 'prod' };
    expect(labelsMatch({}, labels)).toBe(true);
    expect(labelsMatch({ matchLabels: { team: 'ml' } }, labels)).toBe(true);
    expect(labelsMatch({ matchLabels: { team: 'ml', env: 'dev' } }, labels)).toBe(false);
    const expr = (operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist', values?: string[]) =>
      labelsMatch({ matchExpressions: [{ key: 'env', operator, ...(values ? { values } : {}) }] }, labels);
    expect(expr('In', ['prod', 'staging'])).toBe(true);
    expect(expr('In', ['dev'])).toBe(false);
    expect(expr('NotIn', ['prod'])).toBe(false);
    expect(expr('NotIn', ['dev'])).toBe(true);
    expect(expr('Exists')).toBe(true);
    expect(expr('DoesNotExist')).toBe(false);
    expect(labelsMatch({ matchExpressions: [{ key: 'x', operator: 'NotIn', values: ['a'] }] }, labels)).toBe(
      true,
    );
  });

  it('a ClusterManager: missing, namespace listed, selected, or neither', () => {
    const field = 'spec.manager.clusterManagerRef';
    expect(clusterManagerReach('shared', field, 'team-a', undefined, undefined)).toMatchObject({
      allowed: false,
      reason: 'ClusterManagerNotFound',
    });
    const listed = { spec: { namespaces: ['team-a'] } };
    expect(clusterManagerReach('shared', field, 'team-a', listed, undefined)).toEqual({ allowed: true });
    const refused = clusterManagerReach('shared', field, 'team-b', listed, { team: 'b' });
    expect(refused).toMatchObject({ allowed: false, reason: 'ClusterManagerNotAllowed' });
    expect((refused as { message: string }).message).toContain('does not allow namespace team-b');
    const selected = { spec: { namespaceSelector: { matchLabels: { 'peerload.io/manager': 'shared' } } } };
    expect(
      clusterManagerReach('shared', field, 'team-b', selected, { 'peerload.io/manager': 'shared' }),
    ).toEqual({
      allowed: true,
    });
    // Labels unknown (the Namespace could not be read): a selector selects nothing.
    expect(clusterManagerReach('shared', field, 'team-b', selected, undefined)).toMatchObject({
      allowed: false,
    });
    const everyone = { spec: { namespaceSelector: {} } };
    expect(clusterManagerReach('shared', field, 'any', everyone, {})).toEqual({ allowed: true });
  });
});

describe('operator flags', () => {
  const config = (argv: string[]) => (loadConfig(argv, {}) as { config: OperatorConfig }).config;

  it('default: both lists empty', () => {
    const c = config([]);
    expect(c.allowedManagerHosts).toEqual([]);
    expect(c.allowedEndpointHosts).toEqual([]);
  });

  it('flag and environment', () => {
    const c = config(['--allowed-manager-hosts', 'manager.dragonfly-system.svc:8080,*.corp']);
    expect(c.allowedManagerHosts.map((r) => r.text)).toEqual(['manager.dragonfly-system.svc:8080', '*.corp']);
    const e = (
      loadConfig([], { PEERLOAD_ALLOWED_ENDPOINT_HOSTS: '10.0.0.0/8' }) as { config: OperatorConfig }
    ).config;
    expect(hostAllowed('http://10.2.3.4:8081', e.allowedEndpointHosts)).toBe(true);
  });

  it('a bad entry fails naming the flag and the entry', () => {
    expect(() => loadConfig(['--allowed-endpoint-hosts', 'a,http://b/x'], {})).toThrow(ConfigError);
    expect(() => loadConfig(['--allowed-endpoint-hosts', 'a,http://b/x'], {})).toThrow(
      /--allowed-endpoint-hosts \(PEERLOAD_ALLOWED_ENDPOINT_HOSTS\): "http:\/\/b\/x"/,
    );
  });
});

describe('resolveManager applies the policy before reading any Secret', () => {
  /** Records every Secret read; values are `<namespace>/<name>/<key>`. */
  function fakeSecrets() {
    const reads: string[] = [];
    const reader = {
      value: async (ns: string, ref: { name: string; key: string }) => {
        reads.push(`${ns}/${ref.name}/${ref.key}`);
        return `${ns}/${ref.name}/${ref.key}`;
      },
    } as unknown as SecretReader;
    return { reads, reader };
  }
  const base = (argv: string[]) =>
    (
      loadConfig(['--leader-election-namespace', 'peerload-system', ...argv], {}) as {
        config: OperatorConfig;
      }
    ).config;
  const ref = (r: Record<string, unknown>) => ManagerRef.parse(r);

  /** A context whose apiserver holds `objects` (ClusterManagers, by name) and namespaces with `labels`. */
  function context(
    config: OperatorConfig,
    objects: ClusterManager[],
    labels: Record<string, Record<string, string>>,
  ) {
    const byName = new Map(objects.map((o) => [o.metadata.name, o]));
    const ctx = {
      config,
      kube: {
        resource: (gvr: { resource: string }) => ({
          get: async (_ns: undefined, name: string) => {
            if (gvr.resource === 'clustermanagers') {
              if (!byName.has(name)) throw new Error('not found');
              return byName.get(name);
            }
            if (!labels[name]) throw new Error('not found');
            return { metadata: { name, labels: labels[name] } };
          },
        }),
      },
    } as unknown as ControllerContext;
    useClusterManagers(ctx);
    return ctx;
  }
  const clusterManager = (spec: Record<string, unknown>): ClusterManager => ({
    apiVersion: 'peerload.io/v1alpha1',
    kind: 'ClusterManager',
    metadata: { name: 'shared' },
    spec: spec as ClusterManager['spec'],
  });

  it('a url outside the list: ReachDeniedError, and no Secret read', async () => {
    const { reads, reader } = fakeSecrets();
    const c = base([]);
    const err = await resolveManager(
      ref({ url: 'http://attacker:9', tokenSecretRef: { name: 'pat', key: 'token' } }),
      'team-a',
      c,
      reader,
    ).catch((e) => e);
    expect(err).toBeInstanceOf(ReachDeniedError);
    expect(err.reason).toBe('ManagerNotAllowed');
    const err2 = await resolveManager(
      ref({ url: 'http://attacker:9', signInSecretRef: { name: 'user' } }),
      'team-a',
      c,
      reader,
    ).catch((e) => e);
    expect(err2.reason).toBe('ManagerNotAllowed');
    expect(reads).toEqual([]);
  });

  it('a url in the list reads the namespace Secret', async () => {
    const { reads, reader } = fakeSecrets();
    const m = await resolveManager(
      ref({ url: 'http://manager:8080', tokenSecretRef: { name: 'pat', key: 'token' } }),
      'team-a',
      base(['--allowed-manager-hosts', 'manager:8080']),
      reader,
    );
    expect(m.url).toBe('http://manager:8080');
    expect(reads).toEqual(['team-a/pat/token']);
  });

  it("a ClusterManager: its URL, its settings, and its Secret read in the operator's namespace", async () => {
    const { reads, reader } = fakeSecrets();
    const c = base([]);
    context(
      c,
      [
        clusterManager({
          url: 'https://manager.dragonfly-system.svc',
          apiPath: '/oapi/v1',
          argsDialect: 'legacy',
          requestTimeout: '5s',
          tokenSecretRef: { name: 'dragonfly-pat', key: 'token' },
          namespaces: ['team-a'],
        }),
      ],
      {},
    );
    const m = await resolveManager(ref({ clusterManagerRef: { name: 'shared' } }), 'team-a', c, reader);
    expect(m).toEqual({
      url: 'https://manager.dragonfly-system.svc',
      apiPath: '/oapi/v1',
      argsDialect: 'legacy',
      requestTimeoutMs: 5_000,
      auth: { type: 'token', token: 'peerload-system/dragonfly-pat/token' },
    });
    expect(reads).toEqual(['peerload-system/dragonfly-pat/token']);
    // Another namespace: refused before the Secret is read.
    const err = await resolveManager(
      ref({ clusterManagerRef: { name: 'shared' } }),
      'team-b',
      c,
      reader,
    ).catch((e) => e);
    expect(err.reason).toBe('ClusterManagerNotAllowed');
    expect(reads).toHaveLength(1);
    const missing = await resolveManager(
      ref({ clusterManagerRef: { name: 'nope' } }),
      'team-a',
      c,
      reader,
    ).catch((e) => e);
    expect(missing.reason).toBe('ClusterManagerNotFound');
  });

  it("a ClusterManager's namespaceSelector reads the namespace's labels", async () => {
    const { reader } = fakeSecrets();
    const c = base([]);
    context(c, [clusterManager({ url: 'http://m', namespaceSelector: { matchLabels: { tier: 'ml' } } })], {
      'team-a': { tier: 'ml' },
      'team-b': { tier: 'web' },
    });
    const shared = ref({ clusterManagerRef: { name: 'shared' } });
    expect((await resolveManager(shared, 'team-a', c, reader)).url).toBe('http://m');
    expect((await resolveManager(shared, 'team-b', c, reader).catch((e) => e)).reason).toBe(
      'ClusterManagerNotAllowed',
    );
    // A namespace whose labels cannot be read is not selected.
    expect((await resolveManager(shared, 'gone', c, reader).catch((e) => e)).reason).toBe(
      'ClusterManagerNotAllowed',
    );
  });

  it("no manager named: the operator's default and its token, whatever the lists say", async () => {
    const { reads, reader } = fakeSecrets();
    const m = await resolveManager(
      undefined,
      'team-a',
      base(['--manager-url', 'http://default:8080', '--manager-token-secret', 'default-token']),
      reader,
    );
    expect(m.url).toBe('http://default:8080');
    expect(reads).toEqual(['peerload-system/default-token/token']);
  });
});

describe('what a refused object says', () => {
  it('ModelPreheat: Blocked (Stalled, not final), looked at again in a minute, the rule as reason', () => {
    const view = describeFailure(
      new ReachDeniedError('ManagerNotAllowed', 'spec.manager.url: host x'),
      'use',
    );
    expect(view).toEqual({
      reason: 'ManagerNotAllowed',
      message: 'spec.manager.url: host x',
      retry: { kind: 'after', ms: 60_000 },
      final: false,
      blocked: true,
    });
    const o = { outcome: 'Blocked' as const, reason: view.reason, message: view.message };
    expect(preheatPhase(o)).toBe('BLOCKED');
    expect(preheatConditions(o)).toContainEqual({
      type: 'Stalled',
      status: 'True',
      reason: 'ManagerNotAllowed',
      message: 'spec.manager.url: host x',
    });
  });

  it('ServedModel: Stalled and not Ready, reason EndpointNotAllowed', () => {
    expect(endpointNotAllowedConditions('spec.modelServer.endpoints: ...')).toEqual([
      {
        type: 'Ready',
        status: 'False',
        reason: 'EndpointNotAllowed',
        message: 'spec.modelServer.endpoints: ...',
      },
      { type: 'Reconciling', absent: true },
      {
        type: 'Stalled',
        status: 'True',
        reason: 'EndpointNotAllowed',
        message: 'spec.modelServer.endpoints: ...',
      },
    ]);
  });
});
