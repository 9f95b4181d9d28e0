import { describe, expect, it } from 'vitest';
import type { TestSpecification, Vitest } from 'vitest/node';
import config from '../../vitest.config.ts';
import { PROJECT_ORDER, ProjectOrderSequencer } from '../support/project-order.ts';

/** A file of `project` as the sequencer sees it, with vitest's cached duration for it. */
const spec = (project: string, file: string) =>
  ({
    project: { name: project, config: { sequence: { groupOrder: 0 }, isolate: true } },
    moduleId: `/repo/test/${project}/${file}`,
  }) as unknown as TestSpecification;

describe('the projects run in the order the configuration declares them', () => {
  it('names the configuration’s projects, in its order', () => {
    const names = (config.test?.projects as { test: { name: string } }[]).map((p) => p.test.name);
    expect(names).toEqual([...PROJECT_ORDER]);
  });

  it('puts integration before e2e and e2e before cluster, keeping vitest’s slowest-first order within each', async () => {
    const durations: Record<string, number> = {
      'e2e:test/e2e/fast.test.ts': 10,
      'e2e:test/e2e/slow.test.ts': 100,
      'integration:test/integration/a.test.ts': 5,
      'integration:test/integration/b.test.ts': 50,
      'cluster:test/cluster/install.test.ts': 200,
    };
    const ctx = {
      config: { root: '/repo' },
      cache: {
        getFileTestResults: (key: string) =>
          key in durations ? { failed: false, duration: durations[key] } : undefined,
        getFileStats: () => ({ size: 1 }),
      },
    } as unknown as Vitest;
    const files = [
      spec('cluster', 'install.test.ts'),
      spec('e2e', 'fast.test.ts'),
      spec('integration', 'a.test.ts'),
      spec('e2e', 'slow.test.ts'),
      spec('integration', 'b.test.ts'),
    ];
    const sorted = await new ProjectOrderSequencer(ctx).sort(files);
    expect(sorted.map((s) => s.moduleId.replace('/repo/test/', ''))).toEqual([
      'integration/b.test.ts',
      'integration/a.test.ts',
      'e2e/slow.test.ts',
      'e2e/fast.test.ts',
      'cluster/install.test.ts',
    ]);
  });
});
