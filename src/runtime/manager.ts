/**
 * The manager: owns the shared informers, the controllers, leader election, the health/metrics server and
 * the process lifecycle.
 *
 * run():  listen on the metrics address -> build the controllers -> start informers -> wait for sync ->
 *         (leader election on) campaign; controllers start only once leading | (off) start controllers
 *         -> wait for SIGTERM/SIGINT (or the signal passed in, or a lost lease)
 * stop:   stop taking work and drain in-flight reconciles (up to ~80% of the shutdown deadline; abandoned
 *         after that) -> release the lease (holderIdentity cleared) -> stop informers -> close the server.
 * Resolves 0 after a requested shutdown, 1 when the lease was lost (as controller-runtime, the process must
 * then exit: another instance is about to lead).
 */
import type { Logger } from 'pino';
import type { Controller } from './controller.ts';
import { EventRecorder } from './events.ts';
import { DelegatedAuth } from './authz.ts';
import { HealthServer } from './health.ts';
import { Informer, type InformerOptions } from './informer.ts';
import { KubeClient, type Gvr, type KubeIdentity, type KubeObject } from './kube.ts';
import { kubeconfigFromFile, inClusterConfig } from './kubeconfig.ts';
import { LeaderElector } from './leader.ts';
import { Metrics } from './metrics.ts';
import { StatusWriter } from './status.ts';
import { loadCertificate, selfSignedCertificate, type CertificateKeyPair } from './tls.ts';
import { hostname } from 'node:os';
import { timerDelay } from './timers.ts';

/** What the runtime itself reads of the process's configuration (durations in milliseconds). */
export interface RuntimeOptions {
  /** Path of a kubeconfig; none: in-cluster. Used when the Manager is given no KubeClient. */
  kubeconfig?: string | undefined;
  /** Namespace the informers watch; '' for all. */
  namespace: string;
  resyncPeriod: number;
  /** This process's name in the Lease and in Events. */
  identity: string;
  leaderElect: boolean;
  leaderElectionId: string;
  leaderElectionNamespace: string;
  leaseDuration: number;
  renewDeadline: number;
  retryPeriod: number;
  /** host:port of /metrics, /healthz and /readyz. */
  metricsAddress: string;
  /** /metrics over HTTPS, callers authenticated (TokenReview) and authorized (SubjectAccessReview). */
  metricsSecure: boolean;
  /** tls.crt and tls.key of the metrics server; none: a self-signed certificate made at start. */
  metricsCertDir?: string | undefined;
  shutdownTimeout: number;
}

/**
 * The configuration a controller finds in its context: the runtime's options, and whatever the product adds by
 * declaring it into this interface (TypeScript's module augmentation):
 *
 *   declare module '../runtime/manager.ts' {
 *     interface ControllerConfig extends ProductConfig {}
 *   }
 *
 * so that the runtime never imports the product's configuration and the product's controllers still read theirs
 * from `ctx.config` with its types.
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- extended by the product (see above)
export interface ControllerConfig extends RuntimeOptions {}

/** Everything a controller factory may use. */
export interface ControllerContext {
  kube: KubeClient;
  informers: InformerFactory;
  events: EventRecorder;
  status: StatusWriter;
  config: ControllerConfig;
  logger: Logger;
  metrics: Metrics;
}

/** How controllers are registered: a function of the shared context returning a Controller. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type ControllerFactory = (ctx: ControllerContext) => Controller<any>;

export type SharedInformerOptions<T> = Pick<
  InformerOptions<T>,
  'labelSelector' | 'fieldSelector' | 'transform'
> & {
  /** Overrides the operator's namespace for this informer ('' = all namespaces). */
  namespace?: string;
};

/** One shared informer per resource (and selector): every controller watching Pods shares one cache. */
export class InformerFactory {
  private readonly kube: KubeClient;
  private readonly namespace: string;
  private readonly resyncPeriodMs: number;
  private readonly logger: Logger;
  private readonly metrics: Metrics | undefined;
  private readonly informers = new Map<string, Informer<KubeObject>>();
  private started = false;

