/**
 * `peerload publish-keys` as a process, authenticated as the ServiceAccount of deploy/examples/torchserve with
 * only that example's Role (patch of the one Secret): publishes key_file.json under <pod>.json, follows
 * rotations, ignores a half-written file, leaves other pods' keys alone, and removes its key on SIGTERM.
 */
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { GVR, KubeClient, type KubeObject } from '../../src/runtime/index.ts';
import { kubeconfigFromFile } from '../../src/runtime/kubeconfig.ts';
import { createNamespace, createSecret, kubeConfig, REPO_ROOT, waitFor } from '../support/kube.ts';
import { applyInto } from '../support/example-apply.ts';
import { kustomize } from '../support/runtime-deploy.ts';
import { serviceAccountIdentity, writeServiceAccountKubeconfig } from '../support/service-account.ts';

type Secret = KubeObject & { data?: Record<string, string> };
const kubeconfigPath = inject('kubeconfigPath');
const kc = kubeConfig(kubeconfigPath);
const admin = new KubeClient(kc);
let ns: string;
let work: string;
let saKubeconfig: string;

const keyFile = (n: number) =>
  JSON.stringify({
    management: { key: `mgmt-${n}-Zq8`, 'expiration time': '2099-01-01T00:00:00Z' },
    inference: { key: `inf-${n}-Zq8`, 'expiration time': '2099-01-01T00:00:00Z' },
    API: { key: `api-${n}-Zq8` },
  });
/** Written as TorchServe does it: a new file replacing the old. */
const writeKeys = (path: string, text: string) => {
  writeFileSync(`${path}.tmp`, text);
  renameSync(`${path}.tmp`, path);
};
const secretData = async () =>
  ((await admin.resource<Secret>(GVR.secrets).get(ns, 'torchserve-keys')).data ?? {}) as Record<
    string,
    string
  >;
const decoded = async (key: string) => {
  const v = (await secretData())[key];
  return v === undefined ? undefined : Buffer.from(v, 'base64').toString('utf8');
};

function startPublisher(pod: string, file: string) {
  const child = spawn(
    process.execPath,
    [
      join(REPO_ROOT, 'bin/peerload.js'),
      'publish-keys',
      '--secret=torchserve-keys',
      `--key-file=${file}`,
      `--kubeconfig=${saKubeconfig}`,
      '--poll-interval=1s',
    ],
    { env: { ...process.env, POD_NAME: pod, POD_NAMESPACE: ns }, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  const out: Buffer[] = [];
  child.stdout.on('data', (b: Buffer) => out.push(b));
  child.stderr.on('data', (b: Buffer) => out.push(b));
  const exited = new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  return { child, exited, log: () => Buffer.concat(out).toString('utf8') };
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), 'peerload-publish-keys-'));
  ns = await createNamespace(kc, 'keys');
  const example = kustomize(join(REPO_ROOT, 'deploy/examples/torchserve'));
  await applyInto(
    admin,
    example.filter(
      (m) =>
        ['ServiceAccount', 'Role', 'RoleBinding', 'Secret'].includes(m.kind) &&
        m.metadata.name !== 'p2p-endpoint-config',
    ),
    ns,
  );
  await createSecret(kc, ns, 'other', { x: 'y' });
  const id = await serviceAccountIdentity(kubeconfigPath, ns, 'torchserve');
  saKubeconfig = join(work, 'sa.kubeconfig');
  writeServiceAccountKubeconfig(saKubeconfig, id);
});

afterAll(async () => {
  await admin.close();
  rmSync(work, { recursive: true, force: true });
});

describe('peerload publish-keys', () => {
  it("the example Role grants that one Secret's patch only", async () => {
    const sa = new KubeClient(kubeconfigFromFile(saKubeconfig)!);
    try {
      await expect(sa.resource(GVR.secrets).get(ns, 'other')).rejects.toThrow(/403/);
      await expect(sa.resource(GVR.secrets).list(ns)).rejects.toThrow(/403/);
      await expect(sa.resource(GVR.secrets).get(ns, 'torchserve-keys')).rejects.toThrow(/403/);
      await expect(sa.resource(GVR.secrets).patch(ns, 'other', { data: {} })).rejects.toThrow(/403/);
      expect((await sa.resource(GVR.secrets).patch(ns, 'torchserve-keys', {})).metadata.name).toBe(
        'torchserve-keys',
      );
    } finally {
      await sa.close();
    }
  });

  it('publishes, follows rotations, skips a broken file, keeps other pods, removes its key on SIGTERM', async () => {
    const fileA = join(work, 'a', 'key_file.json');
    const fileB = join(work, 'b', 'key_file.json');
    for (const f of [fileA, fileB]) mkdirSync(join(f, '..'), { recursive: true });

    // Started before TorchServe wrote its file: waits, then publishes.
    const a = startPublisher('torchserve-a', fileA);
    const b = startPublisher('torchserve-b', fileB);
    try {
      await new Promise((r) => setTimeout(r, 1500));
      expect(await secretData()).toEqual({});
      writeKeys(fileA, keyFile(1));
      writeKeys(fileB, keyFile(100));
      await waitFor(
        'both published',
        async () =>
          (await decoded('torchserve-a.json')) === keyFile(1) &&
          (await decoded('torchserve-b.json')) === keyFile(100),
        { timeoutMs: 20_000 },
      );

      // A rotation (GET /token rewrites the file) or a restart (new keys): published again.
      writeKeys(fileA, keyFile(2));
      await waitFor('rotation published', async () => (await decoded('torchserve-a.json')) === keyFile(2), {
        timeoutMs: 20_000,
      });

      // A half-written file is not published; the whole one that follows is.
      writeFileSync(fileA, keyFile(3).slice(0, 20));
      await new Promise((r) => setTimeout(r, 2500));
      expect(await decoded('torchserve-a.json')).toBe(keyFile(2));
      writeKeys(fileA, keyFile(3));
      await waitFor('whole file published', async () => (await decoded('torchserve-a.json')) === keyFile(3), {
        timeoutMs: 20_000,
      });

      a.child.kill('SIGTERM');
      expect(await a.exited).toBe(0);
      expect(Object.keys(await secretData())).toEqual(['torchserve-b.json']);
      expect(await decoded('torchserve-b.json')).toBe(keyFile(100));
    } finally {
      a.child.kill('SIGTERM');
      b.child.kill('SIGTERM');
      await Promise.all([a.exited, b.exited]);
    }
    expect(await secretData()).toEqual({});
    // Logs name the Secret and the key, never key material.
    for (const log of [a.log(), b.log()]) {
      expect(log).toContain('published keys');
      expect(log).not.toMatch(/Zq8/);
    }
    expect(a.log()).toContain('published rotated keys');
  });
});
