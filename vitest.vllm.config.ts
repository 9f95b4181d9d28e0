import { defineConfig } from 'vitest/config';

// The opt-in vLLM suite (`npm run test:vllm`), outside `npm test`: real vLLM on CPU (scripts/setup-vllm.sh, about
// 6 GB) with the real Dragonfly network and MinIO. Two vLLM servers start one after the other, each about two minutes.
export default defineConfig({
  test: {
    name: 'vllm',
    include: ['test/vllm/**/*.test.ts'],
    reporters: ['default'],
    testTimeout: 900_000,
    hookTimeout: 3_600_000,
    fileParallelism: false,
  },
});
