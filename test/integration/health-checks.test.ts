/**
 * Health as GitOps tools read it, on recorded statuses (test/fixtures/health-status.json, written by the
 * controllers' status modules): the Argo CD Lua checks of deploy/argocd under a real Lua 5.1, and kstatus of
 * sigs.k8s.io/cli-utils (Flux, kpt).
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { load } from 'js-yaml';
import { describe, expect, it } from 'vitest';
import { REPO_ROOT } from '../support/kube.ts';
import { kstatus, runLuaHealth } from '../support/health-tools.ts';

interface Fixture {
  name: string;
  argocd: string;
  kstatus: string;
  object: { kind: string; status?: { conditions?: { type: string; status: string; message: string }[] } };
}
const fixtures = JSON.parse(
  readFileSync(join(REPO_ROOT, 'test/fixtures/health-status.json'), 'utf8'),
) as Fixture[];
const cm = load(readFileSync(join(REPO_ROOT, 'deploy/argocd/argocd-cm-health.yaml'), 'utf8')) as {
  data: Record<string, string>;
};
const script = (kind: string) => cm.data[`resource.customizations.health.peerload.io_${kind}`]!;

describe('Argo CD health checks (deploy/argocd) under Lua 5.1', () => {
  it('has one check per kind', () => {
    expect(Object.keys(cm.data).sort()).toEqual([
      'resource.customizations.health.peerload.io_ModelPreheat',
      'resource.customizations.health.peerload.io_ServedModel',
    ]);
  });

  it('covers healthy, progressing, degraded and missing status for both kinds', () => {
    for (const kind of ['ModelPreheat', 'ServedModel'])
      expect(new Set(fixtures.filter((f) => f.object.kind === kind).map((f) => f.argocd))).toEqual(
        new Set(['Healthy', 'Progressing', 'Degraded']),
      );
    expect(fixtures.filter((f) => f.object.status === undefined)).toHaveLength(2);
  });

  for (const f of fixtures) {
    it(`${f.name}: ${f.argocd}`, () => {
      const hs = runLuaHealth(script(f.object.kind), f.object);
      expect(hs.status).toBe(f.argocd);
      // The message a person sees in the Argo CD UI carries the cause the operator wrote.
      const stalled = f.object.status?.conditions?.find((c) => c.type === 'Stalled');
      if (f.argocd === 'Degraded') expect(hs.message).toContain(stalled!.message);
      expect(hs.message).not.toBe('');
    });
  }
});

describe('kstatus (sigs.k8s.io/cli-utils) on the same statuses', () => {
  it('computes Current / InProgress / Failed as the operator means them', () => {
    const got = kstatus(fixtures.map((f) => f.object));
    expect(got.map((s, i) => `${fixtures[i]!.name}: ${s.status}`)).toEqual(
      fixtures.map((f) => `${f.name}: ${f.kstatus}`),
    );
    // Failed carries the Stalled message (what `flux get` and `kpt live status` print).
    const failed = got.findIndex((s) => s.status === 'Failed');
    expect(got[failed]!.message).toBe(
      fixtures[failed]!.object.status!.conditions!.find((c) => c.type === 'Stalled')!.message,
    );
  });
});
