/**
 * `peerload fetch STORAGE_URI DEST` as KServe's storage initializer, without the P2P network (that is
 * test/e2e/kserve-fetch-real-p2p.test.ts): KServe's URI kinds told apart as its initializer does, its environment
 * variables read with their names and defaults, every bad input a CliError naming the variable or the argument and
 * the fix (never a credential), http(s) and hf:// through the peer-proxy emulator landing directly in DEST.
 */
import { mkdir, mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CliError } from '../../src/cli/errors.ts';
import { isKServeInvocation, patterns, runKServe } from '../../src/cli/fetch-kserve.ts';
import { run } from '../../src/cli/fetch.ts';
import { credentialsOf, effectiveEnv, httpHeaders, locationOf } from '../../src/kserve/env.ts';
import { archiveKind } from '../../src/place/mount.ts';
import { parseStorageUri } from '../../src/kserve/uri.ts';
import { forgetSecrets } from '../../src/redact.ts';
import { startHubEmulator, type HubEmulator } from '../support/hub-emulator.ts';
import { gzip, tarOf } from '../support/oci-artifacts.ts';
import { startOrigin, type Origin } from '../support/origin.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';

const SECRET = 'kserveSecretKey0123456789abcdefXYZ';
const S3_ENV = { AWS_ACCESS_KEY_ID: 'AKIAKSERVE', AWS_SECRET_ACCESS_KEY: SECRET };
const HF_TOKEN = 'hf_kserveGrantedToken0123456789abcdef';

