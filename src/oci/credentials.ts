/**
 * Registry credentials as Kubernetes keeps them: a `kubernetes.io/dockerconfigjson` Secret (`.dockerconfigjson`,
 * the `auths` map docker/podman/modctl login write) or a `username` / `password` Secret. Only the entry of the
 * registry asked for is taken; its values never appear in a message.
 */
import { z } from 'zod';
import { OciError, OciReason } from './errors.ts';

export interface RegistryCredentials {
  username: string;
  password: string;
}

const AuthEntry = z.object({
  auth: z.string().optional(),
  username: z.string().optional(),
  password: z.string().optional(),
  identitytoken: z.string().optional(),
});
const DockerConfig = z.object({ auths: z.record(z.string(), AuthEntry) });

/** The host[:port] a dockerconfigjson key names: keys may be `host`, `https://host`, `https://host/v1/`. */
function keyHost(key: string): string {
  const noScheme = key.replace(/^[a-z][a-z0-9+.-]*:\/\//i, '');
  return noScheme.split('/')[0]!.toLowerCase();
}

/**
 * The credentials of `registry` (host[:port]) in a dockerconfigjson text; undefined when it has no entry for it
 * (anonymous). Throws InvalidCredentials for a document or an entry that cannot be used.
 */
export function dockerConfigCredentials(json: string, registry: string): RegistryCredentials | undefined {
  let parsed: z.infer<typeof DockerConfig>;
  try {
    parsed = DockerConfig.parse(JSON.parse(json));
  } catch {
    throw new OciError(
      OciReason.InvalidCredentials,
      'the registry credentials are not a docker config (JSON with an "auths" map of registry hosts), as a kubernetes.io/dockerconfigjson Secret holds',
    );
  }
  const want = registry.toLowerCase();
  const entry = Object.entries(parsed.auths).find(([k]) => keyHost(k) === want)?.[1];
  if (!entry) return undefined;
  if (entry.username !== undefined && entry.password !== undefined)
    return { username: entry.username, password: entry.password };
  if (entry.auth !== undefined) {
    const decoded = Buffer.from(entry.auth, 'base64').toString('utf8');
    const colon = decoded.indexOf(':');
    if (colon > 0) return { username: decoded.slice(0, colon), password: decoded.slice(colon + 1) };
  }
  throw new OciError(
    OciReason.InvalidCredentials,
    `the docker config entry of ${registry} has neither "auth" (base64 of user:password) nor "username" and "password"${entry.identitytoken !== undefined ? ' (an identity token alone is not supported: log in with a password or a robot account)' : ''}`,
  );
}

/**
 * The credentials in a Secret's decoded data: `.dockerconfigjson` (or `.dockercfg`-less docker config) for
 * `registry`, else `username` and `password`; undefined: anonymous.
 */
export function secretCredentials(
  data: Readonly<Record<string, string>>,
  registry: string,
): RegistryCredentials | undefined {
  const docker = data['.dockerconfigjson'];
  if (docker !== undefined) return dockerConfigCredentials(docker, registry);
  const { username, password } = data;
  if (username !== undefined && password !== undefined) return { username, password };
  throw new OciError(
    OciReason.InvalidCredentials,
    'the registry Secret has neither a .dockerconfigjson key nor username and password keys',
  );
}

/**
 * The credentials in a Secret's `data` as the Kubernetes API returns it (values base64): see
 * {@link secretCredentials}. A trailing newline of `username` / `password` (as `--from-file` leaves) is dropped.
 */
export function base64SecretCredentials(
  data: Readonly<Record<string, string>>,
  registry: string,
): RegistryCredentials | undefined {
  const decoded: Record<string, string> = {};
  for (const [k, v] of Object.entries(data)) {
    const text = Buffer.from(v, 'base64').toString('utf8');
    decoded[k] = k === 'username' || k === 'password' ? text.replace(/\r?\n$/, '') : text;
  }
  return secretCredentials(decoded, registry);
}
