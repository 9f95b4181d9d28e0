/**
 * Triton Inference Server (2.x, `--model-control-mode=explicit`): versions are the model directory's numbered
 * subdirectories, and which of them serve is the config's `version_policy`, set by every load (triton-config.ts).
 * A rollout loads the new version beside the old one; the old one goes by a reload without it; the last one by an
 * unload. Worker counts are the instance group's count, set by a reload with the edited config.
 *
 * The newest loaded version answers requests without a version, so a load is a switch: a Staged rollout has the agent
 * place the new version's files only (`staging.place`) and loads them at the switch (`staging.load`); Triton keeps
 * the loaded versions serving while the new one loads, and when it fails to (the failed version shows UNAVAILABLE
 * with its reason in the index).
 */
import type { Call, ModelVersion, Registration, Staging } from '../driver.ts';
import type { TritonConfig } from './client.ts';
import { OipReplica } from './replica.ts';
import {
  TRITON_VERSION,
  compareVersions,
  configOption,
  withVersions,
  withWorkers,
  workersOf,
} from './triton-config.ts';

export class TritonReplica extends OipReplica {
  readonly staging: Staging = {
    place: async (reg, call) => {
      // The newest loaded version serves: one numbered below a served one would never be switched to.
      const newer = reg.version === undefined ? [] : await this.servedAbove(reg.modelName, reg.version, call);
      if (newer.length > 0)
        throw this.error(
          'terminal',
          `stage ${reg.modelName} ${reg.version}`,
          `Triton serves the newest loaded version, and ${newer.join(', ')} is above ${reg.version}: a Staged rollout needs a version numbered above the one served (or roll out with strategy Rolling)`,
        );
      return this.place(reg, call);
    },
    placed: (model, call) => this.placedVersions(model, call),
    load: (model, version, call) => this.loadPlaced(model, version, undefined, call),
  };

  protected async describeAll(model: string, ready: readonly string[], call: Call): Promise<ModelVersion[]> {
    const workers = workersOf(await this.client.config(model, call));
    return ready.map((version) => ({
      version,
      minWorkers: workers.min,
      maxWorkers: workers.max,
      readyWorkers: workers.max,
    }));
  }

  private async servedAbove(model: string, version: string, call: Call): Promise<string[]> {
    if (!TRITON_VERSION.test(version)) return [];
    return (await this.readyVersions(model, call)).filter((v) => compareVersions(v, version) > 0);
  }

  protected versionProblem(version: string): string | undefined {
    return TRITON_VERSION.test(version)
      ? undefined
      : `Triton versions are numbered directories: spec.version "${version}" is not a non-negative integer`;
  }

  protected notServedHint(): string {
    return "is the agent root the server's --model-repository, and the model's directory its name?";
  }

  /**
   * The config to load from: the loaded model's (it carries earlier edits), else the registration's `config`
   * option, else none (Triton reads config.pbtxt or completes one from the model files).
   */
  private async baseConfig(model: string, reg: Registration | undefined, call: Call) {
    const loaded = await this.client.config(model, call);
    if (loaded) return loaded;
    const option = configOption(reg?.options['config']);
    if (typeof option === 'string') throw this.error('terminal', `load ${model}`, option);
    return option;
  }

  protected async loadVersion(
    model: string,
    version: string,
    reg: Registration | undefined,
    call: Call,
  ): Promise<void> {
    const ready = await this.readyVersions(model, call);
    let base: TritonConfig | undefined = await this.baseConfig(model, reg, call);
    if (!base) {
      // The repository's own config, under its own version policy; then the policy is made explicit.
      await this.client.load(model, undefined, call);
      if (ready.length === 0 && (await this.readyVersions(model, call)).join() === version) return;
      base = await this.client.config(model, call);
      if (!base) throw this.error('notFound', `load ${model}`, `${model} did not load`);
    }
    await this.client.load(model, withVersions(base, model, [...ready, version]), call);
  }

  async scale(
    model: string,
    _version: string,
    workers: { min: number; max: number },
    call: Call,
  ): Promise<void> {
    const config = await this.client.config(model, call);
    if (!config) throw this.error('notFound', `scale ${model}`, `${model} is not loaded`);
    const edited = withWorkers(config, workers);
    if (typeof edited === 'string') throw this.error('terminal', `scale ${model}`, edited);
    const ready = await this.readyVersions(model, call);
    await this.client.load(model, ready.length ? withVersions(edited, model, ready) : edited, call);
  }

  async unregister(model: string, version: string, call: Call): Promise<void> {
    const ready = await this.readyVersions(model, call);
    if (ready.includes(version)) {
      const rest = ready.filter((v) => v !== version);
      const config = rest.length ? await this.client.config(model, call) : undefined;
      if (config) await this.client.load(model, withVersions(config, model, rest), call);
      else await this.client.unload(model, call);
    }
    await this.agent.remove(model, version, call);
  }

  protected async unloadAll(model: string, call: Call): Promise<void> {
    // Triton answers 200 for a model it does not know.
    await this.client.unload(model, call);
  }
}
