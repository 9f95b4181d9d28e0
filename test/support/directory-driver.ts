/**
 * A model-server driver that loads directories, for integration tests of the ServedModel controller: each replica
 * records every registration it receives (its files as the agent would get them), serves one version of a model
 * (the registration's, default `1`) and starts its workers when scaled.
 */
import type {
  Failure,
  ModelServerDriver,
  ModelVersion,
  Registered,
  Registration,
  ReplicaRef,
  ReplicaServer,
} from '../../src/servers/driver.ts';

export class DirectoryServer implements ReplicaServer {
  readonly models = new Map<string, ModelVersion>();
  readonly registered: Registration[] = [];
  async describe(model: string, version?: string) {
    const v = this.models.get(model);
    return v && (version === undefined || v.version === version) ? v : undefined;
  }
  async versions(model: string) {
    const v = this.models.get(model);
    return v ? [v] : [];
  }
  async register(reg: Registration): Promise<Registered> {
    this.registered.push(structuredClone(reg));
    const version = reg.version ?? '1';
    this.models.set(reg.modelName, { version, minWorkers: 0, maxWorkers: 0, readyWorkers: 0 });
    return { version };
  }
  async scale(model: string, version: string, w: { min: number; max: number }) {
    this.models.set(model, { version, minWorkers: w.min, maxWorkers: w.max, readyWorkers: w.min });
  }
  async unregister(model: string) {
    this.models.delete(model);
  }
  async unregisterAll(model: string) {
    this.models.delete(model);
  }
}

export class DirectoryDriver implements ModelServerDriver {
  readonly name = 'directories';
  readonly layouts = ['directory'] as const;
  readonly servers: Map<string, DirectoryServer>;
  constructor(endpoints: readonly string[]) {
    this.servers = new Map(endpoints.map((e) => [e, new DirectoryServer()]));
  }
  replica(_o: unknown, _a: unknown, r: ReplicaRef): ReplicaServer {
    return this.servers.get(r.endpoint)!;
  }
  prune(): void {}
  failure(): Failure | undefined {
    return undefined;
  }
}