  constructor(
    kube: KubeClient,
    opts: { namespace: string; resyncPeriodMs: number; logger: Logger; metrics?: Metrics },
  ) {
    this.kube = kube;
    this.namespace = opts.namespace;
    this.resyncPeriodMs = opts.resyncPeriodMs;
    this.logger = opts.logger;
    this.metrics = opts.metrics;
  }

  get<T extends KubeObject>(gvr: Gvr, opts: SharedInformerOptions<T> = {}): Informer<T> {
    const namespace = opts.namespace ?? this.namespace;
    const id = JSON.stringify([
      gvr.group,
      gvr.version,
      gvr.resource,
      namespace,
      opts.labelSelector,
      opts.fieldSelector,
    ]);
    let inf = this.informers.get(id) as Informer<T> | undefined;
    if (!inf) {
      const restarts = this.metrics?.informerRestarts;
      inf = new Informer<T>(this.kube.resource<T>(gvr), {
        ...opts,
        namespace,
        resyncPeriodMs: this.resyncPeriodMs,
        logger: this.logger,
        onRestart: restarts ? (kind) => restarts.labels(gvr.resource, kind).inc() : undefined,
      });
      this.informers.set(id, inf as unknown as Informer<KubeObject>);
      if (this.started) inf.start();
    }
    return inf;
  }

  all(): Informer<KubeObject>[] {
    return [...this.informers.values()];
  }

  start(): void {
    this.started = true;
    for (const i of this.informers.values()) i.start();
  }

  hasSynced(): boolean {
    return [...this.informers.values()].every((i) => i.hasSynced());
  }

  async waitForSync(signal?: AbortSignal): Promise<boolean> {
    const r = await Promise.all([...this.informers.values()].map((i) => i.waitForSync(signal)));
    return r.every(Boolean);
  }

  async stop(): Promise<void> {
    await Promise.all([...this.informers.values()].map((i) => i.stop()));
  }
}

export interface ManagerOptions {
  config: ControllerConfig;
  logger: Logger;
  /** Default: from `config.kubeconfig` or in-cluster (pass one built from `loadKubeConfig` for auth plugins). */
  kube?: KubeClient;
  /** How the default KubeClient names itself (used without `kube`). */
  kubeIdentity?: KubeIdentity;
  /** Who reports the Events (`reportingController`), e.g. `example.io/operator`. */
  reportingController: string;
  /** Default: `new Metrics({ namespace: metricsNamespace })`. */
  metrics?: Metrics;
  /** The prefix of the runtime's metrics that have no ecosystem name (see Metrics); used without `metrics`. */
  metricsNamespace?: string;
  /** Install SIGTERM/SIGINT handlers (a second signal exits at once with 1). Default true. */
  handleSignals?: boolean;
}

export class Manager {
  readonly config: ControllerConfig;
  readonly logger: Logger;
  readonly kube: KubeClient;
  readonly metrics: Metrics;
  readonly informers: InformerFactory;
  readonly events: EventRecorder;
  readonly status: StatusWriter;
  readonly health: HealthServer;
  readonly controllers: Controller<KubeObject>[] = [];
  private readonly factories: ControllerFactory[] = [];
  private readonly handleSignals: boolean;
  private elector: LeaderElector | undefined;
  private controllersStarted = false;
  private readonly stopRequested = new AbortController();
  private exitCode = 0;
  private certReload: NodeJS.Timeout | undefined;
  /** Port the health server bound (after run() started listening). */
  port = 0;

