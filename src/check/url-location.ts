/** What a URL or a storage location says about where an object lives, for matching and explaining. */
import type { ObjectStorageType } from '../api/index.ts';
import { DEFAULT_S3_REGION, parseEndpoint, type StorageLocation } from '../storage/objecturl.ts';

export const stripQuery = (url: string) => url.replace(/[?#].*$/, '');

/** The facts of a URL that decide its identity, for explaining a difference. */
export interface Facts {
  kind?: ObjectStorageType;
  scheme: string;
  /** `host[:port]` of the service endpoint, or a description of the provider default. */
  endpoint: string;
  region?: string;
  hostStyle?: 'virtual-hosted' | 'path style';
  account?: string;
  bucket?: string;
  container?: string;
  key?: string;
}

/** The scheme and `host[:port]` of a location's endpoint (https and none for the provider's own). */
function endpointOf(location: StorageLocation): { scheme: string; authority?: string } {
  if (location.endpoint === undefined) return { scheme: 'https' };
  const { scheme, authority } = parseEndpoint(location.endpoint);
  return { scheme, authority };
}

export function factsOf(location: StorageLocation, key: string): Facts {
  const ep = endpointOf(location);
  const f: Facts = { kind: location.type, scheme: ep.scheme, endpoint: ep.authority ?? '', key };
  switch (location.type) {
    case 's3':
      f.endpoint = ep.authority ?? '(none: AWS S3)';
      f.hostStyle =
        ep.authority !== undefined && location.pathStyle === true ? 'path style' : 'virtual-hosted';
      if (ep.authority === undefined) f.region = location.region || DEFAULT_S3_REGION;
      f.bucket = location.bucket;
      break;
    case 'oss':
      f.bucket = location.bucket;
      break;
    case 'gcs':
      f.endpoint = ep.authority ?? '(none: storage.googleapis.com)';
      f.bucket = location.bucket;
      break;
    case 'abs':
      f.endpoint = ep.authority ?? '(none: <account>.blob.core.windows.net)';
      f.account = location.accountName;
      f.container = location.container;
      break;
  }
  return f;
}

export function decodeSegments(path: string): string {
  return path
    .split('/')
    .map((s) => {
      try {
        return decodeURIComponent(s);
      } catch {
        return s;
      }
    })
    .join('/');
}

/** A URL cut into what the location rules look at. */
interface UrlParts {
  u: URL;
  scheme: string;
  /** Lower case, without the port. */
  host: string;
  /** Without the query and the leading '/'. */
  path: string;
  first: string;
  restSegs: string[];
  rest: string;
  /** An endpoint of the URL's scheme at `authority`. */
  ep: (authority: string) => string;
}

/**
 * The storage location and key a preheat URL points at: the providers' own host forms first, then the plugin's
 * endpoint (`hint`) in path or host style. Undefined when the URL fits none of them.
 */
export function locationFromURL(
  url: string,
  hint?: StorageLocation,
): { location: StorageLocation; key: string } | undefined {
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return undefined;
  }
  const scheme = u.protocol.replace(/:$/, '');
  const path = stripQuery(url).replace(/^[a-z]+:\/\/[^/]*\/?/i, '');
  const [first = '', ...restSegs] = path.split('/');
  const parts: UrlParts = {
    u,
    scheme,
    host: u.hostname.toLowerCase(),
    path,
    first,
    restSegs,
    rest: restSegs.join('/'),
    ep: (authority) => `${scheme}://${authority}`,
  };
  return (
    providerLocation(parts) ?? (hint?.endpoint === undefined ? undefined : endpointLocation(parts, hint))
  );
}

/** A URL in one of the providers' own host forms (AWS, Alibaba Cloud, Google Cloud, Azure). */
function providerLocation(parts: UrlParts): { location: StorageLocation; key: string } | undefined {
  const { u, scheme, host, path, first, rest, ep } = parts;
  let m: RegExpExecArray | null;
  if ((m = /^(.+)\.s3\.amazonaws\.com$/.exec(host))) {
    return {
      location: { type: 's3', bucket: m[1]!, endpoint: ep('s3.amazonaws.com') },
      key: decodeSegments(path),
    };
  }
  if (scheme === 'https' && !u.port && (m = /^(.+)\.s3[.-]([a-z0-9-]+)\.amazonaws\.com$/.exec(host))) {
    return { location: { type: 's3', bucket: m[1]!, region: m[2]! }, key: decodeSegments(path) };
  }
  if ((m = /^s3[.-]([a-z0-9-]+)\.amazonaws\.com$/.exec(host)) || host === 's3.amazonaws.com') {
    return {
      location: {
        type: 's3',
        bucket: decodeSegments(first),
        region: m?.[1],
        endpoint: ep(u.host),
        pathStyle: true,
      },
      key: decodeSegments(rest),
    };
  }
  if ((m = /^([^.]+)\.(oss-[a-z0-9-]+(?:\.[a-z0-9-]+)*\.aliyuncs\.com)$/.exec(host))) {
    return {
      location: { type: 'oss', bucket: m[1]!, endpoint: ep(u.port ? `${m[2]}:${u.port}` : m[2]!) },
      key: decodeSegments(path),
    };
  }
  if (host === 'storage.googleapis.com' && scheme === 'https' && !u.port) {
    return { location: { type: 'gcs', bucket: decodeSegments(first) }, key: decodeSegments(rest) };
  }
  if (scheme === 'https' && !u.port && (m = /^([a-z0-9]{3,24})\.blob\.core\.windows\.net$/.exec(host))) {
    return {
      location: { type: 'abs', accountName: m[1]!, container: decodeSegments(first) },
      key: decodeSegments(rest),
    };
  }
  return undefined;
}

/** A URL on the plugin's endpoint (`hint`), path style or with the bucket in the host. */
function endpointLocation(
  parts: UrlParts,
  hint: StorageLocation,
): { location: StorageLocation; key: string } | undefined {
  const { u, host, path, first, restSegs, rest, ep } = parts;
  const hintAuthority = endpointOf(hint).authority!.toLowerCase();
  const authority = u.host.toLowerCase();
  if (authority === hintAuthority) {
    switch (hint.type) {
      case 's3':
        return {
          location: {
            type: 's3',
            bucket: decodeSegments(first),
            region: hint.region,
            endpoint: ep(u.host),
            pathStyle: true,
          },
          key: decodeSegments(rest),
        };
      case 'gcs':
        return {
          location: { type: 'gcs', bucket: decodeSegments(first), endpoint: ep(u.host) },
          key: decodeSegments(rest),
        };
      case 'abs': {
        if (host.startsWith(`${hint.accountName!.toLowerCase()}.`)) {
          return {
            location: {
              type: 'abs',
              accountName: hint.accountName,
              container: decodeSegments(first),
              endpoint: ep(u.host),
            },
            key: decodeSegments(rest),
          };
        }
        const [container = '', ...keySegs] = restSegs;
        return {
          location: {
            type: 'abs',
            accountName: decodeSegments(first),
            container: decodeSegments(container),
            endpoint: ep(u.host),
          },
          key: decodeSegments(keySegs.join('/')),
        };
      }
      default:
        return undefined;
    }
  }
  if ((hint.type === 's3' || hint.type === 'oss') && authority.endsWith(`.${hintAuthority}`)) {
    return {
      location: {
        type: hint.type,
        bucket: u.host.slice(0, u.host.length - hintAuthority.length - 1),
        region: hint.region,
        endpoint: ep(u.host.slice(u.host.length - hintAuthority.length)),
      },
      key: decodeSegments(path),
    };
  }
  return undefined;
}
