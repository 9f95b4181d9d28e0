/** test/vectors/taskid.json, the task-id vectors the TypeScript and Java suites share, typed. */
import { readFileSync } from 'node:fs';
import type { TaskIdRule } from '../../src/storage/taskid.ts';

export interface TaskIdVector {
  url: string;
  filter: string[];
  tag: string | null;
  application: string | null;
  revision: string | null;
  pieceLength: number | null;
  note?: string;
  /** `daemon`: from the daemon's own tests (its 1.5.3+ values); `added`: cases where the two rules part. */
  source: 'daemon' | 'added';
  expected: Record<TaskIdRule, { canonicalURL: string; taskID: string }>;
}

export const TASKID_VECTORS = JSON.parse(
  readFileSync(new URL('../vectors/taskid.json', import.meta.url), 'utf8'),
) as { vectors: TaskIdVector[]; queryEscape: { in: string; out: string }[] };
