/**
 * Bundles the `peerload` CLI for the container image: one entry chunk plus one lazily loaded chunk per command
 * (src/cli/main.ts imports each command on demand), with every production dependency inside and tree-shaken.
 * The image then needs no node_modules: 167 MB of production dependencies become a few MB of JavaScript.
 * Rolldown is the bundler Vite (already our test runner's engine) is built on.
 *
 *   node scripts/bundle.ts [--out dist/bundle] [--node /usr/local/bin/node]
 */
import { chmodSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'rolldown';

const { values } = parseArgs({
  options: {
    out: { type: 'string', default: 'dist/bundle' },
    // The entry is executable with this interpreter, so `peerload` can be the container's command.
    node: { type: 'string', default: '/usr/local/bin/node' },
  },
});
const root = resolve(import.meta.dirname, '..');
const out = resolve(root, values.out);
rmSync(out, { recursive: true, force: true });

await build({
  input: { peerload: join(root, 'src/cli/main.ts') },
  platform: 'node',
  // Only in-cluster and plain kubeconfigs are read without client-node (src/runtime/kubeconfig.ts); a kubeconfig
  // with an exec or auth-provider plugin loads it on demand. It stays out of the image: a pod never needs it.
  external: ['@kubernetes/client-node'],
  treeshake: true,
  logLevel: 'warn',
  output: {
    dir: out,
    format: 'esm',
    entryFileNames: '[name].mjs',
    chunkFileNames: 'chunks/[name]-[hash].mjs',
    minify: 'dce-only',
    sourcemap: false,
  },
});
// src/cli/main.ts starts with `#!/usr/bin/env node`; the runtime image has no /usr/bin/env (no coreutils).
const entry = join(out, 'peerload.mjs');
writeFileSync(entry, readFileSync(entry, 'utf8').replace(/^(#!.*\n)?/, `#!${values.node}\n`));
chmodSync(entry, 0o755);

let bytes = 0;
const walk = (d: string): void => {
  for (const e of readdirSync(d, { withFileTypes: true })) {
    const p = join(d, e.name);
    if (e.isDirectory()) walk(p);
    else bytes += statSync(p).size;
  }
};
walk(out);
console.log(`${out}: ${(bytes / 1024 / 1024).toFixed(1)} MiB`);
