/**
 * peerload's resources in one namespace as the integration and e2e tests drive them: create a ServedModel or a
 * ModelPreheat, read it back, and wait until its status says what a test waits for.
 */
import * as k8s from '@kubernetes/client-node';
import type { Condition, ModelPreheat, ServedModel } from '../../src/api/index.ts';
import { inject } from 'vitest';
import { createNamespace, kubeConfig } from './kube.ts';
import { waitFor } from './process.ts';

export const GROUP = 'peerload.io';
export const VERSION = 'v1alpha1';

type Plural = 'servedmodels' | 'modelpreheats';
const KIND: Record<Plural, string> = { servedmodels: 'ServedModel', modelpreheats: 'ModelPreheat' };

/** How long and how often a wait polls the apiserver. */
export interface Poll {
  timeoutMs?: number;
  intervalMs?: number;
}

/**
 * A ServedModel's `preheat` against the manager emulator in its v2.5.1 profile: a named scheduler cluster (the
 * manager rate-limits job creations per named cluster) and an S3 bucket that nobody reads (the emulator fetches
 * nothing), with the Secrets `s3` and `manager-user`.
 */
export function emulatedManagerPreheat(managerURL: string) {
  return {
    create: true,
    objectStorage: {
      type: 's3',
      bucket: 'models',
      region: 'us-east-1',
      endpoint: 'http://127.0.0.1:9',
      pathStyle: true,
      credentialsSecretRef: { name: 's3' },
    },
    schedulerClusterIDs: [1],
    manager: { url: managerURL, signInSecretRef: { name: 'manager-user' } },
  };
}

/**
 * The spec of a ServedModel of one model archive, `models/<modelName>.mar`, registered on the replicas behind
 * Service `service`; `extra` adds to it (rollout, deletion, preheat…).
 */
export function archiveServedModel(modelName: string, service: string, extra: object = {}) {
  return {
    modelName,
    fileName: `models/${modelName}.mar`,
    modelServer: { service: { name: service } },
    ...extra,
  };
}

/** The condition `type` of an object's status, if any. */
export function conditionOf(
  o: { status?: { conditions?: Condition[] } },
  type: string,
): Condition | undefined {
  return o.status?.conditions?.find((c) => c.type === type);
}

/** peerload's objects of one namespace through the apiserver's custom-objects API, by plural. */
function customObjects(custom: k8s.CustomObjectsApi, namespace: string) {
  const get = async <T>(plural: Plural, name: string): Promise<T> =>
    (await custom.getNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural,
      name,
    })) as T;
  const create = (plural: Plural, name: string, spec: object) =>
    custom.createNamespacedCustomObject({
      group: GROUP,
      version: VERSION,
      namespace,
      plural,
      body: { apiVersion: `${GROUP}/${VERSION}`, kind: KIND[plural], metadata: { name }, spec },
    });
  const patch = (plural: Plural, name: string, body: object) =>
    custom.patchNamespacedCustomObject(
      { group: GROUP, version: VERSION, namespace, plural, name, body },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  const remove = (plural: Plural, name: string) =>
    custom.deleteNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural, name });
  const gone = (plural: Plural, name: string) =>
    get(plural, name).then(
      () => false,
      () => true,
    );
  /** Writes `status` through the /status subresource, as a controller does (the spec's generation stays). */
  const patchStatus = (plural: Plural, name: string, status: object) =>
    custom.patchNamespacedCustomObjectStatus(
      { group: GROUP, version: VERSION, namespace, plural, name, body: { status } },
      k8s.setHeaderOptions('Content-Type', k8s.PatchStrategy.MergePatch),
    );
  /** `kubectl get` of every object of `plural` (or of `name`) as the apiserver's Table: the printer columns. */
  const table = (plural: Plural, name?: string): Promise<unknown> => {
    const asTable = k8s.setHeaderOptions('Accept', 'application/json;as=Table;v=v1;g=meta.k8s.io');
    const at = { group: GROUP, version: VERSION, namespace, plural };
    return name === undefined
      ? custom.listNamespacedCustomObject(at, asTable)
      : custom.getNamespacedCustomObject({ ...at, name }, asTable);
  };
  const list = async <T>(plural: Plural) =>
    (
      (await custom.listNamespacedCustomObject({ group: GROUP, version: VERSION, namespace, plural })) as {
        items: T[];
      }
    ).items;
  return { get, create, patch, remove, gone, patchStatus, table, list };
}

