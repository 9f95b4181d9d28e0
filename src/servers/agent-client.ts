/**
 * A replica's `peerload agent` (src/agent/server.ts) as a driver uses it: place one version of a model directory
 * (PUT the version spec, then read its progress until the files are in place), list the versions it holds, remove
 * one. Shared by the drivers whose servers load a directory the agent placed beside them.
 *
 * Errors are the endpoint's {@link ReplicaError}s (endpoint.ts), classified as everywhere (src/http/classify.ts)
 * with one exception: the agent answers a wrong token with 403, which is an `auth` failure as 401 is. A version
 * whose download failed is `terminal` only when a retry cannot help (over the byte cap, a spec the agent refuses).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Dispatcher } from 'undici';
import { z } from 'zod';
import { SpecTooLargeError, specBody } from '../place/spec.ts';
import { parseBody } from '../http/body.ts';
import { SerializedJSON } from '../http/request.ts';
import type {
  Call,
  IntegrityFailure,
  ModelFiles,
  RegisterCall,
  ReplicaAccess,
  ReplicaOwner,
  ReplicaRef,
} from './driver.ts';
import { ReplicaEndpoint } from './endpoint.ts';
import { replicaSecret, type SecretValue } from './secrets.ts';

const AgentVersion = z.looseObject({
  version: z.string(),
  /** Under the agent's root: the spec's `directory`, else the model's name. */
  directory: z.string().optional(),
  state: z.enum(['Downloading', 'Ready', 'Failed']),
  filesTotal: z.number().optional(),
  filesDone: z.number().optional(),
  bytesTotal: z.number().optional(),
  bytesDone: z.number().optional(),
  localHits: z.number().optional(),
  error: z.string().optional(),
  reason: z.string().optional(),
  files: z.array(z.looseObject({ path: z.string(), localHit: z.boolean().optional() })).optional(),
});
export type AgentVersion = z.infer<typeof AgentVersion>;
const ModelAnswer = z.looseObject({ versions: z.array(AgentVersion) });

/** Download failures a retry does not fix until the spec or the agent's cap changes. */
const TERMINAL_REASONS = new Set([
  'DiskBudgetExceeded',
  'InvalidSpec',
  'NoCredentials',
  // An OCI layer's archive: the same blob (its digest is checked) fails the same way again.
  'UnsafeTarEntry',
  'InvalidArchive',
  'LimitExceeded',
  // Refused before sending (spec.ts specBody): the same files are as large next time.
  'SpecTooLarge',
]);

/**
 * The agent's reasons that are failures of the bytes, not of the network or a server. A checksum mismatch is
 * retryable: the agent asks for the file under a fresh P2P task next time (src/place/refetch.ts), so a retry reads
 * the origin again. An unsafe archive entry is in bytes that match their digest: the same archive fails again.
 */
const INTEGRITY_REASONS: Readonly<Record<string, IntegrityFailure>> = {
  ChecksumMismatch: 'ChecksumMismatch',
  UnsafeTarEntry: 'UnsafeArchive',
};

/** The integrity failure an agent's reason word names, if it names one. */
export function integrityOf(reason: string | undefined): IntegrityFailure | undefined {
  return reason !== undefined && Object.hasOwn(INTEGRITY_REASONS, reason)
    ? INTEGRITY_REASONS[reason]
    : undefined;
}

export interface Placed {
  /** The version's directory under the agent's root. */
  directory: string;
  /** Every file a local hit of the node's peer; undefined when not known (found on disk from an earlier run). */
  localHit: boolean | undefined;
}

export interface AgentClientOptions {
  /** `http(s)://host:port` of the agent. */
  baseURL: string;
  dispatcher: Dispatcher;
  /** The operator's token for this agent, read for every call. */
  token: () => Promise<string>;
  /** Per exchange, ms (a call's own `timeoutMs` wins). */
  timeoutMs?: number | undefined;
  /** How often a placement's progress is read, ms. */
  pollMs?: number | undefined;
}

const modelPath = (name: string) => `/v1/models/${encodeURIComponent(name)}`;

export class AgentClient {
  private readonly opts: AgentClientOptions;
  private readonly agent: ReplicaEndpoint;

  constructor(opts: AgentClientOptions) {
    this.agent = new ReplicaEndpoint({
      ...opts,
      role: 'agent',
      defaultTimeoutMs: 30_000,
      exceptions: [{ status: 403, kind: 'auth' }],
    });
    this.opts = opts;
  }

  get subject(): string {
    return this.agent.subject;
  }

