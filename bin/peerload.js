#!/usr/bin/env node
// Runs the compiled CLI when it exists (installed package), else the TypeScript sources (Node >= 22.18 strips types).
import { existsSync } from 'node:fs';

const compiled = new URL('../dist/cli/main.js', import.meta.url);
const { main } = await import(
  existsSync(compiled) ? compiled.href : new URL('../src/cli/main.ts', import.meta.url).href
);
process.exitCode = await main(process.argv.slice(2));
