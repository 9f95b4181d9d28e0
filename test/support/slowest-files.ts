/**
 * A vitest reporter beside the default one: after a run of more than one file, the slowest files with their times,
 * so a CI log says where its minutes went (the default reporter prints each file's time in run order, without its
 * import and set-up, and thousands of lines apart).
 */
import type { Reporter, TestModule, Vitest } from 'vitest/node';

export interface FileTime {
  /** The file's path from the repository root. */
  file: string;
  project: string;
  /** Import, set-up and tests (hooks included), as the file's worker spent them. */
  ms: number;
  tests: number;
  failed: boolean;
}

const seconds = (ms: number) => (ms / 1000).toFixed(1);

/** The report's lines: a heading with the share of the run's file time, then one line per file, slowest first. */
export function slowestFilesReport(files: readonly FileTime[], count: number): string[] {
  if (files.length < 2) return [];
  const slowest = [...files].sort((a, b) => b.ms - a.ms || a.file.localeCompare(b.file)).slice(0, count);
  const sum = (list: readonly FileTime[]) => list.reduce((s, f) => s + f.ms, 0);
  const width = seconds(slowest[0]!.ms).length;
  const project = Math.max(...slowest.map((f) => f.project.length));
  return [
    `Slowest ${slowest.length} of ${files.length} test files: ${seconds(sum(slowest))} s of ${seconds(sum(files))} s`,
    ...slowest.map(
      (f) =>
        `  ${seconds(f.ms).padStart(width)} s  ${f.project.padEnd(project)}  ${f.file} (${f.tests} ${
          f.tests === 1 ? 'test' : 'tests'
        }${f.failed ? ', failed' : ''})`,
    ),
  ];
}

function fileTime(m: TestModule): FileTime {
  const d = m.diagnostic();
  return {
    file: m.relativeModuleId,
    project: m.project.name,
    ms: d.environmentSetupDuration + d.prepareDuration + d.collectDuration + d.setupDuration + d.duration,
    tests: [...m.children.allTests()].length,
    failed: m.state() === 'failed',
  };
}

export class SlowestFiles implements Reporter {
  private ctx?: Vitest;
  private readonly count: number;

  constructor(count = 15) {
    this.count = count;
  }

  onInit(ctx: Vitest): void {
    this.ctx = ctx;
  }

  onTestRunEnd(modules: ReadonlyArray<TestModule>): void {
    const lines = slowestFilesReport(modules.map(fileTime), this.count);
    if (lines.length > 0) this.ctx?.logger.log(['', ...lines].join('\n'));
  }
}
