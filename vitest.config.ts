import { defineConfig } from 'vitest/config';
import { ProjectOrderSequencer } from './test/support/project-order.ts';
import { SlowestFiles } from './test/support/slowest-files.ts';

// Four projects: unit tests need nothing; integration tests share one real kube-apiserver + etcd started by
// the global set-up; e2e tests additionally start real model servers (TorchServe) and object stores; cluster tests get
// a real two-node cluster of processes (kubelets, containerd, CoreDNS). Every project compares byte arrays whole (test/support/byte-equality.ts).
const setupFiles = ['test/support/byte-equality.ts'];
// The projects on the shared control plane also empty each file's namespaces of peerload objects after it
// (test/support/namespace-cleanup.ts): a later file's operator would reconcile what an earlier one left.
const sharedPlaneSetupFiles = [...setupFiles, 'test/support/namespace-cleanup.ts'];

export default defineConfig({
  test: {
    // After the default report, the 15 slowest files with their times (where CI's minutes go).
    reporters: ['default', new SlowestFiles(15)],
    // The projects in the order below, not vitest's alphabetical one (test/support/project-order.ts says why).
    sequence: { sequencer: ProjectOrderSequencer },
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          setupFiles,
          testTimeout: 20_000,
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          setupFiles: sharedPlaneSetupFiles,
          globalSetup: ['test/support/global-setup.ts'],
          // Operators the tests start (in-process or as processes inheriting this environment) serve plain
          // HTTP as in local development; test/integration/metrics-auth.test.ts turns HTTPS and auth on.
          env: { PEERLOAD_METRICS_SECURE: 'false' },
          testTimeout: 120_000,
          hookTimeout: 180_000,
          // Two cores: one file at a time keeps the shared apiserver responsive and timings honest.
          fileParallelism: false,
        },
      },
      {
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          setupFiles: sharedPlaneSetupFiles,
          // The control plane, and the real Dragonfly network shared by the files that ask for it.
          globalSetup: ['test/support/global-setup.ts', 'test/support/dragonfly-setup.ts'],
          env: { PEERLOAD_METRICS_SECURE: 'false' },
          testTimeout: 600_000,
          hookTimeout: 900_000,
          fileParallelism: false,
        },
      },
      {
        test: {
          name: 'cluster',
          include: ['test/cluster/**/*.test.ts'],
          setupFiles,
          // A real two-node cluster (kubelets, containerd, CoreDNS) for the run; its teardown fails the run when
          // its stop left anything on the machine.
          globalSetup: ['test/support/cluster-setup.ts'],
          testTimeout: 300_000,
          hookTimeout: 600_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