  constructor(opts: ManagerOptions) {
    this.config = opts.config;
    this.logger = opts.logger;
    this.kube = opts.kube ?? new KubeClient(syncKubeConfig(opts.config.kubeconfig), opts.kubeIdentity);
    this.metrics = opts.metrics ?? new Metrics({ namespace: opts.metricsNamespace });
    this.metrics.observeKube(this.kube);
    this.handleSignals = opts.handleSignals ?? true;
    this.informers = new InformerFactory(this.kube, {
      namespace: this.config.namespace,
      resyncPeriodMs: this.config.resyncPeriod,
      logger: this.logger,
      metrics: this.metrics,
    });
    this.events = new EventRecorder(this.kube, {
      controller: opts.reportingController,
      instance: this.config.identity,
      logger: this.logger,
    });
    this.status = new StatusWriter(this.kube, this.logger);
    this.health = new HealthServer(this.metrics.registry, this.metricsServing());
    this.health.liveness.set('ping', () => true);
    this.health.readiness.set(
      'informers',
      () => this.informers.hasSynced() || 'informers have not synced yet',
    );
    this.health.readiness.set('controllers', () =>
      !this.elector?.isLeader() || this.controllersStarted ? true : 'leading but controllers not started',
    );
  }

  /**
   * --metrics-secure: HTTPS with the certificate of --metrics-cert-dir (re-read every 10 s, so a rotated Secret
   * is served without a restart) or a self-signed one, and /metrics behind a TokenReview + SubjectAccessReview.
   */
  private metricsServing(): ConstructorParameters<typeof HealthServer>[1] {
    const c = this.config;
    if (!c.metricsSecure) return {};
    let tls: CertificateKeyPair;
    if (c.metricsCertDir) {
      try {
        tls = loadCertificate(c.metricsCertDir);
      } catch (err) {
        throw new Error(`--metrics-cert-dir: ${(err as Error).message}`, { cause: err });
      }
    } else {
      tls = selfSignedCertificate([hostname(), 'localhost', '127.0.0.1', '::1']);
    }
    return {
      tls,
      authorizeMetrics: new DelegatedAuth(this.kube, {
        logger: this.logger.child({ component: 'metrics-auth' }),
      }).authorize,
    };
  }

  private watchCertificate(dir: string): void {
    this.certReload = setInterval(() => {
      let next: CertificateKeyPair;
      try {
        next = loadCertificate(dir);
      } catch (err) {
        // Mid-update (the kubelet swaps the Secret's files one symlink at a time): keep serving the old one.
        this.logger.warn(
          { err: (err as Error).message },
          'cannot read the metrics certificate; keeping the old one',
        );
        return;
      }
      if (next.cert === this.health.certificate) return;
      this.health.setCertificate(next);
      this.logger.info({ dir }, 'serving the renewed metrics certificate');
    }, 10_000);
    this.certReload.unref();
  }

  get context(): ControllerContext {
    return {
      kube: this.kube,
      informers: this.informers,
      events: this.events,
      status: this.status,
      config: this.config,
      logger: this.logger,
      metrics: this.metrics,
    };
  }

  add(...factories: ControllerFactory[]): this {
    this.factories.push(...factories);
    return this;
  }

  isLeader(): boolean {
    return this.config.leaderElect ? (this.elector?.isLeader() ?? false) : this.controllersStarted;
  }

  /** Asks a running manager to shut down (as SIGTERM does). */
  stop(exitCode = 0): void {
    if (!this.stopRequested.signal.aborted) this.exitCode = exitCode;
    this.stopRequested.abort();
  }

