/**
 * The `peerload agent` beside a replica, as a driver uses it: place one version of a model directory (PUT the
 * version spec, then follow its progress until the files are in place), list the versions it holds, remove one.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { parseBody } from '../../http/body.ts';
import type { Call, ModelFiles, RegisterCall } from '../driver.ts';
import { OipError } from './errors.ts';
import type { Endpoint } from './http.ts';

const FileProgress = z.looseObject({
  path: z.string(),
  state: z.string(),
  localHit: z.boolean().optional(),
});
const VersionProgress = z.looseObject({
  version: z.string(),
  state: z.enum(['Downloading', 'Ready', 'Failed']),
  filesTotal: z.number().optional(),
  filesDone: z.number().optional(),
  bytesTotal: z.number().optional(),
  bytesDone: z.number().optional(),
  localHits: z.number().optional(),
  error: z.string().optional(),
  reason: z.string().optional(),
  files: z.array(FileProgress).optional(),
});
type VersionProgress = z.infer<typeof VersionProgress>;
const ModelProgress = z.object({ versions: z.array(VersionProgress) });

/** Agent failures that a retry does not fix: the spec or the budget must change. */
const TERMINAL_REASONS = new Set(['DiskBudgetExceeded', 'InvalidSpec', 'NotFound', 'Forbidden']);

export interface Placed {
  /** Every file a local hit of the node's peer; undefined when the agent found the version on disk. */
  localHit: boolean | undefined;
}

/** How often the placement's progress is read. */
export const PLACE_POLL_MS = 1_000;

const modelPath = (name: string) => `/v1/models/${encodeURIComponent(name)}`;

export class AgentClient {
  readonly agent: Endpoint;
  private readonly pollMs: number;

  constructor(agent: Endpoint, pollMs = PLACE_POLL_MS) {
    this.agent = agent;
    this.pollMs = pollMs;
  }

  /**
   * Asks for `version` of `name` and waits until its files are in place, reporting progress. A version placed
   * earlier answers at once; a failed download rejects with the agent's reason.
   */
  async place(name: string, version: string, files: ModelFiles, call: RegisterCall): Promise<Placed> {
    const operation = `place ${name} ${version}`;
    const res = await this.agent.send(operation, 'PUT', modelPath(name), { ...files, version }, call);
    if (res.status !== 200 && res.status !== 202) throw this.agent.failure(operation, res);
    for (;;) {
      const v = (await this.versions(name, call)).find((p) => p.version === version);
      if (!v)
        throw new OipError({
          kind: 'retryable',
          status: 0,
          operation,
          subject: this.agent.subject,
          serverMessage: `the agent lost version ${version} of ${name} (restarted?)`,
        });
      if (v.state === 'Ready') return { localHit: allLocal(v) };
      if (v.state === 'Failed')
        throw new OipError({
          kind: v.reason && TERMINAL_REASONS.has(v.reason) ? 'terminal' : 'retryable',
          status: 0,
          operation,
          subject: this.agent.subject,
          reason: v.reason,
          serverMessage: v.error ?? 'the download failed',
        });
      call.progress?.(progressLine(name, v));
      await sleep(this.pollMs, undefined, { signal: call.signal });
    }
  }

  /** Every version the agent knows of `name` (empty when none). */
  async versions(name: string, call: Call): Promise<VersionProgress[]> {
    const operation = `progress of ${name}`;
    const res = await this.agent.send(operation, 'GET', modelPath(name), undefined, call);
    if (res.status === 404) return [];
    if (res.status !== 200) throw this.agent.failure(operation, res);
    const parsed = parseBody(res.text, ModelProgress);
    if (!parsed.ok) throw this.agent.unusable(operation, res, parsed.problem);
    return parsed.data.versions;
  }

  /** Removes a version's directory (stopping its download); one the agent does not have is fine. */
  async remove(name: string, version: string, call: Call): Promise<void> {
    const operation = `remove ${name} ${version}`;
    const path = `${modelPath(name)}/versions/${encodeURIComponent(version)}`;
    const res = await this.agent.send(operation, 'DELETE', path, undefined, call);
    if (res.status !== 200 && res.status !== 404) throw this.agent.failure(operation, res);
  }
}

function allLocal(v: VersionProgress): boolean | undefined {
  const files = v.files ?? [];
  if (files.length === 0) return undefined;
  return files.every((f) => f.localHit === true);
}

const MiB = 1024 * 1024;

function progressLine(name: string, v: VersionProgress): string {
  const files = `${v.filesDone ?? 0}/${v.filesTotal ?? '?'} files`;
  const bytes = v.bytesTotal
    ? `, ${((v.bytesDone ?? 0) / MiB).toFixed(1)} of ${(v.bytesTotal / MiB).toFixed(1)} MiB`
    : '';
  const hits = v.localHits ? `, ${v.localHits} local hits` : '';
  return `the agent places ${name} ${v.version}: ${files}${bytes}${hits}`;
}
