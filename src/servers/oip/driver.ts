/**
 * Model servers with the Open Inference Protocol's repository API, Triton and MLServer, as
 * {@link ModelServerDriver}s: a model is a directory that the `peerload agent` beside the server places into the
 * server's model repository through the node's peer (the registration's {@link ModelFiles}), then the driver loads
 * it (`POST /v2/repository/models/{m}/load`) and reads what serves from the repository index.
 *
 * A replica's access: the server at the replica's endpoint (a bearer token only when `tokenSecretRef` is given,
 * for a proxy in front of it: neither server checks one itself), the agent at the same host on `agent.port` with
 * the token of `agent.tokenSecretRef` (`{pod}` in its key: a per-pod token).
 */
import type { Dispatcher } from 'undici';
import type {
  Failure,
  ModelServerDriver,
  ReplicaAccess,
  ReplicaOwner,
  ReplicaRef,
  ReplicaServer,
} from '../driver.ts';
import { sharedModelServerAgent } from '../torchserve/agent.ts';
import type { SecretValue } from '../torchserve/replica-clients.ts';
import { AgentClient, AgentError } from '../agent-client.ts';
import { OipClient } from './client.ts';
import { OipError, serverKind } from './errors.ts';
import { Endpoint } from './http.ts';
import { MLServerReplica } from './mlserver.ts';
import { TritonReplica } from './triton.ts';

export const TRITON = 'triton';
export const MLSERVER = 'mlserver';
export type OipFlavour = typeof TRITON | typeof MLSERVER;

export interface OipDriverOptions {
  /** Reads the agent's (and the server's, when given) token from its Secret. */
  secret: SecretValue;
  dispatcher?: Dispatcher | undefined;
  /** How often a registration reads the agent's progress (tests: less). */
  placePollMs?: number | undefined;
}

export class OipDriver implements ModelServerDriver {
  readonly name: OipFlavour;
  /** Both load model directories that the agent places: never one archive. */
  readonly layouts = ['directory'] as const;
  private readonly opts: OipDriverOptions;

  constructor(flavour: OipFlavour, opts: OipDriverOptions) {
    this.name = flavour;
    this.opts = opts;
  }

  replica(owner: ReplicaOwner, access: ReplicaAccess, replica: ReplicaRef): ReplicaServer {
    const dispatcher = this.opts.dispatcher ?? sharedModelServerAgent();
    const tokenOf = (ref: { name: string; key: string } | undefined) => {
      if (!ref) return undefined;
      const key = ref.key.replaceAll('{pod}', replica.pod ?? '');
      return () => this.opts.secret(owner.namespace, { name: ref.name, key });
    };
    const server = new Endpoint({
      baseURL: replica.endpoint,
      role: 'model server',
      dispatcher,
      token: tokenOf(access.tokenSecretRef),
      kind: serverKind,
    });
    let agent: AgentClient | undefined;
    if (access.agent) {
      const url = new URL(replica.endpoint);
      agent = new AgentClient({
        baseURL: `${access.agent.scheme ?? 'http'}://${url.hostname}:${access.agent.port}`,
        dispatcher,
        token: tokenOf(access.agent.tokenSecretRef)!,
        pollMs: this.opts.placePollMs,
      });
    }
    const client = new OipClient(server);
    return this.name === TRITON ? new TritonReplica(client, agent) : new MLServerReplica(client, agent);
  }

  refuseLayout(): string {
    const server = this.name === TRITON ? 'Triton' : 'MLServer';
    return `${server} loads a model directory that the peerload agent beside it places, not one archive: set spec.files (the version's directory) instead of spec.fileName`;
  }

  /** Nothing is kept per replica: tokens are read from their Secret per call (the reader caches them). */
  prune(): void {}

  failure(err: unknown): Failure | undefined {
    if (!(err instanceof OipError || err instanceof AgentError)) return undefined;
    return { kind: err.kind, retryable: err.retryable, message: err.message };
  }
}
