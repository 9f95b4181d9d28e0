/**
 * TorchServe with the peerload endpoint plugin as a {@link ModelServerDriver}: the plugin downloads the archive
 * through the node's peer and registers it (`POST /{pluginPath}/models`), the management API describes, scales,
 * switches the default version and unregisters. Credentials: the management key from a Secret, per pod when the
 * key names `{pod}` (token sources kept per replica, {@link ReplicaClients}).
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Dispatcher } from 'undici';
import type {
  Call,
  Failure,
  InferenceAnswer,
  InferenceRequest,
  ModelServerDriver,
  ModelVersion,
  RegisterCall,
  Registered,
  Registration,
  ReplicaAccess,
  ReplicaOwner,
  ReplicaRef,
  ReplicaServer,
} from '../driver.ts';
import type { ModelServerClient } from './client.ts';
import type { RegisterRequest } from './types.ts';
import type { ModelDescription } from './wire.ts';
import { readyWorkers } from './workers.ts';
import { DRIVERS } from '../../api/drivers.ts';
import { inferenceAnswer } from '../driver.ts';
import { failureOf } from '../failure.ts';
import type { SecretValue } from '../secrets.ts';
import { ModelServerError } from './errors.ts';
import { ReplicaClients } from './replica-clients.ts';

export const TORCHSERVE = 'torchserve';

/** How often a registration asks again while the model server downloads the archive for an earlier request. */
const IN_PROGRESS_POLL_MS = 2_000;

export interface TorchServeDriverOptions {
  /** Reads the management key's Secret. */
  secret: SecretValue;
  /** Connection pool toward the replicas (default: the client's shared pool). */
  dispatcher?: Dispatcher | undefined;
}

export class TorchServeDriver implements ModelServerDriver {
  readonly name = TORCHSERVE;
  /** TorchServe registers model archives (.mar, .tar.gz), which the endpoint plugin downloads: never a directory. */
  readonly layouts = DRIVERS.torchserve.layouts;
  readonly scaling = DRIVERS.torchserve.scaling;
  readonly stages = DRIVERS.torchserve.staging === true;
  readonly probes = !('refused' in DRIVERS.torchserve.probe);
  private readonly clients: ReplicaClients;

  constructor(opts: TorchServeDriverOptions) {
    this.clients = new ReplicaClients(opts.secret, opts.dispatcher);
  }

  replica(owner: ReplicaOwner, access: ReplicaAccess, replica: ReplicaRef): ReplicaServer {
    return new TorchServeReplica(this.clients.get(owner, access, replica));
  }

  prune(uid: string, keep?: ReadonlySet<string>): void {
    this.clients.prune(uid, keep);
  }

  refuseLayout(): string {
    return 'TorchServe registers model archives (.mar) that the endpoint plugin downloads, not directories: package the files with torch-model-archiver and set spec.fileName to the archive, or serve the directory with a model server whose driver loads directories';
  }

  failure(err: unknown): Failure | undefined {
    return failureOf(err, ModelServerError);
  }
}

const versionOf = (d: ModelDescription): ModelVersion => ({
  version: d.modelVersion,
  minWorkers: d.minWorkers,
  maxWorkers: d.maxWorkers,
  readyWorkers: readyWorkers(d),
});

/** One replica: the management API through {@link ModelServerClient}. */
export class TorchServeReplica implements ReplicaServer {
  private readonly client: ModelServerClient;

  constructor(client: ModelServerClient) {
    this.client = client;
  }

  async describe(model: string, version: string | undefined, call: Call): Promise<ModelVersion | undefined> {
    // `describe` without a version answers for the default version.
    const found = (await this.client.describeIfPresent(model, version, call))?.[0];
    return found && versionOf(found);
  }

  async versions(model: string, call: Call): Promise<ModelVersion[]> {
    return ((await this.client.describeIfPresent(model, 'all', call)) ?? []).map(versionOf);
  }

  /**
   * The plugin's POST, with 0 workers (they are scaled once the model is registered). While the model server
   * downloads the same archive for an earlier request (an operator that restarted mid-download) the plugin answers
   * "in progress": this waits for that download, looks whether the wanted version got registered, and asks again
   * only when not (the earlier download failed), so no second download starts. `stopping`: the request in flight
   * ends, nothing follows it.
   */
  async register(reg: Registration, call: RegisterCall): Promise<Registered> {
    const req: RegisterRequest = {
      fileName: reg.fileName,
      modelName: reg.modelName,
      initialWorkers: 0,
      ...defined(reg.options),
    };
    const signal = call.signal;
    call.progress?.(`the model server's plugin downloads ${reg.fileName}`);
    for (;;) {
      const result = await this.client.register(req, { signal });
      if (!result.inProgress) return { version: result.version, localHit: result.localHit };
      // Being deleted: the earlier request's download is not ours to wait for.
      if (call.stopping?.aborted)
        throw new Error(`registration of ${req.fileName} stopped: the ServedModel is being deleted`);
      call.progress?.(
        `the model server is downloading ${req.fileName} for an earlier request; waiting for it`,
      );
      await sleep(IN_PROGRESS_POLL_MS, undefined, { signal });
      // Registered meanwhile? Without a wanted version a registered one may be an old one: only the plugin can
      // tell (409). Not registered: asking again answers "in progress" without starting anything, or starts the
      // download when the earlier one failed.
      if (reg.version === undefined) continue;
      const found = await this.describe(reg.modelName, reg.version, { signal });
      if (found) return { version: found.version };
    }
  }

  async scale(
    model: string,
    version: string,
    workers: { min: number; max: number },
    call: Call,
  ): Promise<void> {
    await this.client.scale(model, version, { minWorker: workers.min, maxWorker: workers.max }, call);
  }

  async setDefault(model: string, version: string, call: Call): Promise<void> {
    await this.client.setDefault(model, version, call);
  }

  async unregister(model: string, version: string, call: Call): Promise<void> {
    await this.client.unregister(model, version, call);
  }

  /** The predictions API of `version` on the inference port (the spec's probe.port, which the API requires). */
  async probe(model: string, version: string, req: InferenceRequest, call: Call): Promise<InferenceAnswer> {
    if (req.port === undefined)
      throw new TypeError('a TorchServe probe needs the inference port (probe.port)');
    const res = await this.client.predict(
      model,
      version,
      { port: req.port, body: req.body, maxBytes: req.maxBytes },
      call,
    );
    return inferenceAnswer(res.status, res.text);
  }

  /** Every version: the non-default ones first (TorchServe refuses to drop a default that has siblings). */
  async unregisterAll(model: string, call: Call): Promise<void> {
    const all = await this.client.describeIfPresent(model, 'all', call);
    if (!all) return;
    const def = (await this.client.describeIfPresent(model, undefined, call))?.[0]?.modelVersion;
    const order = [
      ...all.filter((d) => d.modelVersion !== def),
      ...all.filter((d) => d.modelVersion === def),
    ];
    for (const d of order) {
      try {
        await this.client.unregister(model, d.modelVersion, call);
      } catch (err) {
        if (!(err instanceof ModelServerError && err.kind === 'notFound')) throw err;
      }
    }
  }
}

function defined<T extends object>(o: T): Partial<T> {
  return Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<T>;
}