export function peerloadNamespace(kc: k8s.KubeConfig, namespace: string) {
  const { get, create, patch, remove, gone, patchStatus, table, list } = customObjects(
    kc.makeApiClient(k8s.CustomObjectsApi),
    namespace,
  );
  /** Polls `name` until `ok` returns something (that is the result); the description names the wait's goal. */
  const until = <T, R>(
    plural: Plural,
    name: string,
    what: string,
    ok: (o: T) => R | undefined,
    poll: Poll = {},
  ) =>
    waitFor(`${name} ${what}`, async () => ok(await get<T>(plural, name)), {
      timeoutMs: poll.timeoutMs ?? 120_000,
      intervalMs: poll.intervalMs ?? 200,
    });

  return {
    namespace,
    get,
    table,
    getServedModel: (name: string) => get<ServedModel>('servedmodels', name),
    getModelPreheat: (name: string) => get<ModelPreheat>('modelpreheats', name),
    createServedModel: (name: string, spec: object) => create('servedmodels', name, spec),
    createModelPreheat: (name: string, spec: object) => create('modelpreheats', name, spec),
    /** A JSON merge patch of the ServedModel (`{ spec: … }`, `{ metadata: { annotations: … } }`). */
    patchServedModel: (name: string, body: object) => patch('servedmodels', name, body),
    patchModelPreheat: (name: string, body: object) => patch('modelpreheats', name, body),
    patchServedModelStatus: (name: string, status: object) => patchStatus('servedmodels', name, status),
    patchModelPreheatStatus: (name: string, status: object) => patchStatus('modelpreheats', name, status),
    deleteServedModel: (name: string) => remove('servedmodels', name),
    deleteModelPreheat: (name: string) => remove('modelpreheats', name),
    /** Whether the ServedModel is gone (reading it fails). */
    servedModelGone: (name: string) => gone('servedmodels', name),
    modelPreheatGone: (name: string) => gone('modelpreheats', name),
    listModelPreheats: () => list<ModelPreheat>('modelpreheats'),

    /**
     * The ServedModel once its condition Ready is True on `replicas` ready replicas (and, when `reason` is given,
     * for that reason).
     */
    untilReady: (name: string, replicas: number, o: Poll & { reason?: string } = {}) =>
      until<ServedModel, ServedModel>(
        'servedmodels',
        name,
        `Ready ${replicas}/${replicas}${o.reason ? ` (${o.reason})` : ''}`,
        (sm) => {
          const ready = conditionOf(sm, 'Ready');
          const ok =
            ready?.status === 'True' &&
            (o.reason === undefined || ready.reason === o.reason) &&
            sm.status?.readyReplicas === replicas;
          return ok ? sm : undefined;
        },
        o,
      ),

    /**
     * The ServedModel once Ready is True with `ready` as its status.ready (`2/2`: ready on 2 of the 2 replicas
     * found). While it is Stalled the wait goes on but records why, so that a time-out names its conditions.
     */
    untilReadyOn: (name: string, ready: string, o: Poll = {}) =>
      until<ServedModel, ServedModel>(
        'servedmodels',
        name,
        `Ready ${ready}`,
        (sm) => {
          if (conditionOf(sm, 'Stalled')?.status === 'True')
            throw new Error(`Stalled: ${JSON.stringify(sm.status?.conditions)}`);
          return conditionOf(sm, 'Ready')?.status === 'True' && sm.status?.ready === ready ? sm : undefined;
        },
        o,
      ),

    /**
     * The ServedModel once its condition Stalled is True (and, when `reason` is given, for that reason); its message
     * says why.
     */
    untilStalled: (name: string, o: Poll & { reason?: string } = {}) =>
      until<ServedModel, ServedModel>(
        'servedmodels',
        name,
        `Stalled${o.reason ? ` ${o.reason}` : ''}`,
        (sm) => {
          const stalled = conditionOf(sm, 'Stalled');
          return stalled?.status === 'True' && (o.reason === undefined || stalled.reason === o.reason)
            ? sm
            : undefined;
        },
        o,
      ),

    /** The ServedModel once `ok` holds of it. */
    untilServedModel: (name: string, what: string, ok: (sm: ServedModel) => boolean, o: Poll = {}) =>
      until<ServedModel, ServedModel>('servedmodels', name, what, (sm) => (ok(sm) ? sm : undefined), o),

    /** The ModelPreheat once `ok` holds of it. */
    untilModelPreheat: (name: string, what: string, ok: (p: ModelPreheat) => boolean, o: Poll = {}) =>
      until<ModelPreheat, ModelPreheat>('modelpreheats', name, what, (p) => (ok(p) ? p : undefined), o),

    /** The ModelPreheat once its job's state is `state`. */
    untilState: (name: string, state: string, o: Poll = {}) =>
      until<ModelPreheat, ModelPreheat>(
        'modelpreheats',
        name,
        state,
        (p) => (p.status?.state === state ? p : undefined),
        o,
      ),
  };
}

export type PeerloadNamespace = ReturnType<typeof peerloadNamespace>;

/**
 * A namespace of its own (`<prefix>-<random>`) on the test apiserver, for one integration or e2e file: the admin's
 * KubeConfig and clients, and peerload's resources in it. namespace-cleanup.ts empties it after the file.
 */
export async function testNamespace(prefix: string) {
  const kc = kubeConfig(inject('kubeconfigPath'));
  const ns = await createNamespace(kc, prefix);
  return {
    kc,
    ns,
    core: kc.makeApiClient(k8s.CoreV1Api),
    custom: kc.makeApiClient(k8s.CustomObjectsApi),
    peerload: peerloadNamespace(kc, ns),
  };
}
