import { defineConfig } from 'vitest/config';

// The opt-in KServe suite (`npm run test:kserve`), outside `npm test`: the real KServe controller v0.20.0 built from
// the Go module proxy (scripts/setup-kserve.sh, cached by version) against the real kube-apiserver + etcd of the
// global set-up, and the storage initializer it injects run on the real Dragonfly network with MinIO.
export default defineConfig({
  test: {
    name: 'kserve',
    include: ['test/kserve/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    // Byte arrays compared whole (see vitest.config.ts).
    setupFiles: ['test/support/byte-equality.ts'],
    reporters: ['default'],
    testTimeout: 900_000,
    hookTimeout: 3_600_000,
    fileParallelism: false,
  },
});
