#!/usr/bin/env node
/**
 * The `peerload` command line. Each sub-command lives in its own module and is loaded on demand so that
 * `peerload taskid` does not pay for the Kubernetes client.
 */
import { CliError } from './errors.ts';
import { VERSION } from '../version.ts';

interface Command {
  summary: string;
  run: (argv: string[]) => Promise<number | void>;
}

const COMMANDS: Record<string, Command> = {
  operator: {
    summary: 'Run the operator (controllers, leader election, metrics and health endpoints)',
    run: async (argv) => (await import('./operator.ts')).run(argv),
  },
  wait: {
    summary: 'Wait until a ModelPreheat or ServedModel is Ready (exit 0) or Stalled (exit 1)',
    run: async (argv) => (await import('./wait.ts')).run(argv),
  },
  preheat: {
    summary: 'Create a ModelPreheat of a URL or of objects in a bucket, and optionally wait for it',
    run: async (argv) => (await import('./preheat.ts')).run(argv),
  },
  check: {
    summary: 'Check that preheats and plugin downloads will share P2P task ids (and say why not)',
    run: async (argv) => (await import('./check.ts')).run(argv),
  },
  taskid: {
    summary: 'Print the P2P task id of a URL (as the peer daemon computes it)',
    run: async (argv) => (await import('./taskid.ts')).run(argv),
  },
  'publish-keys': {
    summary: "Publish this pod's TorchServe key_file.json into a Secret key <pod>.json (sidecar)",
    run: async (argv) => (await import('./publish-keys.ts')).run(argv),
  },
  agent: {
    summary:
      'Run beside a model server: place model directories for the operator through the peer proxy (sidecar)',
    run: async (argv) => (await import('./agent.ts')).run(argv),
  },
  fetch: {
    summary:
      'Download one version of a model directory, or a ModelPack artifact (oci://), through the peer proxy (init container)',
    run: async (argv) => (await import('./fetch.ts')).run(argv),
  },
  crds: {
    summary: 'Write the CustomResourceDefinitions (to stdout, or --out DIR)',
    run: async (argv) => (await import('./crds.ts')).run(argv),
  },
};

export function usage(): string {
  const width = Math.max(...Object.keys(COMMANDS).map((c) => c.length));
  const lines = Object.entries(COMMANDS).map(([name, c]) => `  ${name.padEnd(width)}  ${c.summary}`);
  return `Usage: peerload <command> [options]\n\nCommands:\n${lines.join('\n')}\n\nRun 'peerload <command> --help' for the options of a command, 'peerload --version' for the version.`;
}

export async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  // --version anywhere before a `--`, for every command.
  const options = argv.includes('--') ? argv.slice(0, argv.indexOf('--')) : argv;
  if (options.includes('--version') || name === '-V') {
    console.log(`peerload ${VERSION}`);
    return 0;
  }
  if (!name || name === '--help' || name === '-h' || name === 'help') {
    console.log(usage());
    return name ? 0 : 2;
  }
  const command = COMMANDS[name];
  if (!command) {
    console.error(`peerload: unknown command "${name}"\n\n${usage()}`);
    return 2;
  }
  try {
    return (await command.run(rest)) ?? 0;
  } catch (err) {
    if (err instanceof CliError) {
      console.error(`peerload ${name}: ${err.message}`);
      return err.exitCode;
    }
    throw err;
  }
}

if (import.meta.main) {
  process.exitCode = await main(process.argv.slice(2));
}
