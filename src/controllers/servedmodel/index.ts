/**
 * The ServedModel controller: the reconciler (reconciler.ts) wired to the operator's informers, status writer,
 * events, metrics and model-server drivers. Pods are found through the EndpointSlices of the Service, so a new,
 * removed or restarted pod wakes the ServedModel; a ModelPreheat it waits for wakes it too; worker readiness is
 * polled with requeueAfter.
 */
import {
  ServedModelSpec,
  type ModelPreheat,
  type ServedModel,
  type ServedModelStatus,
  GVR,
  replicaAccess,
} from '../../api/index.ts';
import type { Dispatcher } from 'undici';
import type { ModelServerDrivers, Registered } from '../../servers/driver.ts';
import { modelServerDrivers } from '../../servers/index.ts';
import { sharedModelServerPool } from '../../servers/pools.ts';
import {
  Controller,
  specChanged,
  type ControllerContext,
  type ControllerFactory,
  type WatchSource,
} from '../../runtime/index.ts';
import { operatorMetrics } from '../metrics.ts';
import { SecretReader } from '../secrets.ts';
import { statusWriter } from '../status.ts';
import { servedModelCleanup } from './cleanup.ts';
import { ModelDirectories } from './files.ts';
import { operatorSources } from '../../sources/index.ts';
import { ReplicaGates } from './gates.ts';
import { NodeAddresses } from './node-addresses.ts';
import { SERVED_MODEL_LABEL, preheatNameOf } from './preheat.ts';
import { ServedModelReconciler } from './reconciler.ts';
import { RegistrationRunner } from './registrations.ts';
import { SERVICE_NAME_LABEL, type EndpointSlice } from './replicas.ts';

/** Nodes scheduled within this window share one node-targeted preheat job. */
const TARGET_BATCH_WINDOW_MS = 2_000;

export interface ServedModelControllerOptions {
  /** Connection pool toward the model servers (default: the model-server client's shared pool). Tests use it to
   *  reach emulated replicas whose EndpointSlice addresses are not on this machine. */
  dispatcher?: Dispatcher;
  /** How long a deletion keeps trying unreachable replicas before it lets go, when the spec does not say.
   *  Default: the operator's --cleanup-grace-period. */
  cleanupGraceMs?: number;
  /** How long new nodes wait to share one node-targeted preheat job (default 2 s). */
  targetBatchWindowMs?: number;
  /** The model-server drivers (default: every driver the operator knows, TorchServe the default). */
  drivers?: ModelServerDrivers;
  /** Toward OCI registries (spec.source.oci; default the shared pool). */
  registryDispatcher?: Dispatcher;
  /** The cap on an OCI manifest (default 4 MiB). */
  maxManifestBytes?: number;
  /** Connection pool toward the Hugging Face Hub (default: undici's global one). */
  hubDispatcher?: Dispatcher;
}

export const servedModelController: ControllerFactory = (ctx) => createServedModelController(ctx, {});

export function createServedModelController(
  ctx: ControllerContext,
  opts: ServedModelControllerOptions,
): Controller<ServedModel> {
  const { models, slices, preheats, watches } = informers(ctx);
  const secrets = new SecretReader(ctx.kube);
  const drivers =
    opts.drivers ??
    modelServerDrivers({
      secret: (namespace, ref) => secrets.value(namespace, ref),
      dispatcher: opts.dispatcher,
    });
  const registrations = new RegistrationRunner<Registered>({
    global: ctx.config.maxConcurrentRegistrations,
    perNamespace: ctx.config.maxRegistrationsPerNamespace,
    // Registrations start in reconciles, so the controller exists by the time one reports.
    onChange: (owner) => controller.enqueue(owner),
  });
  // A conflict is thrown, not retried in the writer: the pass's replica statuses are observations of that pass.
  const writeStatus = statusWriter<ServedModel, ServedModelStatus>(ctx, GVR.servedModels, {
    conflict: 'fail',
  });
  const cleanUp = servedModelCleanup({
    ctx,
    registrations,
    serverFor: (sm, spec, r) =>
      drivers.get(spec.modelServer.driver).replica(
        {
          uid: sm.metadata.uid ?? `${sm.metadata.namespace}/${sm.metadata.name}`,
          namespace: sm.metadata.namespace!,
        },
        replicaAccess(spec),
        r,
      ),
    writeStatus,
    graceMs: opts.cleanupGraceMs ?? ctx.config.cleanupGracePeriod,
    forget: (key, uid) => reconciler.forget(key, uid),
  });
  const reconciler = new ServedModelReconciler({
    kube: ctx.kube,
    events: ctx.events,
    config: ctx.config,
    model: (key) => models.get(key),
    slices: (namespace, service) => slices.byIndex('service', `${namespace}/${service}`),
    gates: new ReplicaGates({
      kube: ctx.kube,
      preheats,
      nodeAddresses: new NodeAddresses(ctx.kube),
      batchWindowMs: opts.targetBatchWindowMs ?? TARGET_BATCH_WINDOW_MS,
    }),
    ...modelContent(ctx, secrets, opts),
    drivers,
    registrations,
    writeStatus,
    writes: ctx.status,
    cleanUp,
    metrics: operatorMetrics(ctx.metrics),
  });

  const controller = new Controller<ServedModel>(
    {
      name: 'servedmodel',
      for: models,
      reconcile: (key, rc) => reconciler.reconcile(key, rc),
      workers: ctx.config.workers,
      maxWorkersPerNamespace: ctx.config.maxWorkersPerNamespace,
      predicate: specChanged,
      onStop: () => registrations.stop(),
      watches,
    },
    { logger: ctx.logger, metrics: ctx.metrics },
  );
  return controller;
}

