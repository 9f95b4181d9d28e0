/** One side of a pair (the preheat's request or the plugin's download) as the daemon sees it. */
import type { ObjectStorageType } from '../api/index.ts';
import { appendQuery, objectURL, type StorageLocation } from '../storage/objecturl.ts';
import type { TaskIdRule } from '../storage/taskid.ts';
import { PLUGIN_SIGNED_URL_EXPIRY_SECONDS, type PluginSide } from './plugin-side.ts';
import { SIGNATURE_PARAMS } from './signatures.ts';

export type SideName = 'preheat' | 'plugin';

/** One side's request as the daemon sees it, with what is known about how it was made. */
export interface Side {
  /** The URL without signature (an object URL), or the preheat URL as written. */
  url: string;
  /** The signer of this side, when it signs (`expiresSeconds` for `expiry` parameters). */
  signer?: { type: ObjectStorageType; expiresSeconds: number; sessionToken: boolean } | undefined;
  location?: StorageLocation | undefined;
  key?: string | undefined;
  filter: string[];
  filterSource: string;
  tag?: string | undefined;
  application?: string | undefined;
  pieceLength?: number | undefined;
  /** The task id rule of the daemon that computes this side's id. */
  rule: TaskIdRule;
  /** Where the rule comes from, for messages. */
  ruleSource: string;
}

/** The side's URL with symbolic signature values (`<signing:preheat>` differs from `<signing:plugin>`). */
export function symbolicURL(side: Side, who: SideName): string {
  if (!side.signer) return side.url;
  const params: [string, string][] = [];
  for (const p of SIGNATURE_PARAMS[side.signer.type]) {
    if (p.varies === 'session' && !side.signer.sessionToken) continue;
    const value =
      p.varies === 'constant'
        ? p.value!
        : p.varies === 'expiry'
          ? String(side.signer.expiresSeconds)
          : `<${p.varies}:${who}>`;
    params.push([p.name, value]);
  }
  return appendQuery(side.url, params);
}

/** The download the plugin makes for `key`. */
export function pluginDownload(plugin: PluginSide, key: string): Side {
  return {
    url: objectURL(plugin.location, key),
    signer: {
      type: plugin.location.type,
      expiresSeconds: PLUGIN_SIGNED_URL_EXPIRY_SECONDS,
      sessionToken: plugin.sessionToken,
    },
    location: plugin.location,
    key,
    filter: plugin.filter,
    filterSource: plugin.filterSource,
    rule: plugin.rule,
    ruleSource: 'daemon_version',
    tag: plugin.tag,
    application: plugin.application,
    pieceLength: plugin.pieceLength,
  };
}
