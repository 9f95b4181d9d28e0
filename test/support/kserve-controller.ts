/**
 * The real KServe controller manager (scripts/setup-kserve.sh builds v0.20.0 from the Go module proxy) against the
 * test apiserver: KServe's CRDs, its `inferenceservice-config` ConfigMap from the module (Standard, i.e. raw
 * Deployment, mode, no ingress: there is no Istio nor Gateway here), the manager with a serving certificate the
 * harness makes for 127.0.0.1, and its pod-mutating and InferenceService-defaulting webhooks registered with the
 * apiserver by URL with that certificate as their CA bundle.
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { load } from 'js-yaml';
import type { KubeClient, KubeObject } from '../../src/runtime/index.ts';
import { selfSignedCertificate } from '../../src/runtime/tls.ts';
import { installKServeCrds } from './kserve.ts';
import { REPO_ROOT } from './kube.ts';
import { freePort } from './ports.ts';
import { startProcess, waitFor, type ManagedProcess } from './process.ts';

export const KSERVE_NAMESPACE = 'kserve';

/** $PEERLOAD_CACHE/kserve-<version>: bin/manager and crd/ (building them once). */
export function kserveDir(): string {
  const out = execFileSync('bash', [join(REPO_ROOT, 'scripts/setup-kserve.sh')], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return out.trim().split('\n').pop()!;
}

export const gvr = (group: string, version: string, resource: string, kind: string, namespaced = true) => ({
  group,
  version,
  resource,
  kind,
  namespaced,
});
export const GVR = {
  namespace: gvr('', 'v1', 'namespaces', 'Namespace', false),
  configMap: gvr('', 'v1', 'configmaps', 'ConfigMap', true),
  mutating: gvr(
    'admissionregistration.k8s.io',
    'v1',
    'mutatingwebhookconfigurations',
    'MutatingWebhookConfiguration',
    false,
  ),
  isvc: gvr('serving.kserve.io', 'v1beta1', 'inferenceservices', 'InferenceService', true),
  servingRuntime: gvr('serving.kserve.io', 'v1alpha1', 'servingruntimes', 'ServingRuntime', true),
  storageContainer: gvr(
    'serving.kserve.io',
    'v1alpha1',
    'clusterstoragecontainers',
    'ClusterStorageContainer',
    false,
  ),
};

export interface KServeController {
  process: ManagedProcess;
  stop(): Promise<void>;
}

/** The CRDs the controller manager watches (it fails to start without them), under the CRD directory. */
export const KSERVE_CRD_FILES = [
  'serving.kserve.io_inferenceservices.yaml',
  'serving.kserve.io_servingruntimes.yaml',
  'serving.kserve.io_clusterservingruntimes.yaml',
  'serving.kserve.io_trainedmodels.yaml',
  'serving.kserve.io_inferencegraphs.yaml',
  'clusterstoragecontainer/serving.kserve.io_clusterstoragecontainers.yaml',
];

/** KServe's ConfigMap as the module ships it, set to raw Deployments and no ingress objects. */
export function inferenceServiceConfig(dir: string): KubeObject & { data: Record<string, string> } {
  const cm = load(readFileSync(join(dir, 'inferenceservice-config.yaml'), 'utf8')) as KubeObject & {
    data: Record<string, string>;
  };
  const ingress = JSON.parse(cm.data['ingress']!) as Record<string, unknown>;
  cm.data['ingress'] = JSON.stringify({ ...ingress, disableIngressCreation: true });
  cm.data['deploy'] = JSON.stringify({ defaultDeploymentMode: 'Standard' });
  return cm;
}

export async function startKServeController(
  kube: KubeClient,
  kubeconfigPath: string,
  logDir: string,
): Promise<KServeController> {
  const dir = kserveDir();
  await installKServeCrds(kube, KSERVE_CRD_FILES);
  await kube
    .resource(GVR.namespace)
    .create({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: KSERVE_NAMESPACE } })
    .catch(() => undefined);
  await kube
    .resource(GVR.configMap)
    .create(inferenceServiceConfig(dir))
    .catch(() => undefined);

  // controller-runtime's webhook server reads <os.TempDir()>/k8s-webhook-server/serving-certs/tls.{crt,key}.
  const tmp = join(logDir, 'kserve-tmp');
  const certs = join(tmp, 'k8s-webhook-server', 'serving-certs');
  mkdirSync(certs, { recursive: true });
  const pair = selfSignedCertificate(['127.0.0.1']);
  writeFileSync(join(certs, 'tls.crt'), pair.cert);
  writeFileSync(join(certs, 'tls.key'), pair.key, { mode: 0o600 });
  const webhookPort = await freePort();
  const probePort = await freePort();
  const process = startProcess(
    'kserve-manager',
    join(dir, 'bin', 'manager'),
    [`--webhook-port=${webhookPort}`, `--health-probe-addr=127.0.0.1:${probePort}`, '--metrics-addr=0'],
    join(logDir, 'kserve-manager.log'),
    {
      env: {
        ...globalThis.process.env,
        KUBECONFIG: kubeconfigPath,
        POD_NAMESPACE: KSERVE_NAMESPACE,
        TMPDIR: tmp,
      },
    },
  );
  const log = () => readFileSync(join(logDir, 'kserve-manager.log'), 'utf8').slice(-4000);
  await waitFor(
    'the KServe manager ready',
    async () => {
      if (process.child.exitCode !== null) throw new Error(`the KServe manager exited: ${log()}`);
      const res = await fetch(`http://127.0.0.1:${probePort}/readyz`).catch(() => undefined);
      return res?.ok;
    },
    { timeoutMs: 120_000, intervalMs: 500 },
  );
  const caBundle = Buffer.from(pair.cert).toString('base64');
  const url = (path: string) => ({ url: `https://127.0.0.1:${webhookPort}${path}`, caBundle });
  await kube.resource(GVR.mutating).create({
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'MutatingWebhookConfiguration',
    metadata: { name: 'inferenceservice.serving.kserve.io' },
    // As config/webhook/manifests.yaml of the module has them, with a URL instead of the in-cluster Service.
    webhooks: [
      {
        name: 'inferenceservice.kserve-webhook-server.pod-mutator',
        clientConfig: url('/mutate-pods'),
        failurePolicy: 'Fail',
        sideEffects: 'None',
        reinvocationPolicy: 'IfNeeded',
        admissionReviewVersions: ['v1beta1'],
        objectSelector: {
          matchExpressions: [{ key: 'serving.kserve.io/inferenceservice', operator: 'Exists' }],
        },
        rules: [{ apiGroups: [''], apiVersions: ['v1'], operations: ['CREATE'], resources: ['pods'] }],
      },
      {
        name: 'inferenceservice.kserve-webhook-server.defaulter',
        clientConfig: url('/mutate-serving-kserve-io-v1beta1-inferenceservice'),
        failurePolicy: 'Fail',
        sideEffects: 'None',
        admissionReviewVersions: ['v1beta1'],
        rules: [
          {
            apiGroups: ['serving.kserve.io'],
            apiVersions: ['v1beta1'],
            operations: ['CREATE', 'UPDATE'],
            resources: ['inferenceservices'],
          },
        ],
      },
    ],
  } as KubeObject);
  return {
    process,
    async stop() {
      await kube
        .resource(GVR.mutating)
        .delete(undefined, 'inferenceservice.serving.kserve.io')
        .catch(() => undefined);
      await process.stop();
    },
  };
}
