/**
 * Triton's model config as the driver edits it before a load (pure). A load's `config` replaces the repository's
 * config whole (fields it leaves out are not taken from config.pbtxt), so every edit starts from a complete config:
 * the loaded model's (`GET /v2/models/{m}/config`) or the one the registration gives.
 *
 * - Versions: `version_policy: {specific: {versions}}` names exactly the versions to serve, so a rollout loads the
 *   new version beside the old one and the old one goes by a reload without it.
 * - Workers: Triton has one fixed instance count per model (no autoscaling): `workers.max` (at least 1) becomes the
 *   count of its instance group; `workers.min` is kept in the config's `parameters` so that describing the model
 *   gives back the counts that were asked for.
 */
import type { TritonConfig } from './client.ts';

/** Where the asked minimum is kept (Triton hands parameters to the backend, which ignores unknown ones). */
export const MIN_WORKERS_PARAMETER = 'peerload.workers.min';

/** A Triton version: its repository directory's name, a non-negative integer. */
export const TRITON_VERSION = /^(0|[1-9][0-9]{0,17})$/;

export function withVersions(config: TritonConfig, model: string, versions: readonly string[]): TritonConfig {
  const sorted = [...new Set(versions)].map(Number).sort((a, b) => a - b);
  return { ...config, name: model, version_policy: { specific: { versions: sorted } } };
}

/** The instance count and the asked minimum of a config. */
export function workersOf(config: TritonConfig | undefined): { min: number; max: number } {
  const groups = config?.instance_group ?? [];
  const count = groups.length === 0 ? 1 : groups.reduce((n, g) => n + (g.count ?? 1), 0);
  const min = Number(config?.parameters?.[MIN_WORKERS_PARAMETER]?.string_value);
  return { min: Number.isSafeInteger(min) && min >= 0 && min <= count ? min : count, max: count };
}

/** The config with `workers` applied, or a message when it has several instance groups (whose counts are its own). */
export function withWorkers(
  config: TritonConfig,
  workers: { min: number; max: number },
): TritonConfig | string {
  const groups = config.instance_group ?? [];
  if (groups.length > 1)
    return `the model's config has ${groups.length} instance groups: set their counts in its config`;
  const count = Math.max(workers.max, workers.min, 1);
  return {
    ...config,
    instance_group: [{ ...(groups[0] ?? { kind: 'KIND_CPU' }), count }],
    parameters: { ...config.parameters, [MIN_WORKERS_PARAMETER]: { string_value: String(workers.min) } },
  };
}

/** The registration's `config` option: Triton's model config as JSON, used when the model is not loaded yet. */
export function configOption(value: string | number | undefined): TritonConfig | string | undefined {
  if (value === undefined) return undefined;
  try {
    const parsed = JSON.parse(String(value)) as unknown;
    if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) return parsed as TritonConfig;
  } catch {
    // below
  }
  return 'the registration option config must be a JSON object (Triton model config in its JSON form)';
}

/** The newest of some versions, by the servers' own order: numbers as numbers, else as strings. */
export function newest(versions: readonly string[]): string | undefined {
  return [...versions].sort(compareVersions).at(-1);
}

export function compareVersions(a: string, b: string): number {
  const x = Number(a);
  const y = Number(b);
  if (/^\d+$/.test(a) && /^\d+$/.test(b)) return x - y;
  return a < b ? -1 : a > b ? 1 : 0;
}
