/**
 * The operator image (Containerfile), built here with buildah on bases made from Debian packages, and run the
 * way a pod runs it: as UID 65532 on a READ-ONLY root filesystem, configured in-cluster only (service-account
 * token and CA at the standard paths, KUBERNETES_SERVICE_HOST/PORT), with the command, arguments and
 * environment of deploy/'s Deployment, under the RBAC of deploy/ bound to that service account. It must win the
 * leader election and bring a ModelPreheat to Succeeded against the manager emulator.
 */
import { execFileSync, spawn } from 'node:child_process';
import {
  createWriteStream,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent, fetch as undiciFetch } from 'undici';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ModelPreheat } from '../../src/api/index.ts';
import { GVR } from '../../src/api/index.ts';
import { KubeClient, type KubeObject } from '../../src/runtime/index.ts';
import { BUILDAH, buildah, buildahAvailable, buildImage } from '../support/buildah.ts';
import { createNamespace, kubeConfig, REPO_ROOT, waitFor } from '../support/kube.ts';
import { startManagerEmulator, type ManagerEmulator } from '../support/manager-emulator.ts';
import { startOrigin, type Origin } from '../support/origin.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { freePort } from '../support/ports.ts';
import { gvrOf, kustomize, type Manifest } from '../support/runtime-deploy.ts';
import { serviceAccountIdentity, writeServiceAccountDir } from '../support/service-account.ts';

const MB = 1000 * 1000;
const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';
const SA_NS = 'peerload-system';
// Set-up installs buildah (scripts/setup-image-tools.sh); only a machine without it skips the image tests.
const describeImage = buildahAvailable() ? describe : describe.skip;

const kubeconfigPath = inject('kubeconfigPath');
const admin = new KubeClient(kubeConfig(kubeconfigPath));
let work: string;
let ctr: string | undefined;
let image: string;
let rootfs: string;
let readOnly = false;

beforeAll(async () => {
  if (!buildahAvailable()) return;
  work = mkdtempSync(join(tmpdir(), 'peerload-image-'));
  const { ref, seconds } = await buildImage('operator');
  image = ref;
  console.log(`[image] built ${ref} in ${seconds.toFixed(1)} s`);
  ctr = await buildah('from', '--pull-never', '--quiet', ref);
  rootfs = await buildah('mount', ctr);
}, 1_800_000);

afterAll(async () => {
  if (readOnly) execFileSync('umount', [rootfs]);
  if (ctr) await buildah('rm', ctr);
  await admin.close();
  if (work) rmSync(work, { recursive: true, force: true });
});

