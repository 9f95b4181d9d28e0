/**
 * The real huggingface_hub (PyPI, scripts/setup-hf-hub.sh) run against an endpoint: what the Hub emulator is held
 * to. Each call is one Python process (test/support/hf-hub-client.py) that prints one JSON line.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';

import { setUpTool } from './process.ts';

const run = promisify(execFile);

/** The virtualenv's python (scripts/setup-hf-hub.sh), or $PEERLOAD_HF_HUB_PYTHON. */
export const hfHubPython = () =>
  setUpTool('setup-hf-hub.sh', 'PEERLOAD_HF_HUB_PYTHON', { timeoutMs: 1_800_000 });

export type HfClientCall = 'snapshot_download' | 'model_info' | 'list_repo_tree';

/** Runs `call` with `args` against `endpoint`; `home` holds the client's cache and settings. */
export async function hfClient(
  python: string,
  endpoint: string,
  home: string,
  call: HfClientCall,
  args: Record<string, unknown>,
): Promise<Record<string, unknown>> {
  const { stdout } = await run(
    python,
    [join(import.meta.dirname, 'hf-hub-client.py'), call, JSON.stringify(args)],
    {
      env: {
        PATH: process.env.PATH ?? '/usr/bin:/bin',
        HOME: home,
        HF_HOME: join(home, 'hf'),
        HF_ENDPOINT: endpoint,
        HF_HUB_DISABLE_TELEMETRY: '1',
        HF_HUB_DISABLE_PROGRESS_BARS: '1',
        // Loopback only: no proxy of the environment may stand between the client and the emulator.
        NO_PROXY: '*',
      },
      timeout: 120_000,
      maxBuffer: 16 << 20,
    },
  );
  return JSON.parse(stdout.trim().split('\n').pop()!) as Record<string, unknown>;
}