  /**
   * Asks for `version` of `name` and waits until its files are in place, reporting progress. A version in place
   * already answers at once; a failed download rejects with the agent's reason.
   */
  async place(name: string, version: string, files: ModelFiles, call: RegisterCall): Promise<Placed> {
    const operation = `place ${name} ${version}`;
    call.progress?.(`the agent places ${name} ${version}`);
    const res = await this.agent.send(
      operation,
      'PUT',
      modelPath(name),
      this.body(operation, files, version),
      call,
    );
    if (res.status !== 200 && res.status !== 202) throw this.agent.failure(operation, res);
    for (;;) {
      const v = (await this.versions(name, call)).find((p) => p.version === version);
      if (!v)
        throw this.agent.error(
          operation,
          'retryable',
          `the agent lost version ${version} of ${name} (restarted?)`,
        );
      if (v.state === 'Ready')
        return { directory: v.directory ?? files.directory ?? name, localHit: allLocal(v) };
      if (v.state === 'Failed') {
        const kind = v.reason && TERMINAL_REASONS.has(v.reason) ? 'terminal' : 'retryable';
        // The exchange succeeded: the agent's own download failed (not "network error", as status 0 would say).
        throw this.agent.error(operation, kind, v.error ?? 'the download failed', {
          reason: v.reason,
          where: 'reported by the agent',
        });
      }
      call.progress?.(progressLine(name, v));
      await sleep(this.opts.pollMs ?? 1_000, undefined, { signal: call.signal });
    }
  }

  /** The PUT body, bounded here (not only by the agent's cap) so a large spec never builds in the operator. */
  private body(operation: string, files: ModelFiles, version: string): SerializedJSON {
    try {
      return new SerializedJSON(specBody({ ...files, version }));
    } catch (e) {
      if (!(e instanceof SpecTooLargeError)) throw e;
      throw this.agent.error(operation, 'terminal', e.message, { reason: e.reason });
    }
  }

  /** Every version the agent knows of `name`, running, failed or on disk (empty when none). */
  async versions(name: string, call: Call): Promise<AgentVersion[]> {
    const operation = `list versions of ${name}`;
    const res = await this.agent.send(operation, 'GET', modelPath(name), undefined, call);
    if (res.status === 404) return [];
    if (res.status !== 200) throw this.agent.failure(operation, res);
    const parsed = parseBody(res.text, ModelAnswer);
    if (!parsed.ok) throw this.agent.unusable(operation, res, parsed.problem);
    return parsed.data.versions;
  }

  /** Removes a version's directory (stopping its download); a version the agent does not have is fine. */
  async remove(name: string, version: string, call: Call): Promise<void> {
    const operation = `remove ${name} ${version}`;
    const path = `${modelPath(name)}/versions/${encodeURIComponent(version)}`;
    const res = await this.agent.send(operation, 'DELETE', path, undefined, call);
    if (res.status !== 200 && res.status !== 404) throw this.agent.failure(operation, res);
  }
}

/**
 * The client of the agent beside `replica` (on the replica's host at `access.agent.port`, its token from the
 * Secret `access.agent` names), or undefined when the access names no agent.
 */
export function agentClient(
  secret: SecretValue,
  owner: ReplicaOwner,
  access: ReplicaAccess,
  replica: ReplicaRef,
  dispatcher: Dispatcher,
  pollMs?: number,
): AgentClient | undefined {
  const agent = access.agent;
  if (!agent) return undefined;
  return new AgentClient({
    baseURL: `${agent.scheme ?? 'http'}://${new URL(replica.endpoint).hostname}:${agent.port}`,
    dispatcher,
    token: replicaSecret(secret, owner, replica, agent.tokenSecretRef),
    pollMs,
  });
}

/** Every file a local hit of the node's peer; undefined without file detail. */
export function allLocal(v: AgentVersion): boolean | undefined {
  const files = v.files ?? [];
  if (files.length === 0) return undefined;
  return files.every((f) => f.localHit === true);
}

const MiB = 1024 * 1024;

function progressLine(name: string, v: AgentVersion): string {
  const files = `${v.filesDone ?? 0}/${v.filesTotal ?? '?'} files`;
  const bytes = v.bytesTotal
    ? `, ${((v.bytesDone ?? 0) / MiB).toFixed(1)} of ${(v.bytesTotal / MiB).toFixed(1)} MiB`
    : '';
  const hits = v.localHits ? `, ${v.localHits} local hits` : '';
  return `the agent places ${name} ${v.version}: ${files}${bytes}${hits}`;
}
