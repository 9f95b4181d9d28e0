import { defineConfig } from 'vitest/config';

// Three projects: unit tests need nothing; integration tests share one real kube-apiserver + etcd started by
// the global set-up; e2e tests additionally start real model servers (TorchServe) and object stores.
export default defineConfig({
  test: {
    reporters: ['default'],
    projects: [
      {
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
          testTimeout: 20_000,
        },
      },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          globalSetup: ['test/support/global-setup.ts'],
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
          globalSetup: ['test/support/global-setup.ts'],
          testTimeout: 600_000,
          hookTimeout: 900_000,
          fileParallelism: false,
        },
      },
    ],
  },
});
