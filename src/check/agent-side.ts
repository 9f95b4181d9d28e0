/**
 * `peerload check --agent-spec`: a model directory downloaded by `peerload agent` / `peerload fetch` (a version
 * spec, src/place/spec.ts) against the ModelPreheats that warm it. Each file of the spec is one download, modelled
 * as the agent sends it (src/place/placer.ts identityHeaders): its object URL signed by the agent
 * (`storage.expiresSeconds`) or the signed URL as given, the spec's filter — else the storage kind's default, else
 * none sent (the daemon's default applies) — and the spec's tag, application and piece length. Each is paired
 * with the preheat item of the same key (or object URL) and compared by compare.ts, whose messages call the
 * download side "plugin": here they say "agent".
 */
import type { ModelVersionSpec } from '../place/spec.ts';
import { specLocation } from '../place/spec.ts';
import { effectiveFilter, objectURL, type StorageLocation } from '../storage/objecturl.ts';
import { DEFAULT_FILTERED_QUERY_PARAMS, type TaskIdRule } from '../storage/taskid.ts';
import { comparePair, type CheckResult } from './compare.ts';
import type { Documents, PreheatItem } from './manifests.ts';
import type { PluginSide } from './plugin-side.ts';
import type { Side } from './side.ts';
import { locationFromURL } from './url-location.ts';

export interface AgentDownload {
  path: string;
  key?: string | undefined;
  side: Side;
}

/** What readManifests/preheatItems need of a download side: the daemon's rule and where URLs are looked up. */
export function agentAsDownloadSide(spec: ModelVersionSpec, rule: TaskIdRule): PluginSide {
  const location: StorageLocation = specLocation(spec) ?? { type: 's3' };
  return { location, rule, filter: [], filterSource: '', sessionToken: false, warnings: [] };
}

/** Every file of the spec as the daemon sees the agent's download of it. */
export function agentDownloads(spec: ModelVersionSpec, rule: TaskIdRule): AgentDownload[] {
  const location = specLocation(spec);
  const own = spec.filter ?? (location ? effectiveFilter(location) : undefined);
  const [filter, filterSource] =
    own !== undefined && own.length > 0
      ? [own, spec.filter !== undefined ? 'spec filter' : `${location!.type} default filter`]
      : [[...DEFAULT_FILTERED_QUERY_PARAMS], "no filter sent: the daemon's default"];
  const common = {
    filter,
    filterSource,
    tag: spec.tag,
    application: spec.application,
    pieceLength: spec.pieceLength,
    rule,
    ruleSource: '--daemon-version',
  };
  return spec.files.map((f) => {
    if (f.key !== undefined) {
      return {
        path: f.path,
        key: f.key,
        side: {
          url: objectURL(location!, f.key),
          signer: { type: location!.type, expiresSeconds: spec.storage!.expiresSeconds, sessionToken: false },
          location,
          key: f.key,
          ...common,
        },
      };
    }
    const found = locationFromURL(f.url!, location);
    return {
      path: f.path,
      key: found?.key,
      side: { url: f.url!, location: found?.location, key: found?.key, ...common },
    };
  });
}

const bare = (url: string) => url.replace(/[?#].*$/, '');

/** Every file of the spec paired with the preheat that warms it, compared. */
export function checkAgentSpec(spec: ModelVersionSpec, rule: TaskIdRule, docs: Documents): CheckResult[] {
  const items: { item: PreheatItem; source: string }[] = docs.preheats.flatMap((p) =>
    p.items.map((item) => ({ item, source: p.source })),
  );
  return agentDownloads(spec, rule).map((d) => {
    const found =
      items.find((i) => d.key !== undefined && i.item.key === d.key) ??
      items.find((i) => bare(i.item.side.url) === bare(d.side.url));
    if (!found)
      return {
        status: 'MISS',
        label: d.path,
        source: `version ${spec.version}`,
        reasons: [
          {
            code: 'notPreheated',
            message: `no ModelPreheat among the manifests warms ${d.key ?? bare(d.side.url)}`,
          },
        ],
      };
    const r = comparePair(d.path, found.source, found.item.side, d.side);
    // compare.ts names the download side "plugin"; this download is the agent's.
    return {
      ...r,
      reasons: r.reasons.map((x) => ({ ...x, message: x.message.replace(/\bplugin(?='s|\b)/g, 'agent') })),
    };
  });
}