/** Where a model's files come from: a bucket's directory (listed), or a source (resolved), with the namespace's
 *  Secrets. */
function modelContent(ctx: ControllerContext, secrets: SecretReader, opts: ServedModelControllerOptions) {
  const secretData = (namespace: string, name: string, signal?: AbortSignal) =>
    secrets.data(namespace, name, signal);
  const sources = operatorSources(
    ctx.config,
    { secretData, secretValue: (namespace, ref, signal) => secrets.value(namespace, ref, signal) },
    {
      registryDispatcher: opts.registryDispatcher ?? sharedModelServerPool(),
      hubDispatcher: opts.hubDispatcher,
      maxManifestBytes: opts.maxManifestBytes,
    },
  );
  return { directories: new ModelDirectories({ secretData }), sources };
}

/** The informers the controller reads, indexed so that an EndpointSlice or a ModelPreheat event wakes the
 *  ServedModels it concerns. */
function informers(ctx: ControllerContext) {
  const models = ctx.informers.get<ServedModel>(GVR.servedModels);
  const slices = ctx.informers.get<EndpointSlice>(GVR.endpointSlices, { labelSelector: SERVICE_NAME_LABEL });
  slices.addIndexer('service', (s) => [`${s.metadata.namespace}/${s.metadata.labels?.[SERVICE_NAME_LABEL]}`]);
  const preheats = ctx.informers.get<ModelPreheat>(GVR.modelPreheats);
  models.addIndexer('service', (sm) => {
    const svc = (sm.spec as ServedModelSpec | undefined)?.modelServer?.service?.name;
    return svc ? [`${sm.metadata.namespace}/${svc}`] : [];
  });
  models.addIndexer('preheat', (sm) => {
    const parsed = ServedModelSpec.safeParse(sm.spec);
    const name = parsed.success ? preheatNameOf(sm, parsed.data) : undefined;
    return name ? [`${sm.metadata.namespace}/${name}`] : [];
  });
  const keysOf = (index: string, value: string) =>
    models.byIndex(index, value).map((sm) => `${sm.metadata.namespace}/${sm.metadata.name}`);
  const watches: [WatchSource<EndpointSlice>, WatchSource<ModelPreheat>] = [
    {
      informer: slices,
      map: (s) => keysOf('service', `${s.metadata.namespace}/${s.metadata.labels?.[SERVICE_NAME_LABEL]}`),
    },
    { informer: preheats, map: (p) => preheatWakes(p, keysOf) },
  ];
  return { models, slices, preheats, watches };
}

/**
 * The ServedModels a ModelPreheat event concerns: those naming it (preheat.name, or the first owned batch) and its
 * owner by label, which also covers the owned batches past the first (preheat-batches.ts).
 */
function preheatWakes(p: ModelPreheat, keysOf: (index: string, value: string) => string[]): string[] {
  const keys = keysOf('preheat', `${p.metadata.namespace}/${p.metadata.name}`);
  const owner = p.metadata.labels?.[SERVED_MODEL_LABEL];
  const ownerKey = owner ? `${p.metadata.namespace}/${owner}` : undefined;
  return ownerKey && !keys.includes(ownerKey) ? [...keys, ownerKey] : keys;
}
