import { configDefaults, defineConfig } from 'vitest/config';

// The opt-in KServe suite (`npm run test:kserve`), outside `npm test`: the real KServe controller v0.20.0 built from
// the Go module proxy (scripts/setup-kserve.sh, cached by version). Two projects, run one file after the other:
//   kserve          the controller as a process against the real kube-apiserver + etcd of the global set-up, the
//                   storage initializer it injects run on the real Dragonfly network with MinIO;
//   kserve-cluster  the controller as a pod in the real two-node cluster (test/support/cluster-setup.ts: its
//                   teardown fails the run when the cluster's stop left anything on the machine), with Dragonfly as
//                   pods and Triton serving the InferenceService.
const CLUSTER_FILES = ['test/kserve/kserve-cluster.test.ts'];
// Byte arrays compared whole (see vitest.config.ts).
const setupFiles = ['test/support/byte-equality.ts'];

export default defineConfig({
  test: {
    reporters: ['default'],
    projects: [
      {
        test: {
          name: 'kserve',
          include: ['test/kserve/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...CLUSTER_FILES],
          globalSetup: ['test/support/global-setup.ts'],
          setupFiles,
          testTimeout: 900_000,
          hookTimeout: 3_600_000,
          fileParallelism: false,
        },
      },
      {
        test: {
          name: 'kserve-cluster',
          include: CLUSTER_FILES,
          globalSetup: ['test/support/cluster-setup.ts'],
          setupFiles,
          testTimeout: 900_000,
          hookTimeout: 3_600_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
