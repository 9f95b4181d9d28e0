/**
 * The main job on a local default: a real control plane on loopback, the CRDs, every example applied, and
 * what `kubectl get` would show. `--keep` leaves the control plane running and prints a kubeconfig path.
 */
import * as k8s from '@kubernetes/client-node';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { startControlPlane } from '../test/support/controlplane.ts';
import { createNamespace, installCRDs, kubeConfig, readManifests, REPO_ROOT } from '../test/support/kube.ts';

const { values } = parseArgs({ options: { keep: { type: 'boolean' } } });

const cp = await startControlPlane();
console.log(`control plane: kube-apiserver ${cp.version} at ${cp.server}`);
try {
  await installCRDs(cp.kubeconfigPath);
  const kc = kubeConfig(cp.kubeconfigPath);
  const ns = await createNamespace(kc, 'demo');
  const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
  const dir = join(REPO_ROOT, 'deploy/examples');
  for (const file of readdirSync(dir).filter((f) => f.endsWith('.yaml'))) {
    for (const obj of readManifests(join(dir, file))) {
      obj.metadata = { ...obj.metadata, namespace: ns };
      await objects.create(obj);
      console.log(`${obj.kind!.toLowerCase()}.peerload.io/${obj.metadata.name} created`);
    }
  }
  for (const plural of ['modelpreheats', 'servedmodels']) {
    console.log(`\n$ kubectl get ${plural} -n ${ns}`);
    console.log(await getTable(kc, ns, plural));
  }
  if (values.keep) {
    console.log(`\ncontrol plane left running: export KUBECONFIG=${cp.kubeconfigPath}  (Ctrl-C to stop)`);
    await new Promise((resolve) => process.once('SIGINT', resolve));
  }
} finally {
  await cp.stop();
}

/** What `kubectl get` prints: the apiserver's Table rendering of the CRD's printer columns. */
async function getTable(kc: k8s.KubeConfig, namespace: string, plural: string): Promise<string> {
  const table = (await kc
    .makeApiClient(k8s.CustomObjectsApi)
    .listNamespacedCustomObject(
      { group: 'peerload.io', version: 'v1alpha1', namespace, plural },
      k8s.setHeaderOptions('Accept', 'application/json;as=Table;v=v1;g=meta.k8s.io'),
    )) as { columnDefinitions: { name: string; priority: number }[]; rows: { cells: unknown[] }[] };
  const keep = table.columnDefinitions.map((c, i) => [c, i] as const).filter(([c]) => c.priority === 0);
  const rows = [
    keep.map(([c]) => c.name.toUpperCase()),
    ...table.rows.map((r) =>
      keep.map(([, i]) => (r.cells[i] === undefined || r.cells[i] === null ? '<none>' : String(r.cells[i]))),
    ),
  ];
  const widths = keep.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows
    .map((r) =>
      r
        .map((c, i) => c.padEnd(widths[i]! + 3))
        .join('')
        .trimEnd(),
    )
    .join('\n');
}
