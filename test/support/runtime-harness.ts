/** In-process managers for runtime integration tests: config, request recording, start/stop. */
import { Writable } from 'node:stream';
import { loadConfig, type OperatorConfig } from '../../src/config.ts';
import { OPERATOR_IDENTITY, createServedModelController } from '../../src/controllers/index.ts';
import { loopbackDispatcher } from './endpointslices.ts';
import { loopbackOperatorFlags } from './loopback-profile.ts';
import {
  KubeClient,
  Manager,
  createLogger,
  type ControllerFactory,
  type Logger,
  type RequestRecord,
} from '../../src/runtime/index.ts';
import type * as k8s from '@kubernetes/client-node';
import type { LevelWithSilent } from 'pino';
import type { Agent } from 'undici';

/**
 * Operator config for tests: flags as the CLI takes them, after the loopback profile (test/support/loopback-profile.ts:
 * every allow-list admits loopback, metrics over plain HTTP on a free port); a test's own flags win.
 */
export function testConfig(flags: string[]): OperatorConfig {
  const loaded = loadConfig(
    ['--log-level', process.env.TEST_LOG_LEVEL ?? 'silent', ...loopbackOperatorFlags(), ...flags],
    {},
  );
  if ('help' in loaded) throw new Error('unexpected help');
  return loaded.config;
}

/**
 * The flags of an operator a test starts on its own: no leader election (nothing to share the work with), and
 * retries 200 ms apart at first, growing to `maxBackoff` (a test waits seconds, not the defaults' minutes).
 */
export function soloOperatorFlags(maxBackoff = '1s'): string[] {
  return ['--no-leader-elect', '--poll-backoff-start', '200ms', '--poll-backoff-max', maxBackoff];
}

export interface RunningManager {
  manager: Manager;
  kube: KubeClient;
  /** Every request the manager's client made (watches included, flagged). */
  requests: RequestRecord[];
  /** Resolves with run()'s exit code. */
  done: Promise<number>;
  stop(): Promise<number>;
  url(path: string): string;
}

export async function startManager(
  kc: k8s.KubeConfig,
  flags: string[],
  factories: ControllerFactory[],
  opts: { logger?: Logger } = {},
): Promise<RunningManager> {
  const config = testConfig(flags);
  const kube = new KubeClient(kc, OPERATOR_IDENTITY.kubeIdentity);
  const requests: RequestRecord[] = [];
  kube.onRequest((r) => requests.push(r));
  const logger = opts.logger ?? createLogger(config.logLevel);
  const manager = new Manager({ config, logger, kube, handleSignals: false, ...OPERATOR_IDENTITY }).add(
    ...factories,
  );
  const done = manager.run();
  const started = Date.now();
  while (!manager.port) {
    if (Date.now() - started > 10_000) throw new Error('manager did not listen');
    await new Promise((r) => setTimeout(r, 20));
  }
  const port = manager.port;
  return {
    manager,
    kube,
    requests,
    done,
    async stop() {
      manager.stop();
      return done;
    },
    url: (path) => `${manager.health.secure ? 'https' : 'http'}://127.0.0.1:${port}${path}`,
  };
}

/** verb (as RBAC sees it) and resource of a recorded request. */
export function rbacOf(r: RequestRecord): {
  verb: string;
  group: string;
  resource: string;
  namespaced: boolean;
} {
  const parts = r.path.split('/').filter(Boolean);
  let i: number;
  let group: string;
  if (parts[0] === 'api') {
    group = '';
    i = 2;
  } else {
    group = parts[1]!;
    i = 3;
  }
  let namespaced = false;
  if (parts[i] === 'namespaces' && parts.length > i + 2) {
    namespaced = true;
    i += 2;
  }
  const resource = parts[i]!;
  const name = parts[i + 1];
  const sub = parts[i + 2];
  const verb =
    r.method === 'GET'
      ? r.watch
        ? 'watch'
        : name === undefined
          ? 'list'
          : 'get'
      : ({ POST: 'create', PUT: 'update', PATCH: 'patch', DELETE: 'delete' } as Record<string, string>)[
          r.method
        ]!;
  return { verb, group, resource: sub ? `${resource}/${sub}` : resource, namespaced };
}

/**
 * The ServedModel controller alone, reconciling namespace `ns` only (objects other files leave behind, whose
 * EndpointSlices may name ports this file's emulators reuse, are not its to reconcile) and reaching the emulated
 * replicas on loopback. Retries grow to `maxBackoff`; `flags` come last.
 */
export function startServedModelOperator(
  kc: k8s.KubeConfig,
  ns: string,
  o: { maxBackoff?: string; flags?: string[] } = {},
): Promise<RunningManager> {
  return startManager(
    kc,
    ['--namespace', ns, ...soloOperatorFlags(o.maxBackoff), ...(o.flags ?? [])],
    [(ctx) => createServedModelController(ctx, { dispatcher: loopbackDispatcher() })],
  );
}

/** A ServedModel operator a rollout test stops and starts again (an operator restarted mid-rollout): quick
 *  backoff, replicas reached through `dispatcher`. */
export interface RestartableOperator {
  start(): Promise<void>;
  stop(): Promise<void>;
}

export function restartableServedModelOperator(kc: k8s.KubeConfig, dispatcher: Agent): RestartableOperator {
  let running: RunningManager | undefined;
  return {
    async start() {
      running = await startManager(
        kc,
        ['--no-leader-elect', '--poll-backoff-start', '100ms', '--poll-backoff-max', '500ms'],
        [(ctx) => createServedModelController(ctx, { dispatcher, cleanupGraceMs: 2000 })],
      );
    },
    async stop() {
      await running?.stop();
      running = undefined;
    },
  };
}

/**
 * A logger (debug unless `level` says otherwise) whose lines are kept, for tests that look for what must never be
 * logged (secrets): `lines` one a record, `text()` all of them.
 */
export function capturedLogger(level: LevelWithSilent = 'debug'): {
  logger: Logger;
  lines: string[];
  text(): string;
} {
  const lines: string[] = [];
  const sink = new Writable({
    write(chunk, _enc, done) {
      lines.push(String(chunk));
      done();
    },
  });
  return { logger: createLogger(level, sink), lines, text: () => lines.join('') };
}
