/**
 * The loopback profile (test/support/loopback-profile.ts) covers every host allow-list the operator has, so a new
 * allow-list cannot break the demo, `npm run emulators` or the tests without this file failing first; and what it
 * sets, the operator accepts and uses.
 */
import { describe, expect, it } from 'vitest';
import { loadConfig, operatorFlags } from '../../src/config.ts';
import { hostAllowed } from '../../src/policy/reach.ts';
import {
  LOOPBACK_ALLOW_LISTS,
  LOOPBACK_SETTINGS,
  loopbackOperatorFlags,
} from '../support/loopback-profile.ts';

/**
 * The operator flags the profile leaves at their defaults, each with why a loopback set-up needs nothing else. A
 * flag that is neither here nor in the profile fails the last test: decide which it is.
 */
const DEFAULT_IS_FINE: Record<string, string> = {
  kubeconfig: 'each caller names its own control plane',
  'metrics-cert-dir': 'plain HTTP on loopback (the profile sets --no-metrics-secure)',
  'leader-elect': 'a single operator elects itself at once; tests of two operators set it themselves',
  'leader-election-namespace': 'the default namespace exists in every control plane the tests start',
  'leader-election-id': 'any name works',
  'lease-duration': 'timing, not reach',
  'renew-deadline': 'timing, not reach',
  'retry-period': 'timing, not reach',
  identity: 'random per process',
  namespace: 'all namespaces, as in a cluster',
  workers: 'capacity, not reach',
  'max-workers-per-namespace': 'capacity, not reach',
  'max-concurrent-registrations': 'capacity, not reach',
  'max-registrations-per-namespace': 'capacity, not reach',
  'resync-period': 'timing, not reach',
  'log-level': 'each caller picks its own',
  'shutdown-timeout': 'timing, not reach',
  'manager-url': "each caller names its own manager (the emulator's or the real one's)",
  'manager-api-path': 'set with the manager: /oapi/v1 for the real one',
  'manager-token-secret': 'set with the manager when it needs a token',
  'manager-token-secret-key': 'the default key is what the callers write',
  'poll-backoff-start': 'timing, not reach',
  'poll-backoff-max': 'timing, not reach',
  'cleanup-grace-period': 'timing, not reach',
  'peer-daemon-version': 'the tested daemon (1.4.2) is the default',
  'source-timeout': 'timing, not reach (tests of slow sources set it themselves)',
};

describe('the loopback profile', () => {
  it('covers every host allow-list of the operator, with loopback in it', () => {
    const lists = operatorFlags().filter((f) => f.hostList);
    expect(lists.length).toBeGreaterThan(0);
    for (const { flag } of lists) {
      expect(LOOPBACK_ALLOW_LISTS[flag], `--${flag} is not in the loopback profile`).toBeDefined();
    }
    const { config } = loadConfig(loopbackOperatorFlags(), {}) as { config: Record<string, unknown> };
    const keyOf = (flag: string) => flag.replace(/-([a-z])/g, (_, c: string) => c.toUpperCase());
    for (const { flag } of lists) {
      const rules = config[keyOf(flag)] as Parameters<typeof hostAllowed>[1];
      expect(hostAllowed('http://127.0.0.1/', rules), `--${flag} refuses 127.0.0.1`).toBe(true);
      expect(hostAllowed('http://127.0.0.1:39279/', rules), `--${flag} refuses 127.0.0.1:<port>`).toBe(true);
    }
  });

  it('keeps the public defaults beside loopback', () => {
    const { config } = loadConfig(loopbackOperatorFlags(), {}) as {
      config: {
        allowedStorageHosts: Parameters<typeof hostAllowed>[1];
        allowedHubHosts: Parameters<typeof hostAllowed>[1];
      };
    };
    expect(hostAllowed('https://bucket.s3.us-east-1.amazonaws.com/', config.allowedStorageHosts)).toBe(true);
    expect(hostAllowed('https://huggingface.co/', config.allowedHubHosts)).toBe(true);
  });

  it('serves metrics over plain HTTP on a free loopback port', () => {
    const { config } = loadConfig(loopbackOperatorFlags(), {}) as {
      config: { metricsSecure: boolean; metricsAddress: string };
    };
    expect(config.metricsSecure).toBe(false);
    expect(config.metricsAddress).toBe('127.0.0.1:0');
  });

  it("a caller's own flag after the profile wins (how a test shows a refusal)", () => {
    const { config } = loadConfig([...loopbackOperatorFlags(), '--allowed-endpoint-hosts', ''], {}) as {
      config: { allowedEndpointHosts: unknown[] };
    };
    expect(config.allowedEndpointHosts).toEqual([]);
  });

  it('every operator flag is either set by the profile or named here with why its default is fine', () => {
    const profiled = new Set([
      ...Object.keys(LOOPBACK_ALLOW_LISTS),
      ...Object.keys(LOOPBACK_SETTINGS).map((f) => f.replace(/^no-/, '')),
    ]);
    const undecided = operatorFlags()
      .map((f) => f.flag)
      .filter((flag) => !profiled.has(flag) && !(flag in DEFAULT_IS_FINE));
    expect(undecided, 'decide: add to test/support/loopback-profile.ts or to DEFAULT_IS_FINE').toEqual([]);
    const stale = Object.keys(DEFAULT_IS_FINE).filter(
      (flag) => !operatorFlags().some((f) => f.flag === flag),
    );
    expect(stale, 'flags the operator no longer has').toEqual([]);
  });
});