describe('KServe storage URIs', () => {
  it('tells the kinds apart as KServe does', () => {
    expect(parseStorageUri('s3://bucket/models/llm')).toEqual({
      kind: 'object',
      type: 's3',
      bucket: 'bucket',
      key: 'models/llm',
    });
    expect(parseStorageUri('gs://kfserving-examples/models/sklearn/1.0/model')).toMatchObject({
      type: 'gcs',
      bucket: 'kfserving-examples',
      key: 'models/sklearn/1.0/model',
    });
    expect(parseStorageUri('https://acct.blob.core.windows.net/models/llm/v1/')).toEqual({
      kind: 'object',
      type: 'abs',
      accountName: 'acct',
      container: 'models',
      key: 'llm/v1',
      endpoint: 'https://acct.blob.core.windows.net',
    });
    expect(parseStorageUri('https://acct.z12.blob.storage.azure.net/c/m')).toMatchObject({
      type: 'abs',
      endpoint: 'https://acct.z12.blob.storage.azure.net',
    });
    expect(parseStorageUri('https://example.com/models/model.tar.gz')).toEqual({
      kind: 'http',
      url: 'https://example.com/models/model.tar.gz',
    });
    expect(parseStorageUri('hf://org/model:abc')).toEqual({ kind: 'hf', reference: 'hf://org/model:abc' });
    expect(parseStorageUri('oci://r.example/m:1')).toEqual({ kind: 'oci', reference: 'oci://r.example/m:1' });
  });

  it.each([
    ['pvc://claim/model', /PVC.*KServe's own storage initializer/],
    ['file:///models', /local path/],
    ['/mnt/pvc/model', /PVC path/],
    ['hdfs://nn/model', /HDFS/],
    ['webhdfs://nn/model', /HDFS/],
    ['modelscope://org/model', /ModelScope/],
    ['https://acct.file.core.windows.net/share/model', /Azure file share/],
    ['https://github.com/org/repo.git', /git repository/],
    ['s3://Bad_Bucket/x', /the bucket must be a bucket name/],
    ['https://acct.blob.core.windows.net/c/m?sv=2020&sig=abc', /SAS token.*AZURE_STORAGE_ACCESS_KEY/],
    ['https://acct.blob.core.windows.net/c', /names a container and a path/],
    ['https://user:pw@example.com/m.bin', /may not carry a user and password/],
    ['https://example.com/dir/', /no file name/],
    ['ftp://example.com/m.bin', /unknown storage URI: give s3:\/\//],
    [' s3://b/k', /spaces/],
  ])('%s is refused: %s', (uri, message) => {
    expect(() => parseStorageUri(uri)).toThrow(message);
  });

  it('archives are extracted as KServe does by name; the kinds it extracts and this does not are refused', () => {
    expect(['m.tar', 'm.tar.gz', 'M.TGZ'].map(archiveKind)).toEqual(['tar', 'tar', 'tar']);
    expect(['m.zip', 'm.tar.bz2', 'm.tar.xz'].map(archiveKind)).toEqual(Array(3).fill('unsupported'));
    expect(archiveKind('model.safetensors')).toBeUndefined();
  });
});

describe("KServe's environment", () => {
  const s3 = (key = 'k') => ({ kind: 'object' as const, type: 's3' as const, bucket: 'b', key });

  it('S3: endpoint, region and addressing style with KServe names and defaults', () => {
    expect(locationOf(s3(), {})).toEqual({
      type: 's3',
      bucket: 'b',
      region: undefined,
      endpoint: undefined,
      pathStyle: false,
    });
    expect(
      locationOf(s3(), { AWS_ENDPOINT_URL: 'http://minio.svc:9000/', AWS_DEFAULT_REGION: 'eu-west-1' }),
    ).toEqual({
      type: 's3',
      bucket: 'b',
      region: 'eu-west-1',
      endpoint: 'http://minio.svc:9000',
      pathStyle: true,
    });
    expect(locationOf(s3(), { S3_ENDPOINT: 'minio.svc:9000', S3_USE_HTTPS: '0' }).endpoint).toBe(
      'http://minio.svc:9000',
    );
    expect(locationOf(s3(), { S3_ENDPOINT: 'minio.svc:9000' }).endpoint).toBe('https://minio.svc:9000');
    expect(
      locationOf(s3(), { AWS_ENDPOINT_URL: 'https://minio.svc', S3_USER_VIRTUAL_BUCKET: 'True' }).pathStyle,
    ).toBe(false);
    expect(
      locationOf(s3(), { AWS_ENDPOINT_URL: 'https://s3.amazonaws.com', AWS_REGION: 'us-west-2' }),
    ).toMatchObject({ endpoint: undefined, region: 'us-west-2' });
    expect(() => locationOf(s3(), { S3_USE_ACCELERATE: 'true' })).toThrow(
      /S3_USE_ACCELERATE=true is not supported/,
    );
  });

  it("KServe's storage spec (STORAGE_CONFIG, STORAGE_OVERRIDE_CONFIG) sets the S3 variables", () => {
    const env = effectiveEnv({
      STORAGE_CONFIG: JSON.stringify({
        type: 's3',
        access_key_id: 'A',
        secret_access_key: SECRET,
        endpoint_url: 'http://a:9000',
        region: 'r1',
      }),
      STORAGE_OVERRIDE_CONFIG: JSON.stringify({ region: 'r2' }),
    });
    expect(env).toMatchObject({
      AWS_ACCESS_KEY_ID: 'A',
      AWS_SECRET_ACCESS_KEY: SECRET,
      AWS_ENDPOINT_URL: 'http://a:9000',
      AWS_DEFAULT_REGION: 'r2',
    });
    const bad = () => effectiveEnv({ STORAGE_CONFIG: `{"secret_access_key":"${SECRET}"` });
    expect(bad).toThrow(/STORAGE_CONFIG is not a JSON object/);
    try {
      bad();
    } catch (e) {
      expect((e as Error).message).not.toContain(SECRET);
    }
  });

  it('credentials: each missing or malformed variable named, never its value', async () => {
    await expect(credentialsOf(s3(), { AWS_ACCESS_KEY_ID: 'A' })).rejects.toThrow(
      /AWS_SECRET_ACCESS_KEY is not set: the S3 secret access key/,
    );
    await expect(credentialsOf(s3(), { ...S3_ENV, awsAnonymousCredential: 'true' })).rejects.toThrow(
      /awsAnonymousCredential=true is not supported/,
    );
    expect(await credentialsOf(s3(), { ...S3_ENV, AWS_SESSION_TOKEN: 'tok' })).toEqual({
      type: 's3',
      accessKeyID: 'AKIAKSERVE',
      secretAccessKey: SECRET,
      sessionToken: 'tok',
    });
    const gcs = { kind: 'object' as const, type: 'gcs' as const, bucket: 'b', key: 'k' };
    await expect(credentialsOf(gcs, {})).rejects.toThrow(/GOOGLE_APPLICATION_CREDENTIALS is not set/);
    await expect(
      credentialsOf(gcs, { GOOGLE_APPLICATION_CREDENTIALS: '/nonexistent/sa.json' }),
    ).rejects.toThrow(/cannot read \/nonexistent\/sa.json: ENOENT/);
    const abs = {
      kind: 'object' as const,
      type: 'abs' as const,
      accountName: 'a',
      container: 'c',
      key: 'k',
      endpoint: 'https://a.blob.core.windows.net',
    };
    await expect(credentialsOf(abs, { AZURE_CLIENT_ID: 'sp' })).rejects.toThrow(
      /AZURE_STORAGE_ACCESS_KEY is not set.*service principals are not supported/,
    );
    await expect(credentialsOf(abs, { AZURE_STORAGE_ACCESS_KEY: 'not base64!' })).rejects.toThrow(
      /not a base64 account key/,
    );
    expect(await credentialsOf(abs, { AZURE_STORAGE_ACCESS_KEY: 'a2V5a2V5' })).toEqual({
      type: 'abs',
      accountKey: 'a2V5a2V5',
    });
  });

  it('http(s) headers from <host>-headers; allow/ignore patterns as a JSON array or a comma list', () => {
    expect(
      httpHeaders('https://h.example/m.bin', { 'h.example-headers': '{"Authorization":"Bearer t"}' }),
    ).toEqual({
      Authorization: 'Bearer t',
    });
    expect(() =>
      httpHeaders('https://h.example/m', { 'h.example-headers': '{"Range":"bytes=0-1"}' }),
    ).toThrow(/"Range" is not a header this command may send/);
    expect(() => httpHeaders('https://h.example/m', { 'h.example-headers': 'nope' })).toThrow(
      /h.example-headers is not a JSON object/,
    );
    expect(patterns('["*.json", "*.safetensors"]')).toEqual(['*.json', '*.safetensors']);
    expect(patterns('*.json, *.bin')).toEqual(['*.json', '*.bin']);
    expect(patterns('')).toBeUndefined();
  });

  it('the KServe contract is chosen by an s3/gs/http(s) argument or --kserve, not by a flag value', () => {
    expect(isKServeInvocation(['s3://bkt/k', '/mnt/models'])).toBe(true);
    expect(isKServeInvocation(['--proxy=http://1.2.3.4:4001', 'gs://b/k', '/mnt/models'])).toBe(true);
    expect(isKServeInvocation(['--kserve', 'hf://o/m', '/mnt/models'])).toBe(true);
    expect(isKServeInvocation(['hf://o/m', '/models'])).toBe(false);
    expect(isKServeInvocation(['--name', 'm', '--proxy', 'http://127.0.0.1:4001', '--spec', 's'])).toBe(
      false,
    );
  });
});

describe('peerload fetch STORAGE_URI DEST', () => {
  let dir: string;
  let origin: Origin;
  let peer: PeerProxy;
  let hub: HubEmulator;
  const big = Buffer.alloc(200_000, 7);

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'fetch-kserve-'));
    origin = await startOrigin({
      '/models/model.joblib': big,
      '/models/m.zip': 'zip',
      '/models/model.tar.gz': gzip(
        tarOf([
          { path: 'config.pbtxt', body: 'name: "m"\n' },
          { path: '1/', type: 'Directory' },
          { path: '1/model.onnx', body: 'onnx bytes' },
        ]),
      ),
      '/models/evil.tar': tarOf([
        { path: 'ok', body: 'x' },
        { path: '../evil', body: 'x' },
      ]),
    });
    peer = await startPeerProxy();
    hub = await startHubEmulator({
      repos: [
        {
          id: 'org/model',
          commits: [{ 'config.json': '{"a":1}', 'w.safetensors': { content: big, lfs: true } }],
        },
        { id: 'org/gated', commits: [{ 'config.json': '{"g":1}' }], gated: true },
      ],
      tokens: { [HF_TOKEN]: ['org/gated'] },
    });
  });
  afterAll(async () => {
    await hub?.close();
    await peer?.close();
    await origin?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
    forgetSecrets();
  });

  let n = 0;
  async function fetchKServe(args: string[], env: Record<string, string> = {}) {
    const dest = join(dir, `mnt-${n++}`, 'models');
    await mkdir(dest, { recursive: true });
    const out: string[] = [];
    const err: string[] = [];
    const code = await runKServe(
      [
        '--proxy',
        peer.url,
        '--min-free-bytes',
        '0',
        '--log-level',
        'error',
        ...args.map((a) => a.replace('DEST', dest)),
      ],
      { out: (l) => out.push(l), err: (l) => err.push(l) },
      env,
    );
    return { code, dest, out: out.join('\n'), err: err.join('\n') };
  }
  const refused = async (args: string[], env: Record<string, string>, message: RegExp) => {
    const e = await fetchKServe(args, env).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(CliError);
    expect((e as CliError).exitCode).toBe(2);
    expect((e as Error).message).toMatch(message);
    expect((e as Error).message).not.toContain(SECRET);
  };

  it('an http(s) file lands as that file in DEST (an existing directory, as KServe mounts it)', async () => {
    const { code, dest, out, err } = await fetchKServe([`${origin.url}/models/model.joblib`, 'DEST']);
    expect(err).toBe('');
    expect(code).toBe(0);
    expect(out).toMatch(
      /: 1 files, 200000 bytes into .*models in [\d.]+ s \(0 local hits, 1 of 1 on their expected tasks\)/,
    );
    expect(await readdir(dest)).toEqual(['model.joblib']);
    expect(await readFile(join(dest, 'model.joblib'))).toEqual(big);
  });

  it('hf://owner/model (KServe form) with --kserve: the repository files directly in DEST', async () => {
    // The mirror's CDN (the emulator's, plain HTTP on loopback) is not one of the public Hub's: refused until listed.
    const refused = await fetchKServe(['--kserve', 'hf://org/model', 'DEST'], { HF_ENDPOINT: hub.url });
    expect(refused.code).toBe(2);
    expect(refused.err).toMatch(/^peerload fetch: HubRedirectNotAllowed: .*--allowed-hub-redirect-hosts/);
    const { code, dest, err } = await fetchKServe(
      ['--kserve', '--allowed-hub-redirect-hosts', 'http://127.0.0.1', 'hf://org/model', 'DEST'],
      { HF_ENDPOINT: hub.url },
    );
    expect(err).toBe('');
    expect(code).toBe(0);
    expect((await readdir(dest)).sort()).toEqual(['config.json', 'w.safetensors']);
    expect(await readFile(join(dest, 'w.safetensors'))).toEqual(big);
  });

  it('HF_TOKEN to a mirror HF_ENDPOINT names: refused naming the variables and the flag, sent once the admin allows it', async () => {
    const env = { HF_ENDPOINT: hub.url, HF_TOKEN };
    const host = new URL(hub.url).host;
    const before = hub.hubRequests.length;
    const refusedError = async (args: string[]) => {
      const e = await fetchKServe(['--kserve', ...args, 'hf://org/gated', 'DEST'], env).catch(
        (x: unknown) => x,
      );
      expect(e).toBeInstanceOf(CliError);
      expect((e as CliError).exitCode).toBe(2);
      const m = (e as Error).message;
      expect(m).not.toContain(HF_TOKEN);
      expect(m).not.toContain('network error');
      return m;
    };
    expect(await refusedError([])).toBe(
      `HubTokenNotAllowed: HF_ENDPOINT names ${host}, which is not in --allowed-hub-hosts (huggingface.co), so the ` +
        'token of HF_TOKEN is not sent: an admin adds it to --allowed-hub-hosts (for KServe, in the ' +
        `ClusterStorageContainer command) (--allowed-hub-hosts=huggingface.co,${host}), or unset HF_TOKEN for a public repository`,
    );
    // Listed without a scheme: https only, and the mirror speaks plain HTTP.
    expect(await refusedError(['--allowed-hub-hosts', '127.0.0.1'])).toContain(
      `HubTokenNotAllowed: HF_ENDPOINT ${hub.url} is plain HTTP and --allowed-hub-hosts (127.0.0.1) allows ${host} over https only`,
    );
    expect(hub.hubRequests.length).toBe(before);
    const ok = await fetchKServe(
      ['--kserve', '--allowed-hub-hosts', 'http://127.0.0.1', 'hf://org/gated', 'DEST'],
      env,
    );
    expect(ok.err).toBe('');
    expect(ok.code).toBe(0);
    expect(await readFile(join(ok.dest, 'config.json'), 'utf8')).toBe('{"g":1}');
    expect(hub.hubRequests.slice(before).every((q) => q.authorized)).toBe(true);
  });

  it('a single .tar.gz is extracted into DEST and the archive removed; an unsafe one is exit 2, DEST left empty', async () => {
    const ok = await fetchKServe([`${origin.url}/models/model.tar.gz`, 'DEST']);
    expect(ok.err).toBe('');
    expect(ok.code).toBe(0);
    expect(ok.out).toContain(': 2 files,');
    expect((await readdir(ok.dest, { recursive: true })).sort()).toEqual([
      '1',
      '1/model.onnx',
      'config.pbtxt',
    ]);
    expect(await readFile(join(ok.dest, '1', 'model.onnx'), 'utf8')).toBe('onnx bytes');
    const evil = await fetchKServe([`${origin.url}/models/evil.tar`, 'DEST']);
    expect(evil.code).toBe(2);
    expect(evil.err).toMatch(
      /^peerload fetch: http:.*evil\.tar: UnsafeTarEntry: evil\.tar: the tar entry "\.\.\/evil"/,
    );
    expect(await readdir(evil.dest)).toEqual([]);
    await expect(readFile(join(evil.dest, '..', 'evil'))).rejects.toMatchObject({ code: 'ENOENT' });
  });

  it('a missing file is exit 1 with the reason; nothing is left in DEST', async () => {
    const { code, dest, err } = await fetchKServe([`${origin.url}/models/absent.bin`, 'DEST']);
    expect(code).toBe(1);
    expect(err).toMatch(/^peerload fetch: http:.*absent.bin: DownloadFailed: /);
    expect(await readdir(dest)).toEqual([]);
  });

  it('every bad input is exit 2 with the argument or variable named, no credential printed', async () => {
    await refused(['s3://bkt/k'], S3_ENV, /give the storage URI and the destination.*got 1 arguments/);
    await refused(['pvc://c/m', 'DEST'], {}, /not fetched through the P2P network/);
    // The endpoint's host is checked before the credentials are read: missing keys are not even noticed.
    await refused(
      ['s3://bkt/k', 'DEST'],
      { AWS_ENDPOINT_URL: 'http://minio.evil.example:9000' },
      /s3:\/\/bkt\/k: host minio.evil.example:9000 is not in the init container's --allowed-storage-hosts/,
    );
    // An allowed store over plain HTTP (S3_USE_HTTPS=0) needs the admin's http:// entry: the keys would go in clear.
    await refused(
      ['--allowed-storage-hosts', 'minio.storage.svc:9000', 's3://bkt/k', 'DEST'],
      { S3_ENDPOINT: 'minio.storage.svc:9000', S3_USE_HTTPS: '0', ...S3_ENV },
      /s3:\/\/bkt\/k: http:\/\/minio.storage.svc:9000 is plain HTTP: the init container's --allowed-storage-hosts allows minio.storage.svc:9000 over https only/,
    );
    await refused(['s3://bkt/k', 'DEST'], { AWS_ACCESS_KEY_ID: 'A' }, /AWS_SECRET_ACCESS_KEY is not set/);
    await refused(
      ['s3://bkt/k', 'DEST'],
      { STORAGE_CONFIG: `{"type":"s3","secret_access_key":"${SECRET}"` },
      /STORAGE_CONFIG is not a JSON object/,
    );
    await refused(
      [`${origin.url}/models/m.zip`, 'DEST'],
      {},
      /only .tar, .tar.gz and .tgz archives are extracted/,
    );
    await refused(
      ['--kserve', 'hf://org/model/extra', 'DEST'],
      {},
      /hf:\/\/owner\/model or hf:\/\/owner\/model:revision/,
    );
    await refused(['--max-files', '0', 's3://bkt/k', 'DEST'], S3_ENV, /--max-files: must be an integer/);
    await refused(
      ['--allowed-storage-hosts', '[bad', 's3://bkt/k', 'DEST'],
      S3_ENV,
      /--allowed-storage-hosts/,
    );
    await refused(['--deadline', 'soon', `${origin.url}/models/model.joblib`, 'DEST'], {}, /--deadline/);
  });

  it('a listing that fails is exit 1, the keys not printed', async () => {
    const { code, err } = await fetchKServe(
      ['--allowed-storage-hosts', 'http://127.0.0.1', 's3://bkt/k', 'DEST'],
      {
        ...S3_ENV,
        AWS_ENDPOINT_URL: 'http://127.0.0.1:1',
      },
    );
    expect(code).toBe(1);
    expect(err).toMatch(/^peerload fetch: s3:\/\/bkt\/k: the listing failed: /);
    expect(err).not.toContain(SECRET);
  });

  it('every URI it prints is redacted: a presigned query keeps its names, never its values', async () => {
    const SIGNATURE = 'planted0presigned0signature0c0ffee';
    const TOKEN = 'planted-session-token-5e1f';
    const query = `?X-Amz-Credential=AKIAPLANTEDKEY%2F20261129&X-Amz-Security-Token=${TOKEN}&X-Amz-Signature=${SIGNATURE}`;
    const planted = [SIGNATURE, TOKEN, 'AKIAPLANTEDKEY'];
    const clean = (text: string) => {
      for (const p of planted) expect(text).not.toContain(p);
    };
    // Placed: the one line names the URI.
    const ok = await fetchKServe([`${origin.url}/models/model.joblib${query}`, 'DEST']);
    expect(ok.code).toBe(0);
    expect(ok.out).toContain(
      '/models/model.joblib?X-Amz-Credential=***&X-Amz-Security-Token=***&X-Amz-Signature=***',
    );
    clean(`${ok.out}\n${ok.err}`);
    // Failed: the reason line names it.
    const missing = await fetchKServe([`${origin.url}/models/absent.bin${query}`, 'DEST']);
    expect(missing.code).toBe(1);
    expect(missing.err).toContain('absent.bin?X-Amz-Credential=***');
    clean(`${missing.out}\n${missing.err}`);
    // Refused: the CliError names it.
    const e = await fetchKServe([`${origin.url}/models/m.zip${query}`, 'DEST']).catch((x: unknown) => x);
    expect(e).toBeInstanceOf(CliError);
    expect((e as Error).message).toContain('m.zip?X-Amz-Credential=***');
    clean((e as Error).message);
    // The same through the fetch command's entry (all forms).
    const out: string[] = [];
    const dest = join(dir, 'via-run', 'models');
    await mkdir(dest, { recursive: true });
    const args = ['--proxy', peer.url, '--min-free-bytes', '0', '--log-level', 'error'];
    expect(
      await run([...args, `${origin.url}/models/model.joblib${query}`, dest], {
        out: (l) => out.push(l),
        err: (l) => out.push(l),
      }),
    ).toBe(0);
    expect(out.join('\n')).toContain('X-Amz-Signature=***');
    clean(out.join('\n'));
  });

  it('the fetch command hands a KServe URI to this contract; --help prints its usage', async () => {
    const out: string[] = [];
    expect(await run(['--kserve', '--help'], { out: (l) => out.push(l), err: () => undefined })).toBe(0);
    expect(out.join('\n')).toContain('KServe');
  });
});