  async run(signal?: AbortSignal): Promise<number> {
    const log = this.logger;
    const stop = this.stopRequested.signal;
    signal?.addEventListener('abort', () => this.stop(0), { once: true });
    const onSignal = (sig: NodeJS.Signals) => {
      if (stop.aborted) {
        log.warn({ signal: sig }, 'second signal: exiting now');
        process.exit(1);
      }
      log.info({ signal: sig }, 'shutting down');
      this.stop(0);
    };
    if (this.handleSignals) {
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);
    }
    try {
      this.port = await this.health.listen(this.config.metricsAddress);
      if (this.config.metricsSecure && this.config.metricsCertDir)
        this.watchCertificate(this.config.metricsCertDir);
      // Plain HTTP is for local development: say so loudly in a cluster's log.
      log[this.health.secure ? 'info' : 'warn'](
        { address: this.config.metricsAddress, port: this.port, secure: this.health.secure },
        this.health.secure
          ? 'serving /metrics (authenticated and authorized), /healthz, /readyz over HTTPS'
          : 'serving /metrics, /healthz, /readyz over plain HTTP, /metrics without authentication',
      );
      for (const f of this.factories) this.controllers.push(f(this.context));
      this.informers.start();
      const synced = await this.informers.waitForSync(stop);
      if (synced) log.info({ informers: this.informers.all().length }, 'informers synced');

      const electionAbort = new AbortController();
      const election = synced && !stop.aborted ? this.lead(electionAbort.signal) : undefined;

      await new Promise<void>((resolve) => {
        if (stop.aborted) resolve();
        else stop.addEventListener('abort', () => resolve(), { once: true });
      });
      await this.shutdown(electionAbort, election);
      return this.exitCode;
    } catch (err) {
      // Start-up failed (port in use, a controller factory threw): release what was started, then report.
      for (const c of this.controllers) if (c.isRunning) await c.stop(0);
      clearInterval(this.certReload);
      await this.informers.stop();
      await this.health.close();
      await this.kube.close();
      throw err;
    } finally {
      if (this.handleSignals) {
        process.off('SIGTERM', onSignal);
        process.off('SIGINT', onSignal);
      }
    }
  }

  /**
   * The controllers started: at once without leader election; with it, once this replica leads (losing the lease
   * stops the manager with exit code 1). Returns the election's end, or undefined without one.
   */
  private lead(signal: AbortSignal): Promise<'stopped' | 'lost'> | undefined {
    if (!this.config.leaderElect) {
      this.startControllers();
      return undefined;
    }
    const stop = this.stopRequested.signal;
    const leader = this.metrics.leader.labels(this.config.leaderElectionId);
    leader.set(0);
    this.elector = new LeaderElector({
      kube: this.kube,
      namespace: this.config.leaderElectionNamespace,
      name: this.config.leaderElectionId,
      identity: this.config.identity,
      leaseDurationMs: this.config.leaseDuration,
      renewDeadlineMs: this.config.renewDeadline,
      retryPeriodMs: this.config.retryPeriod,
      logger: this.logger.child({ component: 'leader-election' }),
      onStartedLeading: () => {
        leader.set(1);
        if (!stop.aborted) this.startControllers();
      },
      onStoppedLeading: () => leader.set(0),
    });
    return this.elector.run(signal).then((r) => {
      if (r === 'lost') this.stop(1);
      return r;
    });
  }

  private startControllers(): void {
    if (this.controllersStarted) return;
    for (const c of this.controllers) c.start();
    this.controllersStarted = true;
  }

  private async shutdown(
    electionAbort: AbortController,
    election: Promise<unknown> | undefined,
  ): Promise<void> {
    const log = this.logger;
    const started = Date.now();
    const deadline = this.config.shutdownTimeout;
    const lost = this.exitCode !== 0;
    // Drain first, while still renewing the lease: nobody else may start reconciling our keys meanwhile.
    // With the lease lost, another instance may lead any moment: abandon in-flight work at once.
    const drainMs = lost ? 0 : deadline * 0.8;
    const drained = await Promise.all(this.controllers.map((c) => (c.isRunning ? c.stop(drainMs) : true)));
    electionAbort.abort();
    await election;
    if (this.elector && !lost) await this.elector.release();
    await withTimeout(this.events.flush(), Math.max(0, deadline - (Date.now() - started)) / 2);
    await this.informers.stop();
    clearInterval(this.certReload);
    await this.health.close();
    await this.kube.close();
    log.info(
      { durationMs: Date.now() - started, drained: drained.every(Boolean), exitCode: this.exitCode },
      'shutdown complete',
    );
  }
}

async function withTimeout(p: Promise<unknown>, ms: number): Promise<void> {
  let t: NodeJS.Timeout | undefined;
  await Promise.race([p, new Promise((r) => (t = setTimeout(r, timerDelay(ms))))]);
  clearTimeout(t);
}

function syncKubeConfig(path: string | undefined) {
  if (!path) return inClusterConfig();
  const kc = kubeconfigFromFile(path);
  if (!kc)
    throw new Error(`kubeconfig ${path} uses an auth plugin: build the KubeClient from loadKubeConfig()`);
  return kc;
}
