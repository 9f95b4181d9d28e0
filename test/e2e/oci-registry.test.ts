/**
 * The registry client against the REAL registry (Distribution v3) with token auth switched on: it demands Bearer
 * tokens from the token service of test/support/registry-token.ts and verifies them itself (signature, issuer,
 * audience, expiry, granted actions). modctl logs in and pushes a model there; `peerload fetch oci://…` with the
 * credentials from a dockerconfigjson file places it (through the peer-proxy emulator: the real network is
 * test/e2e/oci-real-p2p.test.ts), and anonymous pulls, a wrong password and a user without pull access are refused
 * in the registry's terms, with nothing placed and no password in any message.
 */
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Agent } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RegistryClient } from '../../src/oci/client.ts';
import { OciError, OciReason } from '../../src/oci/errors.ts';
import { readModelManifest } from '../../src/cli/fetch-oci-place.ts';
import { parseReference } from '../../src/oci/reference.ts';
import { parseHostRules } from '../../src/policy/reach.ts';
import { modctl, peerloadFetch, pushTritonModel } from '../support/modctl.ts';
import { startPeerProxy, type PeerProxy } from '../support/peer-proxy.ts';
import { startTokenServer, type TokenServer } from '../support/registry-token.ts';
import { startRegistry, type Registry } from '../support/registry.ts';

const PASSWORD = 'alice-registry-password-42';
const FILES = { config: 'name: "simple"\n', weights: randomBytes(1024 * 1024), code: 'x = 1\n' };

describe('the real registry with token auth', () => {
  let tokens: TokenServer;
  let registry: Registry;
  let peer: PeerProxy;
  let dispatcher: Agent;
  let dir: string;
  let reference: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'oci-registry-'));
    tokens = await startTokenServer({
      users: { alice: PASSWORD, mallory: 'mallory-password-99' },
      noAccess: ['mallory'],
    });
    registry = await startRegistry({ tokens });
    peer = await startPeerProxy();
    dispatcher = new Agent();
    reference = `${registry.host}/models/simple:v1`;
    const m = await modctl(join(dir, 'modctl'));
    await m(
      ['login', '-u', 'alice', '-p', PASSWORD, '--password-stdin=false', '--plain-http', registry.host],
      dir,
    );
    await pushTritonModel(m, join(dir, 'src'), reference, FILES);
  });
  afterAll(async () => {
    await dispatcher?.close();
    await peer?.close();
    await registry?.stop();
    await tokens?.close();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const client = (credentials?: { username: string; password: string }) =>
    new RegistryClient(registry.host, {
      dispatcher,
      plainHTTP: true,
      credentials,
      allowedHosts: parseHostRules('http://127.0.0.1'),
    });

  it('resolves the tag with a token the registry verified, and refuses anonymous, wrong and unauthorised pulls', async () => {
    const m = await readModelManifest(
      client({ username: 'alice', password: PASSWORD }),
      parseReference(reference),
    );
    expect(m.layers).toHaveLength(3);
    expect(
      tokens.requests.some(
        (r) => r.user === 'alice' && r.scope === 'repository:models/simple:pull' && r.status === 200,
      ),
    ).toBe(true);
    // By digest too: the bytes hash to it.
    const byDigest = await readModelManifest(
      client({ username: 'alice', password: PASSWORD }),
      parseReference(`${registry.host}/models/simple@${m.digest}`),
    );
    expect(byDigest.digest).toBe(m.digest);

    const cases: [{ username: string; password: string } | undefined, OciReason, RegExp][] = [
      [undefined, OciReason.Unauthorized, /refused an anonymous pull .*401/],
      [
        { username: 'alice', password: 'not-the-password-7' },
        OciReason.Unauthorized,
        /token service .* refused the credentials/,
      ],
      [
        { username: 'mallory', password: 'mallory-password-99' },
        OciReason.Unauthorized,
        /401, insufficient_scope\): they lack pull permission/,
      ],
    ];
    for (const [credentials, reason, why] of cases) {
      const e = await readModelManifest(client(credentials), parseReference(reference)).catch(
        (x: unknown) => x,
      );
      expect(e).toBeInstanceOf(OciError);
      expect((e as OciError).reason).toBe(reason);
      expect((e as OciError).message).toMatch(why);
      expect((e as OciError).message).not.toContain('password-');
    }
  });

  it('peerload fetch places it with credentials from a dockerconfigjson file, and refuses them for a host not allowed', async () => {
    const config = join(dir, 'dockerconfig.json');
    await writeFile(
      config,
      JSON.stringify({
        auths: { [registry.host]: { auth: Buffer.from(`alice:${PASSWORD}`).toString('base64') } },
      }),
    );
    const root = join(dir, 'models', 'simple');
    await mkdir(root, { recursive: true });
    const run = (extra: string[]) =>
      peerloadFetch([
        `oci://${reference}`,
        join(root, '1'),
        '--proxy',
        peer.url,
        '--plain-http',
        '--min-free-bytes',
        '0',
        '--registry-credentials',
        config,
        ...extra,
      ]);
    const refused = await run(['--allowed-registry-hosts', 'registry.example.com']);
    expect(refused.code).toBe(2);
    expect(refused.err.join('\n')).toMatch(/RegistryNotAllowed: .*not in the allowed registry hosts/);
    expect(await readdir(root)).toEqual([]);

    const placed = await run(['--allowed-registry-hosts', 'http://127.0.0.1']);
    expect(placed.err).toEqual([]);
    expect(placed.code).toBe(0);
    expect(placed.out[0]).toMatch(/^fetched .* 3 layers, 3 files/);
    expect(await readFile(join(root, '1/1/weights.bin'))).toEqual(FILES.weights);
    expect(await readFile(join(root, '1/1/model.py'), 'utf8')).toBe(FILES.code);
    // The blobs went through the proxy with the Bearer token (the registry verified it: they were served).
    expect(peer.requests.filter((q) => q.url.includes('/blobs/sha256:'))).toHaveLength(3);
  });
});
