import 'vitest';
import type { ClusterInfo } from './cluster.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    kubeconfigPath: string;
    apiserverVersion: string;
    /** The e2e project's service of the run's shared Dragonfly network (test/support/shared-dragonfly.ts). */
    dragonflyService: string;
    /** The cluster project's real two-node cluster (test/support/cluster-setup.ts). */
    cluster: ClusterInfo;
  }
}
