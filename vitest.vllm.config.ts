import { defineConfig } from 'vitest/config';

// The opt-in vLLM suite (`npm run test:vllm`), outside `npm test`: real vLLM on CPU (scripts/setup-vllm.sh, about
// 6 GB) with the real Dragonfly network and MinIO, and the operator against the real kube-apiserver + etcd of the
// global set-up. Each file starts its vLLM servers one after the other (two, or one for the Hub's base model),
// each about two minutes.
export default defineConfig({
  test: {
    name: 'vllm',
    include: ['test/vllm/**/*.test.ts'],
    globalSetup: ['test/support/global-setup.ts'],
    // Byte arrays compared whole (see vitest.config.ts).
    setupFiles: ['test/support/byte-equality.ts'],
    // The operator the tests start serves plain HTTP, as in local development.
    env: { PEERLOAD_METRICS_SECURE: 'false' },
    reporters: ['default'],
    testTimeout: 900_000,
    hookTimeout: 3_600_000,
    fileParallelism: false,
  },
});
