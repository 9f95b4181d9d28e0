/**
 * What the plugin's downloads look like to the peer daemon (ProxyDownloader): the filter it applies, the task-id
 * parts of the configured headers, and why the downloads might not go through P2P at all.
 */
import type { StorageLocation } from '../storage/objecturl.ts';
import { parseEndpoint } from '../storage/objecturl.ts';
import {
  APPLICATION_HEADER,
  DEFAULT_FILTERED_QUERY_PARAMS,
  PIECE_LENGTH_HEADER,
  TAG_HEADER,
  parsePieceLength,
  type TaskIdRule,
} from '../storage/taskid.ts';
import { DEFAULT_ADDR, type PluginConfig } from './plugin-config.ts';

/** The plugin's signed-URL validity (ObjectStorage.DEFAULT_EXPIRY in the Java plugin). */
export const PLUGIN_SIGNED_URL_EXPIRY_SECONDS = 3600;

/** What the plugin's downloads look like to the peer daemon. */
export interface PluginSide {
  location: StorageLocation;
  /** The filter as the daemon applies it. */
  filter: string[];
  /** Where the filter comes from, for messages. */
  filterSource: string;
  tag?: string | undefined;
  application?: string | undefined;
  pieceLength?: number | undefined;
  sessionToken: boolean;
  /** How the plugin's peer daemon computes task ids (`daemon_version`). */
  rule: TaskIdRule;
  /** Why downloads might not go through P2P at all (a preheat would then never be used). */
  warnings: string[];
}

/**
 * The plugin's downloads as the daemon sees them. The plugin sends its filter in the filter headers; an empty
 * filter sends none, so the daemon's own default applies. Header values pass through as configured.
 */
export function pluginSide(config: PluginConfig): PluginSide {
  const header = (wanted: string) => {
    const hit = Object.entries(config.headers).find(([k]) => k.toLowerCase() === wanted.toLowerCase());
    return hit === undefined || hit[1] === '' ? undefined : hit[1];
  };
  const { filter, location } = config;
  return {
    rule: config.rule,
    warnings: bypassWarnings(config),
    location,
    ...(filter.length > 0
      ? {
          filter,
          filterSource: config.filterConfigured ? 'config filter' : `${location.type} default filter`,
        }
      : { filter: [...DEFAULT_FILTERED_QUERY_PARAMS], filterSource: "empty filter: the daemon's default" }),
    tag: header(TAG_HEADER),
    application: header(APPLICATION_HEADER),
    pieceLength: parsePieceLength(header(PIECE_LENGTH_HEADER)),
    sessionToken: config.sessionToken,
  };
}

/**
 * Configurations whose downloads do not go through the peer daemon's P2P network. The plugin itself always sends
 * X-Dragonfly-Use-P2P: true, so what is left is a proxy address that is not a peer daemon.
 */
function bypassWarnings(config: PluginConfig): string[] {
  if (!config.addrConfigured) {
    return [
      `addr is not set: the plugin uses the peer proxy at ${DEFAULT_ADDR}, which must be a peer daemon in the model server's network namespace (e.g. a hostNetwork DaemonSet); otherwise no download goes through P2P`,
    ];
  }
  const proxy = parseEndpoint(config.addr); // normalised to http://host:port by the configuration
  if (config.location.endpoint !== undefined) {
    const origin = parseEndpoint(config.location.endpoint);
    const port = origin.port || (origin.scheme === 'https' ? '443' : '80');
    if (`${origin.host}:${port}` === `${proxy.host}:${proxy.port}`) {
      return [
        `addr ${proxy.host}:${proxy.port} is the object storage endpoint itself, not a peer daemon's proxy: every download goes straight to the origin and no preheat is used`,
      ];
    }
  }
  return [];
}
