/**
 * The README's first command, as a user runs it: `scripts/demo.ts` (what `npm run demo` runs once its set-up is
 * done) as a child process with the defaults `npm run demo` gives it, then with `--real-p2p`, then with `--keep`.
 * Each must exit 0 and print what the user reads: the Ready line, both `kubectl get` tables (Ready True, SUCCESS),
 * the events and the P2P network's counters. The README's sample output is held to the real one by shape: every
 * line of the sample appears, with times, ports and the namespace's suffix the only differences (and the archive's
 * size, which carries the time it was made).
 */
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import * as k8s from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../support/kube.ts';

const NODE = join(REPO_ROOT, 'node_modules/.bin/node');

interface DemoRun {
  code: number | null;
  out: string;
  /** Seconds from start to exit. */
  seconds: number;
}

/**
 * Runs the demo with `args`; `whileRunning` is called once the output holds `waitFor` (the demo is then left running
 * until it returns and the demo is sent SIGINT, as a user's Ctrl-C).
 */
function runDemo(
  args: string[],
  opts: { waitFor?: RegExp; whileRunning?: (out: string) => Promise<void> } = {},
): Promise<DemoRun> {
  const started = Date.now();
  const child = spawn(NODE, ['scripts/demo.ts', ...args], {
    cwd: REPO_ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let interacted = false;
  const onData = (chunk: Buffer) => {
    out += chunk.toString();
    if (opts.waitFor && !interacted && opts.waitFor.test(out)) {
      interacted = true;
      void opts.whileRunning!(out).finally(() => child.kill('SIGINT'));
    }
  };
  child.stdout.on('data', onData);
  child.stderr.on('data', onData);
  return new Promise((resolve) =>
    child.once('close', (code) => resolve({ code, out, seconds: (Date.now() - started) / 1000 })),
  );
}

/** The rows of a `kubectl get` table the demo printed, as column → cell. */
function table(out: string, plural: string): Record<string, string>[] {
  const block = out.split(`$ kubectl get ${plural} -n `)[1]!.split('\n\n')[0]!.split('\n').slice(1);
  const header = block[0]!.trim().split(/\s+/);
  return block.slice(1).map((line) => {
    const cells = line.trim().split(/\s+/);
    return Object.fromEntries(header.map((h, i) => [h, cells[i]!]));
  });
}

/** What every mode prints when the demo worked. */
function expectDemoOutput(run: DemoRun, replicas: number) {
  expect(run.code, run.out).toBe(0);
  expect(run.out).not.toMatch(/demo FAILED|Error:/);
  expect(run.out).toMatch(
    new RegExp(`ServedModel tiny Ready \\d+\\.\\d s after apply, on ${replicas} replicas`),
  );
  const preheats = table(run.out, 'modelpreheats');
  expect(preheats.map((r) => r.NAME).sort()).toEqual(['llm-shard', 'tiny-preheat']);
  for (const r of preheats) expect([r.STATE, r.READY], r.NAME).toEqual(['SUCCESS', 'True']);
  expect(table(run.out, 'servedmodels')).toEqual([
    expect.objectContaining({
      NAME: 'tiny',
      READY: 'True',
      REPLICAS: `${replicas}/${replicas}`,
      REASON: 'AllReplicasReady',
    }),
  ]);
  const events = run.out.split('(events)\n')[1]!.split('\n\n')[0]!;
  expect(events.match(/Normal\s+ModelRegistered\s+registered tiny 1\.0 on /g)).toHaveLength(replicas);
  expect(events).toMatch(
    new RegExp(`Normal\\s+Ready\\s+tiny is ready on ${replicas}/${replicas} replica\\(s\\)`),
  );
  expect(events).not.toMatch(/Warning/);
  expect(run.out).toMatch(/bytes served by the origins:\s+\d+ \(each object once: yes/);
  expect(run.out).toMatch(/distinct task ids of those:\s+1$/m);
}

/**
 * The README's sample of the demo's output, each line as a pattern: times (`4s`), ports and the namespace's random
 * suffix may differ, and columns may be wider; nothing else.
 */
function readmeSample(): RegExp[] {
  const readme = readFileSync(join(REPO_ROOT, 'README.md'), 'utf8');
  const sample = /^```\n(\$ kubectl get modelpreheats[\s\S]*?)^```/m.exec(readme)![1]!;
  return sample
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && l !== '...')
    .map((line) => {
      const escaped = line.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&');
      const pattern = escaped
        .replace(/demo-[a-z0-9]+/g, 'demo-[a-z0-9]+')
        .replace(/127\\\.0\\\.0\\\.1:\d+/g, '127\\.0\\.0\\.1:\\d+')
        .replace(/(?<=\s)\d+s$/, '\\d+[sm]\\d*s?')
        // The archive's manifest holds the time it was made, so its size (and the origins' sum) varies by a byte.
        .replace(/(?<=model archive )\d+(?= bytes)/, '\\d+')
        .replace(/(?<=served by the origins:\s+)\d+/, '\\d+')
        .replace(/\s+/g, '\\s+');
      return new RegExp(`^\\s*${pattern}$`, 'm');
    });
}

describe('npm run demo', () => {
  it("runs as a user runs it and prints the README's output", async () => {
    const run = await runDemo([]);
    expectDemoOutput(run, 4);
    const sample = readmeSample();
    expect(sample.length).toBeGreaterThanOrEqual(12);
    const missing = sample.filter((line) => !line.test(run.out.replace(/\t/g, '  ')));
    expect(missing, run.out).toEqual([]);
  });

  it("with '--real-p2p': the same on the real Dragonfly network", async () => {
    const run = await runDemo(['--real-p2p']);
    expectDemoOutput(run, 4);
    expect(run.out).toMatch(/real Dragonfly v2\.5\.1/);
  });

  it("with '--keep': left running with a kubeconfig that reaches it, until Ctrl-C stops everything", async () => {
    const kc = new k8s.KubeConfig();
    let ready: string | undefined;
    const run = await runDemo(['--keep', '--no-torchserve'], {
      waitFor: /left running: export KUBECONFIG=(\S+)/,
      async whileRunning(out) {
        kc.loadFromFile(/left running: export KUBECONFIG=(\S+)/.exec(out)![1]!);
        const ns = /\$ kubectl get servedmodels -n (\S+)/.exec(out)![1]!;
        const sm = (await kc.makeApiClient(k8s.CustomObjectsApi).getNamespacedCustomObject({
          group: 'peerload.io',
          version: 'v1alpha1',
          namespace: ns,
          plural: 'servedmodels',
          name: 'tiny',
        })) as { status?: { conditions?: { type: string; status: string }[] } };
        ready = sm.status?.conditions?.find((c) => c.type === 'Ready')?.status;
      },
    });
    expectDemoOutput(run, 3);
    expect(ready).toBe('True');
    // Ctrl-C stopped the control plane with the rest: its address answers no more.
    await expect(kc.makeApiClient(k8s.CoreV1Api).listNamespace()).rejects.toThrow();
  });
});
