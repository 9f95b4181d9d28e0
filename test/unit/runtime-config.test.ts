import { describe, expect, it } from 'vitest';
import { ConfigError, loadConfig, type OperatorConfig } from '../../src/config.ts';

function cfg(argv: string[], env: NodeJS.ProcessEnv = {}): OperatorConfig {
  const r = loadConfig(argv, env);
  if ('help' in r) throw new Error('help');
  return r.config;
}

describe('operator config', () => {
  it('has the documented defaults', () => {
    const c = cfg([], { POD_NAMESPACE: 'peerload-system' });
    expect(c).toMatchObject({
      namespace: '',
      metricsAddress: ':8443',
      metricsSecure: true,
      leaderElect: true,
      leaderElectionId: 'peerload-operator',
      leaderElectionNamespace: 'peerload-system',
      leaseDuration: 15_000,
      renewDeadline: 10_000,
      retryPeriod: 2_000,
      workers: 4,
      resyncPeriod: 600_000,
      logLevel: 'info',
      managerApiPath: '/api/v1',
      pollBackoffStart: 2_000,
      pollBackoffMax: 60_000,
      cleanupGracePeriod: 120_000,
    });
    expect(c.identity).toMatch(/_[0-9a-f]{8}$/);
  });

  it('takes flags over environment variables', () => {
    const env = { PEERLOAD_WORKERS: '8', PEERLOAD_RESYNC_PERIOD: '5m', PEERLOAD_LEADER_ELECT: 'false' };
    expect(cfg([], env)).toMatchObject({ workers: 8, resyncPeriod: 300_000, leaderElect: false });
    expect(cfg(['--workers', '2', '--leader-elect'], env)).toMatchObject({ workers: 2, leaderElect: true });
    expect(cfg(['--no-leader-elect'])).toMatchObject({ leaderElect: false });
    expect(cfg(['--resync-period', '0s']).resyncPeriod).toBe(0);
    expect(cfg(['--cleanup-grace-period', '30s']).cleanupGracePeriod).toBe(30_000);
  });

  it('serves metrics securely unless told to keep plain HTTP; a certificate directory needs HTTPS', () => {
    expect(cfg([]).metricsCertDir).toBeUndefined();
    expect(cfg(['--no-metrics-secure']).metricsSecure).toBe(false);
    expect(cfg([], { PEERLOAD_METRICS_SECURE: 'false' }).metricsSecure).toBe(false);
    // The last of two flags wins (a harness default overridden by a test).
    expect(cfg(['--no-metrics-secure', '--metrics-secure']).metricsSecure).toBe(true);
    expect(cfg(['--metrics-cert-dir', '/certs']).metricsCertDir).toBe('/certs');
    expect(() => cfg(['--no-metrics-secure', '--metrics-cert-dir', '/certs'])).toThrow(
      /--metrics-cert-dir \(PEERLOAD_METRICS_CERT_DIR\): serves HTTPS/,
    );
  });

  it('takes a per-namespace worker cap, unset by default (the runtime then keeps a quarter back)', () => {
    expect(cfg([]).maxWorkersPerNamespace).toBeUndefined();
    expect(cfg(['--workers', '32', '--max-workers-per-namespace', '32'])).toMatchObject({
      workers: 32,
      maxWorkersPerNamespace: 32,
    });
    expect(cfg(['--max-registrations-per-namespace', '32']).maxRegistrationsPerNamespace).toBe(32);
    expect(() => cfg(['--max-workers-per-namespace', '0'])).toThrow(
      /--max-workers-per-namespace \(PEERLOAD_MAX_WORKERS_PER_NAMESPACE\): must be an integer between 1 and 64/,
    );
  });

  it('names the flag and its variable on bad values', () => {
    expect(() => cfg(['--workers', 'many'])).toThrow(
      /--workers \(PEERLOAD_WORKERS\): must be an integer.*got "many"/,
    );
    expect(() => cfg([], { PEERLOAD_RESYNC_PERIOD: '10 minutes' })).toThrow(
      /--resync-period \(PEERLOAD_RESYNC_PERIOD\): must be a duration/,
    );
    expect(() => cfg(['--renew-deadline', '20s'])).toThrow(/--renew-deadline.*shorter than --lease-duration/);
    expect(() => cfg(['--cleanup-grace-period', '2m0.5ms'])).toThrow(
      /--cleanup-grace-period.*whole number of milliseconds/,
    );
    expect(() => cfg(['--poll-backoff-max', '600h'])).toThrow(/--poll-backoff-max.*at most 24h/);
    expect(() => cfg(['--metrics-address', 'localhost'])).toThrow(/--metrics-address/);
    expect(() => cfg(['--manager-url', 'ftp://x'])).toThrow(/--manager-url \(PEERLOAD_MANAGER_URL\)/);
    expect(() => cfg(['--bogus'])).toThrow(ConfigError);
  });

  it('takes the peer daemon version whose task ids status shows (default: 1.4, the tested Dragonfly v2.5.1)', () => {
    expect(cfg([]).peerDaemonVersion).toBe('1.4');
    expect(cfg(['--peer-daemon-version', '1.5.3']).peerDaemonVersion).toBe('1.5.3+');
    expect(cfg([], { PEERLOAD_PEER_DAEMON_VERSION: 'v1.4.2' }).peerDaemonVersion).toBe('1.4');
    expect(() => cfg(['--peer-daemon-version', 'newest'])).toThrow(
      /--peer-daemon-version \(PEERLOAD_PEER_DAEMON_VERSION\): must be "1.4", "1.5.3\+" or .*got "newest"/,
    );
  });

  it('answers --help with every flag', () => {
    const r = loadConfig(['--help'], {});
    expect('help' in r && r.help).toMatch(/--leader-election-namespace.*PEERLOAD_LEADER_ELECTION_NAMESPACE/);
  });
});
