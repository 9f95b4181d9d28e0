/**
 * The storage location and credentials of a KServe storage URI from the environment KServe gives its storage
 * initializer: the variables its webhook's credential builder sets from the service account's Secret (or the
 * `storage:` spec's `STORAGE_CONFIG`), read with the names and defaults of KServe's own initializer.
 *
 * - s3: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` (+ `AWS_SESSION_TOKEN`), `AWS_ENDPOINT_URL` (else
 *   `S3_ENDPOINT` with `S3_USE_HTTPS`, `0` meaning http), `AWS_DEFAULT_REGION` (else `AWS_REGION`, default
 *   us-east-1), `S3_USER_VIRTUAL_BUCKET` (`true`: virtual-hosted style; else path style with an endpoint).
 * - gcs: the service account key file `GOOGLE_APPLICATION_CREDENTIALS` names.
 * - abs: `AZURE_STORAGE_ACCESS_KEY`, the account key.
 * Values are never quoted in an error: a variable is named, its value is not.
 */
import { readFile } from 'node:fs/promises';
import {
  CredentialsError,
  credentialsFromSecretData,
  type StorageCredentials,
} from '../storage/credentials.ts';
import type { StorageLocation } from '../storage/objecturl.ts';
import { rememberSecret } from '../redact.ts';
import type { StorageUri } from './uri.ts';

type Env = Readonly<Record<string, string | undefined>>;
type ObjectUri = Extract<StorageUri, { kind: 'object' }>;

/** Keys of KServe's `storage:` spec Secret (`STORAGE_CONFIG`) and the variables they stand for. */
const STORAGE_CONFIG_S3: readonly [string, string][] = [
  ['AWS_ENDPOINT_URL', 'endpoint_url'],
  ['AWS_ACCESS_KEY_ID', 'access_key_id'],
  ['AWS_SECRET_ACCESS_KEY', 'secret_access_key'],
  ['AWS_DEFAULT_REGION', 'region'],
  ['AWS_CA_BUNDLE', 'ca_bundle'],
  ['S3_VERIFY_SSL', 'verify_ssl'],
  ['awsAnonymousCredential', 'anonymous'],
];

function jsonObject(env: Env, name: string): Record<string, unknown> {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    // JSON.parse's message quotes the input, which holds the keys: never pass it on.
    throw new CredentialsError(`${name} is not a JSON object (KServe's storage spec Secret)`, name);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
    throw new CredentialsError(`${name} is not a JSON object (KServe's storage spec Secret)`, name);
  return parsed as Record<string, unknown>;
}

/**
 * The environment with KServe's storage spec applied: `STORAGE_CONFIG` (the Secret's entry) merged with
 * `STORAGE_OVERRIDE_CONFIG`, whose s3 keys set the variables above, as KServe's initializer does first.
 */
export function effectiveEnv(env: Env): Env {
  const config = { ...jsonObject(env, 'STORAGE_CONFIG'), ...jsonObject(env, 'STORAGE_OVERRIDE_CONFIG') };
  if (config['type'] !== 's3') return env;
  const out: Record<string, string | undefined> = { ...env };
  for (const [name, key] of STORAGE_CONFIG_S3) {
    const v = config[key];
    if (v !== undefined && v !== null) out[name] = String(v);
  }
  return out;
}

const truthy = (v: string | undefined) => (v ?? '').toLowerCase() === 'true';

function need(env: Env, name: string, what: string): string {
  const v = env[name];
  if (v === undefined || v === '')
    throw new CredentialsError(
      `${name} is not set: ${what} (KServe sets it from the service account's storage Secret)`,
      name,
    );
  rememberSecret(v);
  return v;
}

/** The S3 endpoint KServe's initializer would call, or undefined for AWS's own regional hosts. */
function s3Endpoint(env: Env): string | undefined {
  let endpoint = env['AWS_ENDPOINT_URL']?.trim();
  if (!endpoint) {
    const host = env['S3_ENDPOINT']?.trim();
    if (host)
      endpoint = /^https?:\/\//i.test(host)
        ? host
        : `${env['S3_USE_HTTPS'] === '0' ? 'http' : 'https'}://${host}`;
  }
  if (!endpoint) return undefined;
  // AWS's legacy global endpoint: the bucket's regional virtual host serves the same objects (and KServe's
  // initializer switches to virtual-hosted style for it outside us-east-1).
  if (/^https:\/\/s3\.amazonaws\.com\/?$/i.test(endpoint)) return undefined;
  return endpoint.replace(/\/+$/, '');
}