describeImage('operator image', () => {
  it('is at most 200 MB uncompressed: Node, the bundled CLI and nothing else (no node_modules)', () => {
    const bytes = Number(
      execFileSync('du', ['-sb', '--apparent-size', rootfs], { encoding: 'utf8' }).split('\t')[0],
    );
    const app = Number(execFileSync('du', ['-sb', join(rootfs, 'app')], { encoding: 'utf8' }).split('\t')[0]);
    const node = Number(
      execFileSync('du', ['-sb', join(rootfs, 'usr/local/bin/node')], { encoding: 'utf8' }).split('\t')[0],
    );
    console.log(
      `[image] ${(bytes / MB).toFixed(1)} MB uncompressed: node ${(node / MB).toFixed(1)} MB, ` +
        `bundle ${(app / MB).toFixed(1)} MB, base ${((bytes - node - app) / MB).toFixed(1)} MB`,
    );
    expect(bytes).toBeLessThanOrEqual(200 * MB);
    const found = execFileSync('find', [rootfs, '-name', 'node_modules'], { encoding: 'utf8' }).trim();
    expect(found).toBe('');
    expect(existsSync(join(rootfs, 'bin/sh'))).toBe(false); // no shell in the runtime stage
  });

  it('runs as UID 65532, and nothing in it is writable by that user except /tmp and its home', async () => {
    expect(await buildah('inspect', '--type', 'image', '--format', '{{.OCIv1.Config.User}}', image)).toBe(
      '65532:65532',
    );
    const writable = execFileSync(
      'find',
      [
        rootfs,
        '-xdev',
        '-not',
        '-type',
        'l',
        '(',
        '-perm',
        '-o+w',
        '-o',
        '-uid',
        '65532',
        '-o',
        '-gid',
        '65532',
        ')',
      ],
      { encoding: 'utf8' },
    )
      .split('\n')
      .filter(Boolean)
      .map((p) => p.slice(rootfs.length));
    expect(writable.sort()).toEqual(['/home/nonroot', '/tmp']);
  });

  describe('in-cluster, as deploy/ runs it', () => {
    let manager: ManagerEmulator;
    let peer: PeerProxy;
    let origin: Origin;
    afterAll(async () => {
      await Promise.all([manager?.close(), peer?.close(), origin?.close()]);
    });

    it('leads and brings a ModelPreheat to Succeeded, on a read-only root filesystem', async () => {
      // The RBAC of deploy/base, bound to its ServiceAccount, and a token for that ServiceAccount.
      const base = kustomize(join(REPO_ROOT, 'deploy/base'));
      const rbacKinds = [
        'Namespace',
        'ServiceAccount',
        'ClusterRole',
        'ClusterRoleBinding',
        'Role',
        'RoleBinding',
      ];
      for (const m of base.filter((m) => rbacKinds.includes(m.kind))) {
        await admin.resource(gvrOf(m)).patch(m.metadata.namespace, m.metadata.name, m, {
          type: 'apply',
          fieldManager: 'peerload-tests',
          force: true,
        });
      }
      await admin
        .resource(GVR.leases)
        .delete(SA_NS, 'peerload-operator')
        .catch(() => undefined);
      const id = await serviceAccountIdentity(kubeconfigPath, SA_NS, 'peerload-operator');
      const saDir = join(work, 'serviceaccount');
      writeServiceAccountDir(saDir, id);

      origin = await startOrigin({ '/models/image.bin': 'weights from the image test' });
      peer = await startPeerProxy();
      manager = await startManagerEmulator({ peer });

      // What the kubelet provides: mount points, then the root made read-only (readOnlyRootFilesystem).
      for (const d of [SA_DIR, '/proc', '/sys', '/dev', '/run'])
        mkdirSync(join(rootfs, d), { recursive: true });
      for (const f of ['etc/hosts', 'etc/resolv.conf', 'etc/hostname', 'run/.containerenv'])
        if (!existsSync(join(rootfs, f))) writeFileSync(join(rootfs, f), '');
      execFileSync('mount', ['--bind', rootfs, rootfs]);
      readOnly = true;
      execFileSync('mount', ['-o', 'remount,bind,ro', rootfs]);
      expect(() => writeFileSync(join(rootfs, 'app/probe'), 'x')).toThrow(/EROFS/);

      // The Deployment's container, with the downward API's values filled in and the manager URL set as the
      // README's overlay does; the metrics port moves off 8080 (the pod network here is the host's).
      const deployment = base.find((m) => m.kind === 'Deployment') as Manifest & {
        spec: { template: { spec: { containers: ContainerSpec[] } } };
      };
      const c = deployment.spec.template.spec.containers[0]!;
      const podName = `peerload-operator-image-${Date.now().toString(36)}`;
      const env: Record<string, string> = {};
      for (const e of c.env) {
        if (e.value !== undefined) env[e.name] = e.value;
        else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.name') env[e.name] = podName;
        else if (e.valueFrom?.fieldRef?.fieldPath === 'metadata.namespace') env[e.name] = SA_NS;
      }
      Object.assign(env, {
        KUBERNETES_SERVICE_HOST: id.server.hostname,
        KUBERNETES_SERVICE_PORT: id.server.port,
        PEERLOAD_MANAGER_URL: manager.url,
        PEERLOAD_POLL_BACKOFF_START: '200ms',
        PEERLOAD_POLL_BACKOFF_MAX: '1s',
      });
      const metricsPort = await freePort();
      const args = [...c.args, `--metrics-address=127.0.0.1:${metricsPort}`];
      const logPath = join(work, 'operator.log');
      const log = createWriteStream(logPath);
      const child = spawn(
        'buildah',
        [
          ...BUILDAH,
          'run',
          '--isolation',
          'chroot',
          '--user',
          '65532:65532',
          '--volume',
          `${saDir}:${SA_DIR}:ro`,
          ...Object.entries(env).flatMap(([k, v]) => ['--env', `${k}=${v}`]),
          ctr!,
          '--',
          ...c.command,
          ...args,
        ],
        { stdio: ['ignore', 'pipe', 'pipe'] },
      );
      child.stdout.pipe(log);
      child.stderr.pipe(log);
      const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
      const logText = () => readFileSync(logPath, 'utf8').slice(-3000);
      try {
        await waitFor(
          'the image operator to lead',
          async () => {
            if (child.exitCode !== null) throw new Error(`operator exited ${child.exitCode}:\n${logText()}`);
            const lease = await admin
              .resource<KubeObject & { spec?: { holderIdentity?: string } }>(GVR.leases)
              .get(SA_NS, 'peerload-operator');
            return lease.spec?.holderIdentity?.startsWith(`${podName}_`);
          },
          { timeoutMs: 60_000, intervalMs: 250 },
        ).catch((err) => {
          throw new Error(`${(err as Error).message}\n${logText()}`);
        });
        // deploy/'s flags serve HTTPS with a certificate self-signed at start (nothing to verify it against, as
        // the kubelet's probe does not), and /metrics only to reviewed tokens.
        const probe = new Agent({ connect: { rejectUnauthorized: false } });
        try {
          const url = `https://127.0.0.1:${metricsPort}`;
          expect((await undiciFetch(`${url}/readyz`, { dispatcher: probe })).status).toBe(200);
          expect((await undiciFetch(`${url}/metrics`, { dispatcher: probe })).status).toBe(401);
        } finally {
          await probe.close();
        }

        const ns = await createNamespace(kubeConfig(kubeconfigPath), 'image');
        await admin.resource(GVR.modelPreheats).create({
          apiVersion: 'peerload.io/v1alpha1',
          kind: 'ModelPreheat',
          metadata: { name: 'from-image', namespace: ns },
          spec: { url: `${origin.url}/models/image.bin?Expires=1&Signature=s` },
        } as KubeObject);
        const done = await waitFor(
          'ModelPreheat Succeeded',
          async () => {
            const o = (await admin
              .resource(GVR.modelPreheats)
              .get(ns, 'from-image')) as unknown as ModelPreheat;
            return o.status?.conditions?.find((x) => x.type === 'Succeeded' && x.status === 'True')
              ? o
              : undefined;
          },
          { timeoutMs: 60_000, intervalMs: 250 },
        ).catch((err) => {
          throw new Error(`${(err as Error).message}\n${logText()}`);
        });
        expect(done.status?.state).toBe('SUCCESS');
        expect([...manager.jobs.values()].some((j) => j.state === 'SUCCESS')).toBe(true);
      } finally {
        // A kubelet's SIGTERM goes to the container's process; buildah run would SIGKILL it instead.
        const operatorPid = descendants(child.pid!).find((pid) => exeOf(pid).endsWith('/usr/local/bin/node'));
        if (operatorPid) process.kill(operatorPid, 'SIGTERM');
        else child.kill('SIGKILL');
        const code = await Promise.race([
          exited,
          new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), 40_000)),
        ]);
        if (code === 'timeout') child.kill('SIGKILL');
        log.end();
        expect(code, logText()).not.toBe('timeout');
        // The operator's own exit status: buildah 1.28 exits 2 after it, failing to remove the mount points it
        // made on the read-only root (a nil-logger panic in its clean-up).
        const shutdown = readFileSync(logPath, 'utf8')
          .split('\n')
          .filter((l) => l.startsWith('{'))
          .map((l) => JSON.parse(l) as { msg?: string; exitCode?: number; drained?: boolean })
          .find((l) => l.msg === 'shutdown complete');
        expect(shutdown, logText()).toMatchObject({ exitCode: 0, drained: true });
      }
      // A graceful stop releases the Lease (the next leader need not wait for it to expire).
      const lease = await admin
        .resource<KubeObject & { spec?: { holderIdentity?: string } }>(GVR.leases)
        .get(SA_NS, 'peerload-operator');
      expect(lease.spec?.holderIdentity ?? '').toBe('');
    });
  });
});

/** Every process below `pid`, from /proc (parents first). */
function descendants(pid: number): number[] {
  const parents = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      parents.set(ppid, [...(parents.get(ppid) ?? []), Number(entry)]);
    } catch {
      // the process ended while we looked
    }
  }
  const out: number[] = [];
  const walk = (p: number): void => {
    for (const c of parents.get(p) ?? []) {
      out.push(c);
      walk(c);
    }
  };
  walk(pid);
  return out;
}

/** The executable of a process (buildah's own helpers run from a memfd). */
const exeOf = (pid: number): string => {
  try {
    return readlinkSync(`/proc/${pid}/exe`);
  } catch {
    return '';
  }
};

interface ContainerSpec {
  command: string[];
  args: string[];
  env: { name: string; value?: string; valueFrom?: { fieldRef?: { fieldPath: string } } }[];
}
