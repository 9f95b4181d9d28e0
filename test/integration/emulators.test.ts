/**
 * `npm run emulators` (test/support/dev-servers.ts) prints the `peerload operator` command that works with its
 * servers: the loopback profile's flags. Run as printed against the real apiserver, that operator takes a
 * ModelPreheat of the printed sample file to SUCCESS through the emulated manager, and serves /readyz over plain HTTP
 * as the profile says.
 */
import { spawn } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { createNamespace, kubeConfig, REPO_ROOT, waitFor } from '../support/kube.ts';
import { startProcess, type ManagedProcess } from '../support/process.ts';
import { conditionOf, peerloadNamespace } from '../support/resources.ts';

const NODE = join(REPO_ROOT, 'node_modules/.bin/node');
const kubeconfigPath = inject('kubeconfigPath');
const kc = kubeConfig(kubeconfigPath);

interface Printed {
  operatorCommand: string;
  manager: string;
  sampleFile: string;
}

let servers: ReturnType<typeof spawn>;
let operator: ManagedProcess;
let printed: Printed;

beforeAll(async () => {
  servers = spawn(NODE, ['test/support/dev-servers.ts', '--json'], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  let out = '';
  servers.stdout!.on('data', (d) => (out += d));
  printed = await waitFor('the emulators print their addresses', () =>
    out.includes('\n') ? (JSON.parse(out.split('\n')[0]!) as Printed) : undefined,
  );
});

afterAll(async () => {
  await operator?.stop();
  servers?.kill('SIGTERM');
});

/** The printed command's words, quotes removed (a shell's reading of it), with the kubeconfig filled in. */
function words(command: string): string[] {
  return [...command.matchAll(/(?:[^\s']+|'[^']*')+/g)].map((m) =>
    m[0].replace(/'/g, '').replace('$KUBECONFIG', kubeconfigPath),
  );
}

describe('npm run emulators', () => {
  it('prints an operator command that works with its servers as printed', async () => {
    const args = words(printed.operatorCommand);
    expect(args.slice(0, 2)).toEqual(['peerload', 'operator']);
    expect(args).toContain(`--manager-url`);
    operator = startProcess(
      'operator',
      NODE,
      [join(REPO_ROOT, 'bin/peerload.js'), ...args.slice(1), '--log-level', 'info'],
      join(tmpdir(), `peerload-emulators-operator-${process.pid}.log`),
    );
    const ns = peerloadNamespace(kc, await createNamespace(kc, 'emulators'));
    await ns.createModelPreheat('sample', { url: printed.sampleFile });
    const done = await ns.untilModelPreheat(
      'sample',
      'Ready or Stalled',
      (p) => conditionOf(p, 'Ready')?.status === 'True' || conditionOf(p, 'Stalled')?.status === 'True',
      { timeoutMs: 60_000 },
    );
    expect(conditionOf(done, 'Stalled')).toBeUndefined();
    expect(done.status?.state).toBe('SUCCESS');
  });
});
