/**
 * MLServer (1.x): every `model-settings.json` under the repository is a model version (its `name` and
 * `parameters.version`), and a load of a name loads every version found and drops the loaded ones no longer found.
 * So a version goes by removing its directory and loading again; the last one by an unload.
 *
 * A version that fails to load is removed again: MLServer loads every version of a name at once, so it would fail
 * every later load of the model.
 *
 * Workers: MLServer runs every model in its server-wide pool of `parallel_workers` and its repository API has no
 * per-model count (its scaling is `fixed`, src/api/drivers.ts). A served version reports one worker; asking for any
 * other count is refused with that reason rather than reported as done.
 */
import type { Call, ModelVersion } from '../driver.ts';
import { FIXED_WORKERS, fixedScale } from '../fixed-scale.ts';
import { OipReplica } from './replica.ts';

export class MLServerReplica extends OipReplica {
  protected describeAll(_model: string, ready: readonly string[]): Promise<ModelVersion[]> {
    return Promise.resolve(ready.map((version) => ({ version, ...FIXED_WORKERS, readyWorkers: 1 })));
  }

  protected versionProblem(): string | undefined {
    return undefined;
  }

  protected notServedHint(): string {
    return 'its model-settings.json must name the model and this version (name, parameters.version)';
  }

  protected async loadVersion(model: string, _version: string, _reg: unknown, call: Call): Promise<void> {
    await this.client.load(model, undefined, call);
  }

  scale(model: string, _version: string, workers: { min: number; max: number }): Promise<void> {
    const refused = fixedScale("MLServer (its models share the server's parallel_workers)", workers);
    return refused ? Promise.reject(this.error('terminal', `scale ${model}`, refused)) : Promise.resolve();
  }

  async unregister(model: string, version: string, call: Call): Promise<void> {
    await this.agent.remove(model, version, call);
    const rest = (await this.agent.versions(model, call)).filter((v) => v.version !== version);
    if (rest.length > 0) await this.client.load(model, undefined, call);
    else await this.client.unload(model, call, true);
  }

  /** A version that does not load would fail every later load of the name: its directory goes. */
  protected override async loadFailed(model: string, version: string, call: Call): Promise<void> {
    await this.unregister(model, version, call);
  }

  protected async unloadAll(model: string, call: Call): Promise<void> {
    await this.client.unload(model, call, true);
  }
}
