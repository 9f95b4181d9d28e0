/**
 * `npm run release` (scripts/release.sh) and the CI workflow that calls it: every artifact is produced, usable
 * and consistent (install.yaml accepted by the apiserver, the chart package renders the release image, the OCI
 * archives hold the tagged images, the checksums verify); a tag that does not match the version is refused.
 */
import { execFile, execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { load, loadAll } from 'js-yaml';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { KubeClient } from '../../src/runtime/index.ts';
import { buildah, buildahAvailable } from '../support/buildah.ts';
import { helm } from '../support/helm.ts';
import { kubeConfig, REPO_ROOT } from '../support/kube.ts';
import { gvrOf, kustomize, type Manifest } from '../support/runtime-deploy.ts';

const exec = promisify(execFile);
const version = (JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { version: string })
  .version;
const describeRelease = buildahAvailable() ? describe : describe.skip;
let out: string;

beforeAll(async () => {
  if (!buildahAvailable()) return;
  out = mkdtempSync(join(tmpdir(), 'peerload-release-'));
  const t0 = Date.now();
  await exec('bash', ['scripts/release.sh', '--out', out, '--debian-bases'], {
    cwd: REPO_ROOT,
    maxBuffer: 16 * 1024 * 1024,
    env: { ...process.env, RELEASE_TAG: `v${version}` },
  });
  console.log(`[release] ${((Date.now() - t0) / 1000).toFixed(1)} s: ${readdirSync(out).join(', ')}`);
}, 1_800_000);

afterAll(() => {
  if (out) rmSync(out, { recursive: true, force: true });
});

describeRelease('npm run release', () => {
  it('writes the six artifacts, and SHA256SUMS verifies them', () => {
    expect(readdirSync(out).sort()).toEqual(
      [
        'SHA256SUMS',
        'install.yaml',
        `peerload-${version}.tgz`,
        `peerload-image-${version}.oci.tar`,
        `peerload-torchserve-plugin-${version}.jar`,
        `peerload-torchserve-plugin-image-${version}.oci.tar`,
      ].sort(),
    );
    expect(execFileSync('sha256sum', ['-c', 'SHA256SUMS'], { cwd: out, encoding: 'utf8' })).not.toMatch(
      /FAILED/,
    );
    const jar = readFileSync(join(out, `peerload-torchserve-plugin-${version}.jar`));
    expect(jar.subarray(0, 2).toString()).toBe('PK');
  });

  it('install.yaml: the CRDs and the operator of the release image, accepted by the apiserver (dry run)', async () => {
    const ms = (loadAll(readFileSync(join(out, 'install.yaml'), 'utf8')) as (Manifest | null)[]).filter(
      (m): m is Manifest => !!m,
    );
    expect(ms.filter((m) => m.kind === 'CustomResourceDefinition')).toHaveLength(3); // ModelPreheat, ServedModel, ClusterManager
    const d = ms.find((m) => m.kind === 'Deployment') as any;
    expect(d.spec.template.spec.containers[0].image).toBe(`ghcr.io/peerload/peerload:${version}`);
    const kube = new KubeClient(kubeConfig(inject('kubeconfigPath')));
    try {
      const ns = ms.find((m) => m.kind === 'Namespace')!;
      await kube.resource(gvrOf(ns)).patch(undefined, ns.metadata.name, ns, {
        type: 'apply',
        fieldManager: 'peerload-release-test',
        force: true,
      });
      for (const m of ms) {
        const r = await kube.resource(gvrOf(m)).patch(m.metadata.namespace, m.metadata.name, m, {
          type: 'apply',
          fieldManager: 'peerload-release-test',
          force: true,
          dryRun: true,
        });
        expect(r.metadata.name).toBe(m.metadata.name);
      }
    } finally {
      await kube.close();
    }
  });

  it('the chart package holds the CRDs and renders the release image', () => {
    const tgz = join(out, `peerload-${version}.tgz`);
    const files = execFileSync('tar', ['-tzf', tgz], { encoding: 'utf8' }).split('\n');
    expect(files).toEqual(
      expect.arrayContaining([
        'peerload/Chart.yaml',
        'peerload/crds/clustermanagers.peerload.io.yaml',
        'peerload/crds/modelpreheats.peerload.io.yaml',
        'peerload/crds/servedmodels.peerload.io.yaml',
        'peerload/templates/deployment.yaml',
      ]),
    );
    const crd = execFileSync('tar', ['-xzOf', tgz, 'peerload/crds/servedmodels.peerload.io.yaml'], {
      encoding: 'utf8',
    });
    expect(crd).toBe(readFileSync(join(REPO_ROOT, 'crds/servedmodels.peerload.io.yaml'), 'utf8'));
    const rendered = loadAll(helm(['template', 'peerload', tgz, '-n', 'peerload-system'])) as any[];
    const d = rendered.find((m) => m?.kind === 'Deployment');
    expect(d.spec.template.spec.containers[0].image).toBe(`ghcr.io/peerload/peerload:${version}`);
  });

  it('the OCI archives hold the operator and plugin images under their release references', () => {
    for (const [file, ref] of [
      [`peerload-image-${version}.oci.tar`, `ghcr.io/peerload/peerload:${version}`],
      [
        `peerload-torchserve-plugin-image-${version}.oci.tar`,
        `ghcr.io/peerload/peerload-torchserve-plugin:${version}`,
      ],
    ] as const) {
      const path = join(out, file);
      expect(execFileSync('tar', ['-tf', path], { encoding: 'utf8' }).split('\n')).toEqual(
        expect.arrayContaining(['oci-layout', 'index.json']),
      );
      const index = JSON.parse(execFileSync('tar', ['-xOf', path, 'index.json'], { encoding: 'utf8' })) as {
        manifests: { annotations?: Record<string, string> }[];
      };
      expect(index.manifests).toHaveLength(1);
      expect(index.manifests[0]!.annotations?.['org.opencontainers.image.ref.name']).toBe(ref);
    }
  });

  it("the plugin image's init container, as deploy/examples/torchserve runs it, copies the jar", async () => {
    const pod = (
      kustomize(join(REPO_ROOT, 'deploy/examples/torchserve')).find((m) => m.kind === 'Deployment') as any
    ).spec.template.spec;
    const init = pod.initContainers[0] as { image: string; command: string[] };
    const plugins = mkdtempSync(join(tmpdir(), 'peerload-plugins-'));
    chmodSync(plugins, 0o777); // an emptyDir is world-writable; the init container runs as 65532
    const ctr = await buildah('from', '--pull-never', '--quiet', init.image);
    try {
      await buildah(
        'run',
        '--isolation',
        'chroot',
        '--volume',
        `${plugins}:/plugins`,
        ctr,
        '--',
        ...init.command,
      );
    } finally {
      await buildah('rm', ctr);
    }
    expect(readFileSync(join(plugins, 'peerload-torchserve-plugin.jar'))).toEqual(
      readFileSync(join(out, `peerload-torchserve-plugin-${version}.jar`)),
    );
    rmSync(plugins, { recursive: true, force: true });
  });

  it('refuses a tag that is not the package version, before building anything', async () => {
    const err = await exec('bash', ['scripts/release.sh', '--out', join(out, 'x')], {
      cwd: REPO_ROOT,
      env: { ...process.env, RELEASE_TAG: 'v99.0.0' },
    }).catch((e: { code: number; stderr: string }) => e);
    expect(err).toMatchObject({ code: 1 });
    expect((err as { stderr: string }).stderr).toMatch(/tag v99\.0\.0 does not match package\.json version/);
  });
});

describe('.github/workflows/release.yml', () => {
  const wf = load(readFileSync(join(REPO_ROOT, '.github/workflows/release.yml'), 'utf8')) as any;
  const steps = wf.jobs.release.steps as { run?: string }[];
  const script = steps.map((s) => s.run ?? '').join('\n');

  it('runs on v* tags and calls npm run release with the tag', () => {
    expect(wf.on.push.tags).toEqual(['v*']);
    expect(wf.jobs.release.env.RELEASE_TAG).toBe('${{ github.ref_name }}');
    expect(script).toMatch(/npm run release/);
    expect(script).toMatch(/npm ci/);
  });

  it('publishes the artifact names release.sh writes', () => {
    expect(script).toContain('dist/release/*');
    expect(script).toContain('dist/release/${name}-image-$v.oci.tar');
    expect(script).toContain('dist/release/peerload-$v.tgz');
    expect(readFileSync(join(REPO_ROOT, 'scripts/release.sh'), 'utf8')).toContain('out=dist/release');
    const pkg = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as {
      scripts: Record<string, string>;
    };
    expect(pkg.scripts.release).toBe('bash scripts/release.sh');
  });
});
