/**
 * vLLM as a {@link ModelServerDriver}, in two modes chosen by the registration:
 * - a LoRA adapter (the registration carries `files`): the `peerload agent` beside the server places the version's
 *   directory through the node's peer, then the driver loads it (`load_inplace` when the name holds another
 *   version, so requests never see the name missing), and unloads it and removes its directories on deletion;
 * - the base model (no `files`): vLLM loads it at start from the directory `peerload fetch` placed in an init
 *   container, so there is nothing to load: the model is there when `/v1/models` names it and `/health` answers.
 *
 * A version is the last segment of the directory vLLM loaded the model from (`<root>/<name>/<version>`, where the
 * agent and `peerload fetch` place it), so `/v1/models` alone says which version a replica holds after any restart
 * of the operator. vLLM has no workers per model (its scaling is `fixed`, src/api/drivers.ts): a model present
 * and healthy has its one worker ready, whatever the operator knew before a restart.
 */
import { posix } from 'node:path';
import type { Dispatcher } from 'undici';
import { DRIVERS, type DriverDeclaration } from '../../api/drivers.ts';
import { AgentClient, agentClient, allLocal } from '../agent-client.ts';
import {
  DEFAULT_MODEL_ROOT,
  type Call,
  type Failure,
  type ModelServerDriver,
  type ModelVersion,
  type RegisterCall,
  type Registered,
  type Registration,
  type ReplicaAccess,
  type ReplicaOwner,
  type ReplicaRef,
  type ReplicaServer,
} from '../driver.ts';
import { ReplicaError } from '../endpoint.ts';
import { failureOf } from '../failure.ts';
import { FIXED_WORKERS, fixedScale } from '../fixed-scale.ts';
import { sharedModelServerPool } from '../pools.ts';
import { replicaSecret, type SecretValue } from '../secrets.ts';
import { VllmClient, type ModelCard } from './client.ts';

export const VLLM = 'vllm';

export interface VllmDriverOptions {
  /** Reads the Secrets of the server's API key and of the agent's token. */
  secret: SecretValue;
  /** Connection pool toward the replicas and their agents (default: the shared one, src/servers/pools.ts). */
  dispatcher?: Dispatcher | undefined;
  /** How often a placement's progress is read, ms (tests). */
  agentPollMs?: number | undefined;
}

export class VllmDriver implements ModelServerDriver {
  readonly name = VLLM;
  /** Adapters are directories the agent places; a base model's directory is the one `peerload fetch` placed. */
  readonly layouts = DRIVERS.vllm.layouts;
  readonly scaling = DRIVERS.vllm.scaling;
  readonly stages: boolean = (DRIVERS.vllm as DriverDeclaration).staging === true;
  private readonly opts: VllmDriverOptions;

  constructor(opts: VllmDriverOptions) {
    this.opts = opts;
  }

  replica(owner: ReplicaOwner, access: ReplicaAccess, replica: ReplicaRef): ReplicaServer {
    const dispatcher = this.opts.dispatcher ?? sharedModelServerPool();
    const vllm = new VllmClient({
      baseURL: replica.endpoint,
      dispatcher,
      token: replicaSecret(this.opts.secret, owner, replica, access.tokenSecretRef),
    });
    const agent = agentClient(this.opts.secret, owner, access, replica, dispatcher, this.opts.agentPollMs);
    return new VllmReplica(vllm, agent, access.agent?.root ?? DEFAULT_MODEL_ROOT);
  }

  /** Nothing is kept per replica: what a replica holds is read from it every time. */
  prune(): void {}

  failure(err: unknown): Failure | undefined {
    return failureOf(err, ReplicaError);
  }
}

/** The version a model card names: the last segment of the directory it was loaded from. */
export function versionOf(card: ModelCard): string {
  const root = card.root?.replace(/\/+$/, '');
  return root ? posix.basename(root) : card.id;
}

/** One replica: vLLM's API and, for adapters, the agent beside it. */
export class VllmReplica implements ReplicaServer {
  private readonly vllm: VllmClient;
  private readonly agent: AgentClient | undefined;
  private readonly root: string;

  constructor(vllm: VllmClient, agent: AgentClient | undefined, root: string) {
    this.vllm = vllm;
    this.agent = agent;
    this.root = root;
  }

  async describe(model: string, version: string | undefined, call: Call): Promise<ModelVersion | undefined> {
    const card = await this.card(model, call);
    if (!card || (version !== undefined && versionOf(card) !== version)) return undefined;
    const held = this.held(versionOf(card), await this.vllm.healthy(call));
    if (card.parent) return held;
    // The base model is never registered (it is there from the start): how its files came is what fetch recorded.
    const localHit = await this.fetchedLocally(model, held.version, call);
    return localHit === undefined ? held : { ...held, localHit };
  }

