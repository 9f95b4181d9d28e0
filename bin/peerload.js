#!/usr/bin/env node
// Runs the compiled CLI when it exists (installed package), else the TypeScript sources (Node >= 22.18 strips types).
// Checks the Node version first, before anything imports undici (which needs 22.19 and fails with a stack trace).
import { existsSync } from 'node:fs';

const NEED = [22, 19];
const have = process.versions.node.split('.').map(Number);
if (have[0] < NEED[0] || (have[0] === NEED[0] && have[1] < NEED[1])) {
  console.error(
    `peerload: needs Node.js >= ${NEED.join('.')}, this is ${process.version} (${process.execPath}); install a newer Node.js`,
  );
  process.exit(1);
}

const compiled = new URL('../dist/cli/main.js', import.meta.url);
const { main } = await import(
  existsSync(compiled) ? compiled.href : new URL('../src/cli/main.ts', import.meta.url).href
);
process.exitCode = await main(process.argv.slice(2));
