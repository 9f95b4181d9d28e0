import { createPrivateKey } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import {
  credentialTag,
  hubTokenTag,
  registryCredentialTag,
  taskTag,
} from '../../src/storage/credential-tag.ts';
import { credentialsFromSecretData, type StorageCredentials } from '../../src/storage/credentials.ts';
import type { ObjectStorageType } from '../../src/api/objectstorage.ts';

const storage = JSON.parse(readFileSync('test/vectors/object-storage.json', 'utf8')) as {
  credentialSets: Record<string, Record<string, string>>;
};
const vectors = JSON.parse(readFileSync('test/vectors/credential-tag.json', 'utf8')) as {
  cases: { credentials: string; location: { type: ObjectStorageType; bucket?: string }; tag: string }[];
  joined: { tag: string | null; credential: string | null; expected: string }[];
};
const creds = (set: string, type: ObjectStorageType): StorageCredentials =>
  credentialsFromSecretData(type, storage.credentialSets[set], { encoding: 'utf8' });

describe('the credential tag of a private object', () => {
  it.each(vectors.cases.map((c) => [`${c.credentials} ${JSON.stringify(c.location)}`, c] as const))(
    'is the shared vector for %s',
    (_name, c) => {
      expect(credentialTag(c.location, creds(c.credentials, c.location.type))).toBe(c.tag);
    },
  );

  it("is Python's HMAC-SHA256 of the published rule (an anchor computed outside this implementation)", () => {
    // python3: 'peerload-' + hmac.new(secret, b'peerload task tag v1\ns3\nmodels', sha256).hexdigest()[:32]
    expect(credentialTag({ type: 's3', bucket: 'models' }, creds('s3', 's3'))).toBe(
      'peerload-5b6e22e97cedaa911a48b84a8d416321',
    );
  });

  it('depends on the secret and the bucket only: another access key id or session token of the same secret shares it', () => {
    const s3 = creds('s3', 's3') as Extract<StorageCredentials, { type: 's3' }>;
    const tag = credentialTag({ type: 's3', bucket: 'models' }, s3);
    expect(credentialTag({ type: 's3', bucket: 'models' }, { ...s3, accessKeyID: 'OTHER' })).toBe(tag);
    expect(
      credentialTag({ type: 's3', bucket: 'models' }, { ...s3, secretAccessKey: 'x' + s3.secretAccessKey }),
    ).not.toBe(tag);
    expect(credentialTag({ type: 's3', bucket: 'models2' }, s3)).not.toBe(tag);
    // Nothing of the secret shows in it.
    expect(tag).toMatch(/^peerload-[0-9a-f]{32}$/);
    expect(tag).not.toContain(s3.secretAccessKey.slice(0, 6));
  });

  it('is one tag for a GCS key however its PEM is written (PKCS#8 or PKCS#1)', () => {
    const gcs = creds('gcs', 'gcs') as Extract<StorageCredentials, { type: 'gcs' }>;
    const pkcs1 = createPrivateKey(gcs.privateKey).export({ format: 'pem', type: 'pkcs1' }) as string;
    expect(pkcs1).toContain('BEGIN RSA PRIVATE KEY');
    expect(credentialTag({ type: 'gcs', bucket: 'models' }, { ...gcs, privateKey: pkcs1 })).toBe(
      credentialTag({ type: 'gcs', bucket: 'models' }, gcs),
    );
  });

  it('scopes an Azure tag to the account and the container, and refuses credentials of another kind', () => {
    const abs = creds('abs', 'abs');
    const a = credentialTag({ type: 'abs', accountName: 'acct', container: 'c' }, abs);
    expect(credentialTag({ type: 'abs', accountName: 'acct2', container: 'c' }, abs)).not.toBe(a);
    expect(() => credentialTag({ type: 'abs', accountName: 'acct' }, abs)).toThrow(/no container/);
    expect(() => credentialTag({ type: 's3', bucket: 'b' }, abs)).toThrow(/type abs/);
  });

  it.each(vectors.joined.map((j) => [JSON.stringify(j), j] as const))('joins the tags as %s', (_n, j) => {
    expect(taskTag(j.tag ?? undefined, j.credential ?? undefined)).toBe(j.expected);
  });
});

const sources = JSON.parse(readFileSync('test/vectors/source-tag.json', 'utf8')) as {
  cases: (
    | {
        kind: 'oci';
        registryURL: string;
        repository: string;
        username: string;
        password: string;
        tag: string;
      }
    | { kind: 'huggingface'; endpointURL: string; repo: string; token: string; tag: string }
  )[];
};

describe('the tag of a private registry or Hub source', () => {
  it.each(sources.cases.map((c) => [`${c.kind} ${JSON.stringify(c).slice(0, 80)}`, c] as const))(
    'is the shared vector (Python hmac) for %s',
    (_name, c) => {
      const got =
        c.kind === 'oci'
          ? registryCredentialTag(c.registryURL, c.repository, c)
          : hubTokenTag(c.endpointURL, c.repo, c.token);
      expect(got).toBe(c.tag);
    },
  );

  it('derives from the long-lived credentials and the repository, never from a bearer token or the scheme', () => {
    const creds = { username: 'u', password: 'p' };
    const a = registryCredentialTag('https://r.example', 'm/x', creds);
    // Every URL of the registry names the same scope: the blob URL the agent fetches, the manifest URL a preheat names.
    expect(registryCredentialTag('https://r.example/v2/m/x/blobs/sha256:00', 'm/x', creds)).toBe(a);
    expect(registryCredentialTag('https://R.EXAMPLE:443', 'm/x', creds)).toBe(a);
    expect(registryCredentialTag('https://r.example', 'm/y', creds)).not.toBe(a);
    expect(registryCredentialTag('https://r.example', 'm/x', { ...creds, password: 'q' })).not.toBe(a);
    expect(registryCredentialTag('https://r.example', 'm/x', { ...creds, username: 'v' })).not.toBe(a);
    expect(a).toMatch(/^peerload-[0-9a-f]{32}$/);
    const h = hubTokenTag('https://huggingface.co', 'org/m', 'hf_token');
    expect(hubTokenTag('https://huggingface.co', 'org/m', 'hf_other')).not.toBe(h);
    expect(hubTokenTag('https://mirror.example', 'org/m', 'hf_token')).not.toBe(h);
    // Another kind with the same key and scope text is another tag (domain separation by kind).
    expect(hubTokenTag('https://r.example', 'm/x', 'u:p')).not.toBe(a);
    expect(h).not.toContain('hf_token');
  });
});