  /** The version loaded, and for an adapter the other versions the agent holds (a rollout removes them). */
  async versions(model: string, call: Call): Promise<ModelVersion[]> {
    const card = await this.card(model, call);
    const loaded = card && this.held(versionOf(card), await this.vllm.healthy(call));
    const all = loaded ? [loaded] : [];
    if (this.agent && !(card && !card.parent))
      for (const v of await this.agent.versions(model, call))
        if (v.version !== loaded?.version) all.push(this.held(v.version, false));
    return all;
  }

  async register(reg: Registration, call: RegisterCall): Promise<Registered> {
    const name = reg.modelName;
    const cards = await this.vllm.models(call);
    const current = cards.find((c) => c.id === name);
    // The base model: its files (when given) are what `peerload fetch` placed before the server started.
    if (current && !current.parent) {
      const version = versionOf(current);
      return { version, localHit: await this.fetchedLocally(name, version, call) };
    }
    if (!reg.files)
      throw current
        ? this.problem(
            `serve ${name}`,
            'terminal',
            `${name} is an adapter of ${current.parent}: give its files, so the agent places it and the driver loads it`,
          )
        : this.notServed(name, cards);
    if (!this.agent)
      throw this.problem(
        `load ${name}`,
        'terminal',
        'a LoRA adapter is placed by the agent beside vLLM, and this replica names none (its access has no agent port and token)',
      );
    if (reg.version === undefined)
      throw this.problem(
        `load ${name}`,
        'terminal',
        'a LoRA adapter needs its version (spec.version): the agent places it in <root>/<name>/<version>',
      );
    const placed = await this.agent.place(name, reg.version, reg.files, call);
    if (call.stopping?.aborted) throw new Error(`loading ${name} stopped: the ServedModel is being deleted`);
    const path = posix.join(this.root, placed.directory, reg.version);
    const card = await this.card(name, call);
    if (card?.root !== path) {
      call.progress?.(`loading adapter ${name} ${reg.version} from ${path}`);
      try {
        await this.vllm.load(name, path, card !== undefined, call);
      } catch (err) {
        // Loaded by another call since the look above: replace it, as a version change does.
        if (!(err instanceof ReplicaError && err.kind === 'conflict')) throw err;
        await this.vllm.load(name, path, true, call);
      }
    }
    return { version: reg.version, localHit: placed.localHit };
  }

  /** vLLM has one engine for every model it serves: one worker, always (refused otherwise, as admission does). */
  async scale(model: string, _version: string, workers: { min: number; max: number }): Promise<void> {
    const refused = fixedScale(DRIVERS.vllm.server, workers);
    if (refused) throw this.problem(`scale ${model}`, 'terminal', refused);
  }

  async unregister(model: string, version: string, call: Call): Promise<void> {
    const card = await this.card(model, call);
    if (card && !card.parent) return; // the base model stays as long as the server runs
    if (card && versionOf(card) === version) await this.vllm.unload(model, call);
    await this.agent?.remove(model, version, call);
  }

  async unregisterAll(model: string, call: Call): Promise<void> {
    const card = await this.card(model, call);
    if (card && !card.parent) return;
    if (card) await this.vllm.unload(model, call);
    if (this.agent)
      for (const v of await this.agent.versions(model, call)) await this.agent.remove(model, v.version, call);
  }

  /** A name vLLM does not serve, registered without files: neither its base model nor an adapter to load. */
  private notServed(name: string, cards: ModelCard[]): ReplicaError {
    const served = cards.map((c) => c.id).join(', ') || 'none';
    return this.problem(
      `serve ${name}`,
      'notFound',
      `vLLM serves no model named ${name} (it serves ${served}): a base model is the one vLLM starts with (--served-model-name), an adapter needs its files`,
    );
  }

  /**
   * Whether every file of the base model was a local hit of the node's peer when `peerload fetch` placed it: the
   * agent beside the server reads the record fetch left. Undefined without an agent or a record, and when the agent
   * does not answer: the base model is served either way, this is only what status says about its download.
   */
  private async fetchedLocally(name: string, version: string, call: Call): Promise<boolean | undefined> {
    if (!this.agent) return undefined;
    try {
      const placed = (await this.agent.versions(name, call)).find((v) => v.version === version);
      return placed && allLocal(placed);
    } catch {
      return undefined;
    }
  }

  private async card(model: string, call: Call): Promise<ModelCard | undefined> {
    return (await this.vllm.models(call)).find((c) => c.id === model);
  }

  private held(version: string, ready: boolean): ModelVersion {
    return { version, ...FIXED_WORKERS, readyWorkers: ready ? 1 : 0 };
  }

  private problem(operation: string, kind: 'terminal' | 'notFound', detail: string): ReplicaError {
    return this.vllm.problem(operation, kind, detail);
  }
}
