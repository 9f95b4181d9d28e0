/**
 * Object-storage credentials from a Secret's data map. The keys are the plugin configuration's field names
 * (CREDENTIAL_KEYS in src/api/objectstorage.ts): s3 `access_key`, `secret_key` (+ optional `session_token`);
 * oss `access_key_id`, `access_key_secret`; gcs `service_account.json`; abs `account_key`.
 *
 * Errors name the Secret and the key, never a value: messages of parsers that quote their input (JSON.parse
 * does) are replaced, not wrapped.
 */
import { createPrivateKey } from 'node:crypto';
import { CREDENTIAL_KEYS, type ObjectStorageType } from '../api/objectstorage.ts';

export interface S3Credentials {
  type: 's3';
  accessKeyID: string;
  secretAccessKey: string;
  sessionToken?: string | undefined;
}
export interface OSSCredentials {
  type: 'oss';
  accessKeyID: string;
  accessKeySecret: string;
}
export interface GCSCredentials {
  type: 'gcs';
  clientEmail: string;
  /** PEM (PKCS#8 or PKCS#1) RSA private key of the service account. */
  privateKey: string;
  projectID?: string | undefined;
}
export interface ABSCredentials {
  type: 'abs';
  /** The storage account's shared key, base64. */
  accountKey: string;
}
export type StorageCredentials = S3Credentials | OSSCredentials | GCSCredentials | ABSCredentials;

const S3_SESSION_TOKEN_KEY = 'session_token';

/** A credentials problem; `key` is the Secret key at fault. The message never contains a secret value. */
export class CredentialsError extends Error {
  readonly key: string | undefined;
  constructor(message: string, key?: string) {
    super(message);
    this.name = 'CredentialsError';
    this.key = key;
  }
}

export interface SecretDataOptions {
  /**
   * How the values are encoded: `base64` for a Secret's `data` (the default), `utf8` for `stringData` or values
   * already decoded.
   */
  encoding?: 'base64' | 'utf8';
  /** Used in error messages (`secret "name"`). */
  secretName?: string;
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function where(opts: SecretDataOptions): string {
  return opts.secretName !== undefined ? `secret "${opts.secretName}"` : 'the credentials secret';
}

function reader(data: Readonly<Record<string, string | undefined>> | undefined, opts: SecretDataOptions) {
  const encoding = opts.encoding ?? 'base64';
  const get = (key: string, optional: boolean): string | undefined => {
    const raw = data?.[key];
    if (raw === undefined || raw === '') {
      if (optional) return undefined;
      throw new CredentialsError(`${where(opts)} has no key "${key}"`, key);
    }
    if (encoding === 'utf8') return raw;
    const compact = raw.replace(/\s+/g, '');
    if (!BASE64.test(compact) || compact.length % 4 === 1) {
      throw new CredentialsError(`${where(opts)}: key "${key}" is not valid base64`, key);
    }
    const value = Buffer.from(compact, 'base64').toString('utf8');
    if (value === '') {
      if (optional) return undefined;
      throw new CredentialsError(`${where(opts)}: key "${key}" is empty`, key);
    }
    return value;
  };
  return { need: (key: string) => get(key, false)!, maybe: (key: string) => get(key, true) };
}

function parseServiceAccount(json: string, key: string, opts: SecretDataOptions): GCSCredentials {
  let parsed: unknown;
  try {
    parsed = JSON.parse(json);
  } catch {
    // JSON.parse's message quotes the input around the error: never pass it on.
    throw new CredentialsError(`${where(opts)}: key "${key}" is not valid JSON`, key);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new CredentialsError(`${where(opts)}: key "${key}" is not a JSON object`, key);
  }
  const sa = parsed as Record<string, unknown>;
  const field = (name: string): string => {
    const v = sa[name];
    if (typeof v !== 'string' || v === '') {
      throw new CredentialsError(`${where(opts)}: key "${key}" has no string field "${name}"`, key);
    }
    return v;
  };
  const clientEmail = field('client_email');
  const privateKey = field('private_key');
  try {
    const k = createPrivateKey(privateKey);
    if (k.asymmetricKeyType !== 'rsa') throw new Error('not RSA');
  } catch {
    throw new CredentialsError(
      `${where(opts)}: key "${key}": field "private_key" is not an RSA private key`,
      key,
    );
  }
  const projectID = typeof sa['project_id'] === 'string' ? sa['project_id'] : undefined;
  return { type: 'gcs', clientEmail, privateKey, projectID };
}

/**
 * The credentials of a storage kind from a Secret's data map (base64 values unless `encoding: 'utf8'`).
 * Throws CredentialsError naming the missing or malformed key.
 */
export function credentialsFromSecretData(
  type: ObjectStorageType,
  data: Readonly<Record<string, string | undefined>> | undefined,
  opts: SecretDataOptions = {},
): StorageCredentials {
  const r = reader(data, opts);
  switch (type) {
    case 's3': {
      const [ak, sk] = CREDENTIAL_KEYS.s3 as [string, string];
      return {
        type,
        accessKeyID: r.need(ak),
        secretAccessKey: r.need(sk),
        sessionToken: r.maybe(S3_SESSION_TOKEN_KEY),
      };
    }
    case 'oss': {
      const [id, secret] = CREDENTIAL_KEYS.oss as [string, string];
      return { type, accessKeyID: r.need(id), accessKeySecret: r.need(secret) };
    }
    case 'gcs': {
      const [sa] = CREDENTIAL_KEYS.gcs as [string];
      return parseServiceAccount(r.need(sa), sa, opts);
    }
    case 'abs': {
      const [ak] = CREDENTIAL_KEYS.abs as [string];
      const accountKey = r.need(ak).trim();
      if (!BASE64.test(accountKey) || accountKey.length % 4 !== 0) {
        throw new CredentialsError(`${where(opts)}: key "${ak}" is not a base64 account key`, ak);
      }
      return { type, accountKey };
    }
    default: {
      const unknown: never = type;
      throw new CredentialsError(`unknown object storage type ${String(unknown)}`);
    }
  }
}
