/**
 * One replica of an OIP repository server with its `peerload agent`: what Triton and MLServer share. A
 * registration has the agent place the version's files into the server's model repository (through the node's
 * peer), then loads it; the server's flavour (triton.ts, mlserver.ts) decides how a version is loaded, scaled and
 * dropped.
 */
import {
  inferenceAnswer,
  type Call,
  type InferenceAnswer,
  type InferenceRequest,
  type ModelVersion,
  type RegisterCall,
  type Registered,
  type Registration,
  type ReplicaServer,
} from '../driver.ts';
import type { AgentClient } from '../agent-client.ts';
import type { IndexEntry, OipClient } from './client.ts';
import type { HttpErrorKind } from '../../http/errors.ts';
import type { ReplicaError } from '../endpoint.ts';
import { newest } from './triton-config.ts';

export abstract class OipReplica implements ReplicaServer {
  protected readonly client: OipClient;
  private readonly agentClient: AgentClient | undefined;

  constructor(client: OipClient, agent: AgentClient | undefined) {
    this.client = client;
    this.agentClient = agent;
  }

  /** The versions of `model` the server serves, with their worker counts. */
  protected abstract describeAll(
    model: string,
    ready: readonly string[],
    call: Call,
  ): Promise<ModelVersion[]>;
  /** A version whose files are in place: make the server serve it (beside the versions it serves); `reg` is the
   *  registration's when there is one (a staged version is loaded without). */
  protected abstract loadVersion(
    model: string,
    version: string,
    reg: Registration | undefined,
    call: Call,
  ): Promise<void>;
  /** A problem with a version name the server cannot have, or undefined. */
  protected abstract versionProblem(version: string): string | undefined;
  abstract scale(
    model: string,
    version: string,
    workers: { min: number; max: number },
    call: Call,
  ): Promise<void>;
  abstract unregister(model: string, version: string, call: Call): Promise<void>;
  /** Stops serving every version (a model the server does not know is fine). */
  protected abstract unloadAll(model: string, call: Call): Promise<void>;

  protected get agent(): AgentClient {
    if (!this.agentClient)
      throw this.error(
        'terminal',
        'use the agent',
        'a directory model needs the peerload agent beside the server: give the agent port and token Secret',
      );
    return this.agentClient;
  }

  /** The versions of `model` in state READY, from the repository index. */
  protected async readyVersions(model: string, call: Call): Promise<string[]> {
    const entries = await this.client.index(call);
    return entries
      .filter((e: IndexEntry) => e.name === model && e.version !== undefined && e.state === 'READY')
      .map((e) => e.version!);
  }

  /**
   * A canary's probe: the Open Inference Protocol's infer of `version` on the replica's endpoint (the HTTP port
   * serves inference beside the repository API, so the spec gives no port).
   */
  async probe(model: string, version: string, req: InferenceRequest, call: Call): Promise<InferenceAnswer> {
    const res = await this.client.infer(model, version, req.body, req.maxBytes, call);
    return inferenceAnswer(res.status, res.text);
  }

  async versions(model: string, call: Call): Promise<ModelVersion[]> {
    const ready = await this.readyVersions(model, call);
    return ready.length === 0 ? [] : this.describeAll(model, ready, call);
  }

  /** Without `version`: the newest version served (the one a request without a version reaches). */
  async describe(model: string, version: string | undefined, call: Call): Promise<ModelVersion | undefined> {
    const all = await this.versions(model, call);
    const wanted = version ?? newest(all.map((v) => v.version));
    return all.find((v) => v.version === wanted);
  }

  async register(reg: Registration, call: RegisterCall): Promise<Registered> {
    const { version, localHit } = await this.place(reg, call);
    if (call.stopping?.aborted)
      throw new Error(`registration of ${reg.modelName} stopped: the ServedModel is being deleted`);
    call.progress?.(`loading ${reg.modelName} ${version}`);
    const short = { signal: call.signal };
    try {
      await this.loadPlaced(reg.modelName, version, reg, short);
    } catch (err) {
      await this.loadFailed(reg.modelName, version, short).catch(() => undefined);
      throw err;
    }
    return { version, localHit };
  }

  /** The version's files placed by the agent, nothing loaded (the first half of a registration). */
  protected async place(reg: Registration, call: RegisterCall): Promise<Registered & { version: string }> {
    const operation = `register ${reg.modelName}`;
    if (!reg.files)
      throw this.error(
        'terminal',
        operation,
        'this server takes a directory: give the model files, not an archive',
      );
    const version = reg.version;
    if (version === undefined)
      throw this.error('terminal', operation, 'a directory model needs its version (spec.version)');
    const problem = this.versionProblem(version);
    if (problem) throw this.error('terminal', operation, problem);
    const placed = await this.agent.place(reg.modelName, version, reg.files, call);
    return { version, localHit: placed.localHit };
  }

  /** A placed version loaded, and serving (the second half). */
  protected async loadPlaced(
    model: string,
    version: string,
    reg: Registration | undefined,
    call: Call,
  ): Promise<void> {
    await this.loadVersion(model, version, reg, call);
    if (!(await this.client.ready(model, version, call)))
      throw this.error(
        'terminal',
        `load ${model}`,
        `${model} was loaded but its version ${version} does not serve: ${this.notServedHint()}`,
      );
  }

  /** The versions of `model` whose files the agent holds in full. */
  protected async placedVersions(model: string, call: Call): Promise<string[]> {
    return (await this.agent.versions(model, call)).filter((v) => v.state === 'Ready').map((v) => v.version);
  }

  /** A placed version that did not load: what must go so the model's other versions keep loading. */
  protected loadFailed(_model: string, _version: string, _call: Call): Promise<void> {
    return Promise.resolve();
  }

  /** Why a loaded version may not serve, for the message. */
  protected abstract notServedHint(): string;

  async unregisterAll(model: string, call: Call): Promise<void> {
    await this.unloadAll(model, call);
    for (const v of await this.agent.versions(model, call)) await this.agent.remove(model, v.version, call);
  }

  protected error(kind: HttpErrorKind, operation: string, message: string): ReplicaError {
    return this.client.server.error(operation, kind, message);
  }
}
