/**
 * Will the preheat and the plugin's downloads share a task id?
 *
 * A preheat only helps if the later download through the peer proxy has the same task id, i.e. the same
 * canonical URL after filtering, the same tag, application and piece length (src/storage/taskid.ts). This command
 * takes the plugin's configuration file and ModelPreheat / ServedModel manifests and, for every URL a preheat
 * would warm and every download the plugin would make, says whether their task ids are equal, and when not,
 * precisely why.
 *
 * How each side is modelled, mirroring what goes over the wire:
 * - Plugin (plugin/src/main/java/io/peerload/plugin: PluginConfig, ModelRegistration, ProxyDownloader): it GETs
 *   objectURL(location, file_name) signed (valid 1 h) with X-Dragonfly-Use-P2P: true (without it a daemon whose
 *   proxy.rules do not match sends the download straight to the origin), sends the filter as
 *   X-Dragonfly-Filtered-Query-Params and
 *   X-Dragonfly-Filter (the configured `filter`, else the kind's default; none at all when empty, so the daemon's
 *   default filter applies), and passes every `header` entry through, so X-Dragonfly-Tag / -Application /
 *   -Piece-Length reach the daemon as they are.
 * - Preheat (src/controllers/modelpreheat/request.ts planPreheat): `spec.objectStorage` keys are signed with
 *   effectiveFilter(location) (signedURLExpiry); `spec.url(s)` are preheated as written with
 *   `spec.filteredQueryParams`; an empty or absent filter is not sent, so the manager's default applies
 *   (DEFAULT_FILTERED_QUERY_PARAMS). A ServedModel with `preheat.create` implies the ModelPreheat of
 *   ownedPreheatSpec() (the controller's own function) for `fileName`.
 *
 * Task ids are computed with the rule of the peer daemon's version (`daemon_version` of the plugin configuration,
 * `spec.peerDaemonVersion` of a preheat; default 1.4, the tested Dragonfly v2.5.1). Configurations that make the
 * download bypass P2P altogether are reported as warnings (PluginSide.warnings).
 *
 * Nothing is signed: each side's URL is its unsigned object URL plus the names of the signature parameters its
 * signer adds, each with a symbolic value saying how it varies (every signing, per credential, constant). A
 * signature parameter a side does not filter makes that side's task id change with every signing; this is found by
 * reasoning, not by comparing two random signatures. Credentials are never read, and no secret value of the
 * configuration (keys, header values other than tag, application and piece length) is ever printed.
 *
 * This module pairs the downloads with the preheats; the concerns live beside it: plugin-config.ts (the
 * configuration, read by the plugin's own rules, held to them by test/vectors/plugin-config.json), plugin-side.ts
 * (what the daemon sees of the plugin's downloads), manifests.ts (the preheats' requests), signatures.ts,
 * side.ts, url-location.ts (where a URL points) and compare.ts (the reasons two task ids differ).
 */
import { ModelPreheatSpec } from '../api/index.ts';
import { ownedPreheatSpec } from '../api/servedmodel.ts';
import { comparePair, type CheckResult } from './compare.ts';
import { preheatItems, type Documents } from './manifests.ts';
import type { PluginSide } from './plugin-side.ts';
import { pluginDownload } from './side.ts';
import { decodeSegments } from './url-location.ts';

export { CheckInputError, readText } from './input.ts';
export type { CheckResult } from './compare.ts';
export { readManifests, type Documents } from './manifests.ts';
export { parsePluginConfig } from './plugin-config.ts';
export { pluginSide, type PluginSide } from './plugin-side.ts';
export { SIGNATURE_PARAMS } from './signatures.ts';
export { locationFromURL } from './url-location.ts';

/** Every pair of the manifests, compared. */
export function checkDocuments(plugin: PluginSide, docs: Documents): CheckResult[] {
  const results: CheckResult[] = [];
  const miss = (label: string, source: string, code: string, message: string): CheckResult => ({
    status: 'MISS',
    label,
    source,
    reasons: [{ code, message }],
  });

  for (const { doc, source } of docs.servedModels) {
    const spec = doc.spec;
    // A directory (spec.files) is placed by the agent, not downloaded by the plugin: `--agent-spec` compares those.
    if (spec.fileName === undefined) continue;
    const key = spec.fileName;
    const download = pluginDownload(plugin, key);
    const preheat = spec.preheat;
    if (!preheat) {
      results.push(miss(key, source, 'notPreheated', 'not preheated: spec.preheat is not set'));
      continue;
    }
    if (preheat.create) {
      // The ModelPreheat the controller creates, from its own function.
      const owned = ModelPreheatSpec.parse(ownedPreheatSpec(spec));
      const item = preheatItems(owned, plugin)[0]!;
      results.push(comparePair(key, `${source} (preheat.create)`, item.side, download));
      continue;
    }
    const namespace = doc.metadata.namespace ?? 'default';
    const named = docs.preheats.find((p) => p.name === preheat.name && p.namespace === namespace);
    if (!named) {
      results.push(
        miss(
          key,
          source,
          'preheatNotFound',
          `spec.preheat.name: ModelPreheat ${namespace}/${preheat.name} is not among the given manifests`,
        ),
      );
      continue;
    }
    const item =
      named.items.find((it) => it.key === key) ?? (named.items.length === 1 ? named.items[0] : undefined);
    if (!item) {
      results.push(
        miss(
          key,
          `${source} (preheat.name ${preheat.name})`,
          'key',
          `ModelPreheat ${named.name} does not warm ${key}: it warms ${named.items.map((it) => it.label).join(', ')}`,
        ),
      );
      continue;
    }
    named.used.add(item);
    results.push(comparePair(key, `${source} (preheat.name ${preheat.name})`, item.side, download));
  }

  // The other URLs of the ModelPreheats: compared with the plugin's download of the same key.
  for (const p of docs.preheats) {
    for (const item of p.items) {
      if (p.used.has(item)) continue;
      const key = item.key ?? decodeSegments(new URL(item.side.url).pathname.replace(/^\//, ''));
      results.push(comparePair(item.label, p.source, item.side, pluginDownload(plugin, key)));
    }
  }
  return results;
}
