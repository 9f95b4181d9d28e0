/**
 * KServe installed into the real two-node cluster (cluster.ts) as an admin without cert-manager installs it: the
 * controller manager as the Deployment of KServe's own manifests (config/rbac, config/manager, config/webhook of the
 * module scripts/setup-kserve.sh keeps), its image the one scripts/build-cluster-images.sh builds from that
 * module's binary; KServe's CRDs and its `inferenceservice-config` ConfigMap (Standard, that is raw Deployment,
 * mode, no ingress objects: there is no Istio nor Gateway here). What cert-manager would do is done here: the
 * webhook Service's serving certificate in the Secret the Deployment mounts, and that certificate as the caBundle
 * of every webhook of KServe's manifests, which the apiserver reaches through the Service (kube-proxy on the
 * machine routes the ClusterIP to the pod).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { dump, loadAll } from 'js-yaml';
import { KubeClient } from '../../src/runtime/index.ts';
import { selfSignedCertificate } from '../../src/runtime/tls.ts';
import type { Cluster } from './cluster.ts';
import { rolledOut } from './cluster-install.ts';
import {
  inferenceServiceConfig,
  KSERVE_CRD_FILES,
  KSERVE_NAMESPACE,
  kserveDir,
} from './kserve-controller.ts';
import { installKServeCrds } from './kserve.ts';
import { kubeConfig } from './kube.ts';

/** The webhook Service of KServe's manifests (config/webhook/service.yaml). */
const WEBHOOK_SERVICE = 'kserve-webhook-server-service';
/** The Secret KServe's Deployment mounts as the webhook server's certificate (config/manager/manager.yaml). */
const WEBHOOK_CERT_SECRET = 'kserve-webhook-server-cert';

type Obj = Record<string, any>;

export interface InstalledKServe {
  /** $PEERLOAD_CACHE/kserve-<version>: crd/, config/ (the module's manifests), bin/manager. */
  dir: string;
  /** The controller manager's pod. */
  pod: string;
}

/**
 * Installs KServe's CRDs, ConfigMap, RBAC, controller Deployment (image `image`, already imported into the nodes)
 * and webhooks, and waits for the Deployment to roll out.
 */
export async function installKServe(
  kubectl: Cluster['kubectl'],
  kubeconfigPath: string,
  image: string,
  work: string,
): Promise<InstalledKServe> {
  const dir = kserveDir();
  // Created, not applied: the InferenceService CRD is too large for a client-side apply (kserve.ts).
  const kube = new KubeClient(kubeConfig(kubeconfigPath));
  try {
    await installKServeCrds(kube, KSERVE_CRD_FILES);
  } finally {
    await kube.close();
  }
  await kubectl(['create', 'namespace', KSERVE_NAMESPACE]);
  await kubectl(['apply', '-f', '-'], { input: JSON.stringify(inferenceServiceConfig(dir)) });

  // cert-manager's part: a certificate for the name the apiserver dials (<service>.<namespace>.svc).
  const pair = selfSignedCertificate([`${WEBHOOK_SERVICE}.${KSERVE_NAMESPACE}.svc`]);
  await kubectl(['apply', '-f', '-'], {
    input: JSON.stringify({
      apiVersion: 'v1',
      kind: 'Secret',
      type: 'kubernetes.io/tls',
      metadata: { name: WEBHOOK_CERT_SECRET, namespace: KSERVE_NAMESPACE },
      stringData: { 'tls.crt': pair.cert, 'tls.key': pair.key },
    }),
  });

  // KServe's manifests through an overlay: the namespace (and with it the RBAC subjects'), the image built here,
  // pulled never (nothing can be pulled in this cluster; the manifest says Always).
  const overlay = join(work, 'kserve-install');
  await mkdir(overlay, { recursive: true });
  await writeFile(
    join(overlay, 'kustomization.yaml'),
    dump({
      apiVersion: 'kustomize.config.k8s.io/v1beta1',
      kind: 'Kustomization',
      namespace: KSERVE_NAMESPACE,
      // kustomize takes a base outside the overlay by a relative path only.
      resources: ['rbac', 'manager', 'webhook'].map((d) => relative(overlay, join(dir, 'config', d))),
      patches: [
        {
          patch: dump({
            apiVersion: 'apps/v1',
            kind: 'Deployment',
            metadata: { name: 'kserve-controller-manager', namespace: KSERVE_NAMESPACE },
            spec: {
              template: {
                spec: { containers: [{ name: 'manager', image, imagePullPolicy: 'IfNotPresent' }] },
              },
            },
          }),
        },
      ],
    }),
  );
  // What KServe's config/default fills in with kustomize replacements and cert-manager's CA injector.
  const rendered = (await kubectl(['kustomize', overlay]))
    .replaceAll('$(webhookServiceName)', WEBHOOK_SERVICE)
    .replaceAll('$(kserveNamespace)', KSERVE_NAMESPACE);
  const caBundle = Buffer.from(pair.cert).toString('base64');
  const objects = (loadAll(rendered) as (Obj | null)[]).filter((o): o is Obj => !!o);
  const webhooks = objects.filter((o) => /^(Mutating|Validating)WebhookConfiguration$/.test(o.kind));
  if (!webhooks.some((o) => o.kind === 'MutatingWebhookConfiguration'))
    throw new Error(`KServe's config/webhook holds no MutatingWebhookConfiguration (in ${dir})`);
  for (const w of webhooks.flatMap((o) => o.webhooks as Obj[])) w.clientConfig.caBundle = caBundle;
  await kubectl(['apply', '-f', '-'], {
    input: JSON.stringify({ apiVersion: 'v1', kind: 'List', items: objects }),
  });
  await rolledOut(kubectl, KSERVE_NAMESPACE, ['deployment/kserve-controller-manager']);
  const pod = (
    await kubectl([
      'get',
      'pods',
      '-n',
      KSERVE_NAMESPACE,
      '-l',
      'control-plane=kserve-controller-manager',
      '-o',
      'jsonpath={.items[0].metadata.name}',
    ])
  ).trim();
  return { dir, pod };
}
