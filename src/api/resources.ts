/**
 * peerload's resources as the runtime addresses them, next to the Kubernetes ones the operator uses: controllers,
 * the CLI and tests take `GVR` from here, the runtime (src/runtime) knows only the Kubernetes ones.
 */
import { GVR as KubernetesGVR, type Gvr } from '../runtime/kube.ts';
import { GROUP, VERSION } from './common.ts';

export const GVR = {
  ...KubernetesGVR,
  // Read one by one for node-targeted preheats (src/controllers/node-addresses.ts), never watched.
  nodes: { group: '', version: 'v1', resource: 'nodes', kind: 'Node', namespaced: false },
  modelPreheats: {
    group: GROUP,
    version: VERSION,
    resource: 'modelpreheats',
    kind: 'ModelPreheat',
    namespaced: true,
  },
  // Cluster-scoped, read one by one when a resource names one (src/controllers/managers.ts), never watched.
  clusterManagers: {
    group: GROUP,
    version: VERSION,
    resource: 'clustermanagers',
    kind: 'ClusterManager',
    namespaced: false,
  },
  // Read one by one (labels, for a ClusterManager's namespaceSelector), cached briefly, never watched.
  namespaces: { group: '', version: 'v1', resource: 'namespaces', kind: 'Namespace', namespaced: false },
  servedModels: {
    group: GROUP,
    version: VERSION,
    resource: 'servedmodels',
    kind: 'ServedModel',
    namespaced: true,
  },
} as const satisfies Record<string, Gvr>;
