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
import { DRIVERS, type DriverDeclaration } from '../../api/drivers.ts';
import type {
  Failure,
  ModelServerDriver,
  ReplicaAccess,
  ReplicaOwner,
  ReplicaRef,
  ReplicaServer,
} from '../driver.ts';
import { agentClient } from '../agent-client.ts';
import { ReplicaEndpoint, ReplicaError } from '../endpoint.ts';
import { failureOf } from '../failure.ts';
import { sharedModelServerPool } from '../pools.ts';
import { replicaSecret, type SecretValue } from '../secrets.ts';
import { OipClient } from './client.ts';
import { OIP_STATUS_EXCEPTIONS } from './errors.ts';
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
  readonly layouts: ModelServerDriver['layouts'];
  readonly scaling: ModelServerDriver['scaling'];
  readonly stages: boolean;
  /** Both answer the Open Inference Protocol's infer of one version (OipReplica.probe). */
  readonly probes: boolean;
  private readonly opts: OipDriverOptions;

  constructor(flavour: OipFlavour, opts: OipDriverOptions) {
    this.name = flavour;
    this.layouts = DRIVERS[flavour].layouts;
    this.scaling = DRIVERS[flavour].scaling;
    this.stages = (DRIVERS[flavour] as DriverDeclaration).staging === true;
    this.probes = !('refused' in (DRIVERS[flavour] as DriverDeclaration).probe);
    this.opts = opts;
  }

  replica(owner: ReplicaOwner, access: ReplicaAccess, replica: ReplicaRef): ReplicaServer {
    const dispatcher = this.opts.dispatcher ?? sharedModelServerPool();
    const server = new ReplicaEndpoint({
      baseURL: replica.endpoint,
      role: 'model server',
      dispatcher,
      token: replicaSecret(this.opts.secret, owner, replica, access.tokenSecretRef),
      defaultTimeoutMs: 30_000,
      exceptions: OIP_STATUS_EXCEPTIONS,
    });
    const agent = agentClient(this.opts.secret, owner, access, replica, dispatcher, this.opts.placePollMs);
    const client = new OipClient(server);
    return this.name === TRITON ? new TritonReplica(client, agent) : new MLServerReplica(client, agent);
  }

  refuseLayout(): string {
    const server = DRIVERS[this.name].server;
    return `${server} loads a model directory that the peerload agent beside it places, not one archive: set spec.files (the version's directory) instead of spec.fileName`;
  }

  /** Nothing is kept per replica: tokens are read from their Secret per call (the reader caches them). */
  prune(): void {}

  failure(err: unknown): Failure | undefined {
    return failureOf(err, ReplicaError);
  }
}