/** Where the URI's objects are, as the operator's locations say it (objecturl.ts). */
export function locationOf(uri: ObjectUri, env: Env): StorageLocation {
  switch (uri.type) {
    case 's3': {
      if (truthy(env['S3_USE_ACCELERATE']))
        throw new CredentialsError(
          'S3_USE_ACCELERATE=true is not supported: S3 Transfer Acceleration endpoints are not fetched through the P2P network; unset it',
          'S3_USE_ACCELERATE',
        );
      const endpoint = s3Endpoint(env);
      const region = env['AWS_DEFAULT_REGION'] || env['AWS_REGION'] || undefined;
      return {
        type: 's3',
        bucket: uri.bucket,
        region,
        endpoint,
        pathStyle: endpoint !== undefined && !truthy(env['S3_USER_VIRTUAL_BUCKET']),
      };
    }
    case 'gcs':
      return { type: 'gcs', bucket: uri.bucket };
    case 'abs':
      return {
        type: 'abs',
        accountName: uri.accountName,
        container: uri.container,
        // The classic host is what objecturl.ts builds without an endpoint; the newer DNS zones need it.
        endpoint: /\.blob\.core\.windows\.net$/i.test(uri.endpoint) ? undefined : uri.endpoint,
      };
  }
}

/** The credentials that sign the URI's objects. Throws {@link CredentialsError} naming the variable and the fix. */
export async function credentialsOf(uri: ObjectUri, env: Env): Promise<StorageCredentials> {
  switch (uri.type) {
    case 's3': {
      if (truthy(env['awsAnonymousCredential']))
        throw new CredentialsError(
          'awsAnonymousCredential=true is not supported: a public bucket cannot be listed without keys here; give the object as an http(s):// URI, or keys',
          'awsAnonymousCredential',
        );
      const sessionToken = env['AWS_SESSION_TOKEN'] || undefined;
      rememberSecret(sessionToken);
      return {
        type: 's3',
        accessKeyID: need(env, 'AWS_ACCESS_KEY_ID', 'the S3 access key id'),
        secretAccessKey: need(env, 'AWS_SECRET_ACCESS_KEY', 'the S3 secret access key'),
        sessionToken,
      };
    }
    case 'gcs': {
      const file = env['GOOGLE_APPLICATION_CREDENTIALS'];
      if (!file)
        throw new CredentialsError(
          'GOOGLE_APPLICATION_CREDENTIALS is not set: the service account key file (KServe mounts the GCS Secret and sets it); anonymous GCS reads are not supported',
          'GOOGLE_APPLICATION_CREDENTIALS',
        );
      let json: string;
      try {
        json = await readFile(file, 'utf8');
      } catch (e) {
        throw new CredentialsError(
          `GOOGLE_APPLICATION_CREDENTIALS: cannot read ${file}: ${(e as NodeJS.ErrnoException).code ?? 'error'}`,
          'GOOGLE_APPLICATION_CREDENTIALS',
        );
      }
      rememberSecret(json);
      return credentialsFromSecretData(
        'gcs',
        { 'service_account.json': json },
        { encoding: 'utf8', secretName: `GOOGLE_APPLICATION_CREDENTIALS file ${file}` },
      );
    }
    case 'abs': {
      const key = env['AZURE_STORAGE_ACCESS_KEY'];
      if (!key)
        throw new CredentialsError(
          `AZURE_STORAGE_ACCESS_KEY is not set: the storage account key${env['AZURE_CLIENT_ID'] || env['AZ_CLIENT_ID'] ? ' (service principals are not supported: give the account key)' : ''}`,
          'AZURE_STORAGE_ACCESS_KEY',
        );
      rememberSecret(key);
      const accountKey = key.trim();
      if (!/^[A-Za-z0-9+/]*={0,2}$/.test(accountKey) || accountKey.length % 4 !== 0)
        throw new CredentialsError(
          'AZURE_STORAGE_ACCESS_KEY is not a base64 account key',
          'AZURE_STORAGE_ACCESS_KEY',
        );
      return { type: 'abs', accountKey };
    }
  }
}

/**
 * The request headers of an http(s) URI: the JSON object in the `<host>-headers` variable, as KServe's
 * initializer reads it. Values are remembered as secrets (they are often a token).
 */
export function httpHeaders(url: string, env: Env): Record<string, string> {
  const host = new URL(url).hostname;
  const name = `${host}-headers`;
  const parsed = jsonObject(env, name);
  const out: Record<string, string> = {};
  for (const [k, v] of Object.entries(parsed)) {
    if (typeof v !== 'string')
      throw new CredentialsError(`${name}: header "${k}" must have a string value`, name);
    if (!/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/.test(k) || /^(x-dragonfly-|host$|range$|connection$)/i.test(k))
      throw new CredentialsError(`${name}: "${k}" is not a header this command may send`, name);
    rememberSecret(v);
    out[k] = v;
  }
  return out;
}
