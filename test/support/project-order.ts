/**
 * Vitest's own order puts the projects whose files go one at a time in alphabetical order (cluster, e2e,
 * integration). This keeps its order within a project and runs the projects as `vitest.config.ts` declares them:
 * unit, integration, e2e, cluster, so one vitest process given several projects runs the cheaper failures first.
 * A whole `npm test` runs the e2e project with unit + integration beside it (in this order), then the cluster
 * project (scripts/test.sh).
 */
import { BaseSequencer, type TestSpecification } from 'vitest/node';

export const PROJECT_ORDER = ['unit', 'integration', 'e2e', 'cluster'] as const;

export class ProjectOrderSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const rank = (spec: TestSpecification) => {
      const i = (PROJECT_ORDER as readonly string[]).indexOf(spec.project.name);
      return i < 0 ? PROJECT_ORDER.length : i;
    };
    // Array.prototype.sort is stable: within a project, vitest's order (failed first, then slowest first) stays.
    return (await super.sort(files)).sort((a, b) => rank(a) - rank(b));
  }
}
